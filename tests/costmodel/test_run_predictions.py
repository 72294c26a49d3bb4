"""The predictions stage writes the modeled rows of measured runs; collect runs no model (issue 34)."""

from __future__ import annotations

import json
import subprocess
import sys

from factories import collective_doc, query_db, training_doc, with_run_predictions, write_docs

from shardscope.costmodel.memory_model import predict_memory
from shardscope.costmodel.run_predictions import run_predictions
from shardscope.results.documents import run_id_for
from shardscope.results.store import collect


def test_collect_alone_stores_no_modeled_rows(tmp_path) -> None:
    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "in", [training_doc("ddp"), training_doc("zero2")]))
    assert query_db(db, "SELECT count(*) FROM memory_predictions") == [(0,)]
    assert query_db(db, "SELECT count(*) FROM memory_peak_predictions") == [(0,)]
    assert query_db(db, "SELECT count(modeled_bytes) FROM strategy_summary") == [(0,)]


def test_the_document_names_each_training_run_and_skips_other_kinds() -> None:
    ddp, zero3 = training_doc("ddp"), training_doc("zero3")
    doc = run_predictions([ddp, collective_doc(), zero3])
    assert (doc["kind"], doc["method"]) == ("run_predictions", "modeled")
    assert [r["measured_run_id"] for r in doc["memory"]] == [run_id_for(ddp), run_id_for(zero3)]
    assert doc["memory"][1]["total_bytes"] == predict_memory(787072, "zero3", 2, "float32")["total_bytes"]
    assert {(r["measured_run_id"], r["memory_model"]) for r in doc["memory_terms"]} == {
        (run_id_for(d), m) for d in (ddp, zero3) for m in ("ZeRO paper", "implementation")}


def test_a_run_modeled_twice_is_compared_once_with_its_latest_prediction(tmp_path) -> None:
    db = tmp_path / "r.duckdb"
    paths = with_run_predictions(write_docs(tmp_path / "in", [training_doc("ddp")]))
    collect(db, paths)
    later = json.loads(open(paths[-1]).read())
    later["created_at"], later["model_version"] = "2999-01-01T00:00:00+00:00", "costmodel/next"
    later["memory"][0]["total_bytes"] += 1
    later["memory"][0]["optim_bytes"] += 1
    (tmp_path / "later.json").write_text(json.dumps(later))
    collect(db, [str(tmp_path / "later.json")])
    assert query_db(db, "SELECT count(*) FROM memory_predictions") == [(2,)]
    assert query_db(db, "SELECT modeled_bytes FROM strategy_summary") == [(16 * 787072 + 1,)]


def test_predict_runs_writes_the_document_and_refuses_a_broken_file(tmp_path) -> None:
    [path] = write_docs(tmp_path / "in", [training_doc("fsdp")])
    out = tmp_path / "runs.json"
    cmd = [sys.executable, "-m", "shardscope", "predict", "runs", "--out", str(out)]
    proc = subprocess.run([*cmd, path], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert [r["strategy"] for r in json.loads(out.read_text())["memory"]] == ["fsdp"]
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    proc = subprocess.run([*cmd, str(broken)], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and str(broken) in proc.stderr and "Traceback" not in proc.stderr
    assert [r["strategy"] for r in json.loads(out.read_text())["memory"]] == ["fsdp"]  # no partial output
