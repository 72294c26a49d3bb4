"""Every field a worker writes lands in a column: optional fields, launcher failure records, imported logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import REPO, collective_doc, query_db, training_doc, write_docs

from shardscope.cli import main
from shardscope.errors import UserError
from shardscope.results.store import collect
from shardscope.training.launch import failure_document


def test_optional_worker_fields_are_stored(tmp_path):
    coll = collective_doc("all_reduce")
    for row in coll["rows"]:
        row["wrong"] = 0
    coll["rows"][0].pop("check_ok")  # an unchecked size: no verdict
    coll["rows"][0]["wrong"] = None
    coll["env"].update(comm_library="nccl 2.21.5", cuda="12.4", backend="nccl", device_type="cuda")
    train = training_doc("ddp")
    train["summary"]["comm_time_share"] = 0.25
    for rank, share in zip(train["ranks"], (0.2, 0.3)):
        rank["comm_time_share"] = share
    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "in", [coll, train]))
    assert query_db(db, "SELECT size_bytes, check_ok, wrong FROM collectives ORDER BY 1") == [
        (1024, None, None), (16384, True, 0), (262144, True, 0), (1048576, True, 0)]
    assert query_db(db, "SELECT kind, comm_library, nccl_version, cuda_version FROM runs ORDER BY 1") == [
        ("collectives", "nccl 2.21.5", "2.21.5", "12.4"), ("training", None, None, None)]
    assert query_db(db, "SELECT comm_time_share FROM training_runs") == [(0.25,)]
    assert query_db(db, "SELECT rank, comm_time_share FROM training_memory ORDER BY 1") == [(0, 0.2), (1, 0.3)]


def test_a_check_verdict_that_contradicts_the_wrong_count_is_refused(tmp_path):
    coll = collective_doc("all_reduce")
    for row in coll["rows"]:
        row["wrong"] = 0
    coll["rows"][2]["wrong"] = 12
    (path,) = write_docs(tmp_path, [coll])
    with pytest.raises(UserError, match=r"table collectives, row 2, column \(row check\): failed check_ok must be true exactly when wrong is 0"):
        collect(tmp_path / "r.duckdb", [path])
    assert not (tmp_path / "r.duckdb").exists()


def _failure(tmp_path: Path, name: str, error: str) -> str:
    """What `shardscope train` leaves when torchrun fails: the launcher's record, without env."""
    out = tmp_path / name / "zero3-tiny-ws2-local.json"
    out.parent.mkdir(parents=True)
    (tmp_path / name / "zero3-tiny-ws2-local.json.rank0.error.json").write_text(json.dumps({"oom": False, "error": error}))
    job = {"job_id": "zero3-tiny-ws2-local", "strategy": "zero3", "model": "tiny", "placement": "local"}
    out.write_text(json.dumps(failure_document(job, str(out), 2, 1, "log.txt")))
    return str(out)


def test_launcher_failure_records_load_and_different_failures_are_different_runs(tmp_path):
    db = tmp_path / "r.duckdb"
    first = _failure(tmp_path, "a", "RuntimeError: boom")
    second = _failure(tmp_path, "b", "RuntimeError: another boom")
    collect(db, [first])
    summary = collect(db, [first, second])
    assert (summary["new_runs"], summary["skipped_runs"]) == (1, 1)
    rows = query_db(db, "SELECT t.outcome, t.error, r.host, r.world_size FROM training_runs t JOIN runs r USING (run_id) ORDER BY 2")
    assert rows == [("failed", "RuntimeError: another boom", None, 2), ("failed", "RuntimeError: boom", None, 2)]
    assert query_db(db, "SELECT count(*) FROM memory_predictions") == [(0,)]  # no dtype recorded: nothing to model


def test_an_imported_log_keeps_its_placement_and_transport(tmp_path):
    src = REPO / "tests" / "data" / "nccl-tests" / "all_reduce_perf-gen2-2x8-h100-16ranks.txt"
    out = tmp_path / "import.json"
    assert main(["collectives", "import", str(src), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    doc.update(placement="island", transport="pcie")
    out.write_text(json.dumps(doc))
    db = tmp_path / "r.duckdb"
    collect(db, [str(out)])
    assert query_db(db, "SELECT source, placement, transport, world_size, host FROM runs") == [("nccl-tests", "island", "pcie", 16, None)]
    assert query_db(db, "SELECT count(*), count(time_max_s), count(check_ok) FROM collectives") == [(62, 0, 0)]
