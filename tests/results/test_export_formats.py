"""`db export` into a new folder only (or replaced whole with --force), Parquet with units and meanings in the
field metadata, per-step JSONL for experiment trackers, and `db schema`'s data dictionary (issue 33)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from factories import collective_doc, training_doc, write_docs

from shardscope.cli import main
from shardscope.results.ddl import column_docs
from shardscope.results.store import collect


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "r.duckdb"
    collect(path, write_docs(tmp_path / "in", [collective_doc("all_reduce"), training_doc("ddp"),
                                               training_doc("fsdp", step_time_s=0.025)]))
    return path


def test_an_existing_folder_is_refused_and_force_replaces_it_whole(db: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    assert main(["db", "export", "--db", str(db), "--out", str(out)]) == 2
    assert "the folder exists" in capsys.readouterr().err and [p.name for p in out.iterdir()] == ["mine.txt"]
    assert main(["db", "export", "--db", str(db), "--out", str(out), "--format", "csv"]) == 2
    assert main(["db", "export", "--db", str(db), "--out", str(out), "--force"]) == 0
    names = {p.name for p in out.iterdir()}
    assert "mine.txt" not in names and "runs.parquet" in names and "schema.sql" in names
    assert main(["db", "export", "--db", str(db), "--out", str(out), "--format", "jsonl", "--force"]) == 0
    assert [p.name for p in out.iterdir()] == ["training_steps.jsonl"]  # never a mixed folder
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_parquet_fields_carry_unit_and_meaning(db: Path, tmp_path: Path) -> None:
    assert main(["db", "export", "--db", str(db), "--out", str(tmp_path / "pq")]) == 0
    fields = {f.name: f.metadata for f in pq.read_schema(tmp_path / "pq" / "collectives.parquet")}
    assert fields["busbw_gbps"][b"unit"].startswith(b"GB/s")
    assert fields["busbw_gbps"][b"description"] == column_docs("collectives")["busbw_gbps"][1].encode()
    assert fields["busbw_gbps"][b"description"]
    view = {f.name: f.metadata for f in pq.read_schema(tmp_path / "pq" / "strategy_summary.parquet")}
    assert view["step_time_vs_ddp"][b"description"].startswith(b"median step time over DDP's")


def test_jsonl_has_each_steps_loss_time_throughput_mfu_and_memory(db: Path, tmp_path: Path) -> None:
    assert main(["db", "export", "--db", str(db), "--out", str(tmp_path / "steps"), "--format", "jsonl"]) == 0
    lines = [json.loads(line) for line in (tmp_path / "steps" / "training_steps.jsonl").read_text().splitlines()]
    ddp = [line for line in lines if line["strategy"] == "ddp"]
    assert len(lines) == 2 * len(training_doc("ddp")["steps"]) and [line["step"] for line in ddp] == sorted(line["step"] for line in ddp)
    assert set(ddp[0]["metrics"]) == {"loss", "step_time_s", "tokens_per_s", "mfu", "peak_memory_bytes"}
    doc = training_doc("ddp")
    first = ddp[0]["metrics"]
    assert first["step_time_s"] == pytest.approx(doc["steps"][0]["step_time_s"])
    assert first["tokens_per_s"] == pytest.approx(doc["summary"]["tokens_per_s"] * doc["summary"]["median_step_time_s"]
                                                  / doc["steps"][0]["step_time_s"])


def test_schema_prints_the_data_dictionary(capsys) -> None:
    assert main(["db", "schema"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["table", "column", "type", "unit", "meaning"]
    busbw = next(line for line in lines if line.split()[:2] == ["collectives", "busbw_gbps"])
    assert "DOUBLE" in busbw and "GB/s" in busbw and column_docs("collectives")["busbw_gbps"][1].split()[0] in busbw
