"""Predictions, verdicts and doctor findings travel through reload, `db merge`, `db export` and a layout upgrade."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pandas as pd
from factories import collective_doc, query_db, training_doc, write_docs, write_json

from shardscope.cli import main
from shardscope.results.sources import open_results
from shardscope.results.ddl import SCHEMA_VERSION, VIEWS
from shardscope.results.merge import merge
from shardscope.results.queries_decision import decision_cells
from shardscope.results.schemas import TABLES
from shardscope.results.store import collect

DERIVED_TABLES = ("collective_predictions", "strategy_predictions", "verdicts", "verdict_rows", "doctor_findings",
                  "decision_map_cells", "memory_model_cases")


def _counts(db: Path) -> dict[str, int]:
    return {t: query_db(db, f"SELECT count(*) FROM {t}")[0][0] for t in TABLES}


def _machine(tmp: Path, name: str, predictions: dict, verdicts: dict[str, str], doctor: dict, h200: dict) -> Path:
    """One machine's database: measured runs, the H200 predictions, the #293 verdicts and a doctor run, loaded twice."""
    db = tmp / f"{name}.duckdb"
    inputs = [write_json(tmp / name / "topology.json", h200), write_json(tmp / name / "predictions.json", predictions),
              verdicts["topology"], verdicts["gdr"], verdicts["nps4"], verdicts["verdicts"],
              write_json(tmp / name / "doctor.json", doctor),
              *write_docs(tmp / name, [collective_doc(host=name), training_doc("ddp", host=name)])]
    assert collect(db, inputs)["new_runs"] == 7
    reload = collect(db, inputs)
    assert (reload["new_runs"], reload["skipped_runs"]) == (0, 7)
    return db


def test_derived_tables_merge_once_and_export(tmp_path, predictions_doc, verdict_inputs, doctor_doc, h200_topology):
    a = _machine(tmp_path, "hostA", predictions_doc, verdict_inputs, doctor_doc, h200_topology)
    b = _machine(tmp_path, "hostB", predictions_doc, verdict_inputs, {**doctor_doc, "host": "hostB"}, h200_topology)
    assert all(_counts(a)[t] > 0 for t in DERIVED_TABLES)
    merged = tmp_path / "merged.duckdb"
    summary = merge(merged, [str(a), str(b)])
    # shared documents (same predictions, same verdicts, same imports) are one run; each host's own runs are two
    assert summary["new_runs"] == 7 + 3
    assert merge(merged, [str(a), str(b)])["new_runs"] == 0
    counts = _counts(merged)
    assert counts["doctor_findings"] == 2 * _counts(a)["doctor_findings"]
    for table in ("collective_predictions", "strategy_predictions", "verdicts", "verdict_rows", "decision_map_cells",
                  "memory_model_cases"):
        assert counts[table] == _counts(a)[table], table
    with open_results(merged) as con, open_results(a) as one:  # figure 5 of the merged database: the same stored cells
        pd.testing.assert_frame_equal(decision_cells(con), decision_cells(one))
        assert not decision_cells(con).empty
    same = "SELECT * EXCLUDE (run_id) FROM verdicts ORDER BY source_file"
    assert query_db(merged, same) == query_db(a, same)  # judged_run_id and topology_hash survive the merge
    assert query_db(merged, "SELECT count(*) FROM verdicts v JOIN runs r ON r.run_id = v.judged_run_id") == [(2,)]

    out = tmp_path / "export"
    assert main(["db", "export", "--db", str(merged), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([*(f"{t}.parquet" for t in TABLES), *(f"{v}.parquet" for v in VIEWS),
                                                            "schema.sql"])
    with duckdb.connect() as con:
        for table in DERIVED_TABLES:
            assert con.execute(f"SELECT count(*) FROM '{out / (table + '.parquet')}'").fetchone()[0] == counts[table], table
    schema = (out / "schema.sql").read_text()
    assert "CREATE TABLE IF NOT EXISTS strategy_predictions (" in schema
    assert re.search(r"COMMENT ON COLUMN verdicts\.latency_floor_us IS '.+; unit: microseconds'", schema)


def test_a_layout_2_database_is_upgraded_by_collect_and_by_merge(tmp_path, predictions_doc):
    old = tmp_path / "old.duckdb"
    collect(old, write_docs(tmp_path / "in", [collective_doc(), training_doc("zero1")]))
    with duckdb.connect(str(old)) as con:  # what layout 2 wrote: none of the derived tables
        for table in DERIVED_TABLES:
            con.execute(f"DROP TABLE {table}")
        con.execute("UPDATE shardscope_meta SET value = 'shardscope.results/2' WHERE key = 'schema'")
    merged = tmp_path / "merged.duckdb"
    assert merge(merged, [str(old)])["new_runs"] == 2
    assert all(_counts(merged)[t] == 0 for t in DERIVED_TABLES)
    collect(old, [write_json(tmp_path / "p.json", predictions_doc)])
    assert query_db(old, "SELECT value FROM shardscope_meta") == [(SCHEMA_VERSION,)] and SCHEMA_VERSION.endswith("/4")
    assert query_db(old, "SELECT count(*) FROM collective_predictions") == [(len(predictions_doc["collectives"]),)]
    assert merge(merged, [str(old)])["new_runs"] == 1


def test_a_database_of_a_later_layout_is_refused(tmp_path):
    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "in", [collective_doc()]))
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE shardscope_meta SET value = 'shardscope.results/5' WHERE key = 'schema'")
    before = db.read_bytes()
    assert main(["collect", "--db", str(db), *write_docs(tmp_path / "more", [training_doc()])]) == 2
    assert db.read_bytes() == before
