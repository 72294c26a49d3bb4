"""Training results with repeats, fair settings and measured bytes per collective load into the database;
older results without them still load (the new columns are null), and a wrong volume is refused."""

from __future__ import annotations

import pytest
from factories import query_db, training_doc, write_docs

from shardscope.errors import UserError
from shardscope.results.store import collect


def _fair_doc(strategy: str = "zero3") -> dict:
    doc = training_doc(strategy)
    doc["job"]["repeats"] = 3
    doc["summary"].update(repeats=3, ci95_low_step_time_s=0.018, ci95_high_step_time_s=0.023,
                          ci95_low_tokens_per_s=256 / 0.023, ci95_high_tokens_per_s=256 / 0.018)
    doc["settings"] = {"strategy": strategy, "compute_dtype": "float32", "reduce_dtype": "float32", "overlap_comm": True,
                       "prefetch": "stage3_prefetch_bucket_size=50000000 elements", "bucket_policy": "framework_default"}
    psi = doc["job"]["param_count"]
    doc["summary"]["comm_bytes"] = {
        "measured": {"method": "measured", "volume_bytes": 8 * psi, "per_op": [
            {"op": "all_gather", "dtype": "float32", "calls": 3, "size_bytes": 4 * psi, "volume_bytes": 4 * psi},
            {"op": "reduce_scatter", "dtype": "float32", "calls": 3, "size_bytes": 4 * psi, "volume_bytes": 4 * psi}]},
        "modeled": {"method": "modeled", "psi_factor": 3, "volume_bytes": 12 * psi},
        "implementation": {"method": "modeled", "psi_factor": 2, "volume_bytes": 8 * psi}}
    for i, step in enumerate(doc["steps"]):
        step["repeat"] = i
    return doc


def test_repeats_settings_and_bytes_are_stored(tmp_path):
    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "in", [_fair_doc(), training_doc("ddp", host="old")]))
    rows = query_db(db, "SELECT strategy, repeats, round(ci95_low_step_time_s, 3), overlap_comm, reduce_dtype, bucket_policy,"
                        " comm_volume_bytes, comm_modeled_volume_bytes, comm_implementation_volume_bytes, settings_json IS NOT NULL"
                        " FROM training_runs ORDER BY strategy")
    psi = 787072
    assert rows == [("ddp", None, None, None, None, None, None, None, None, False),  # an older document: nulls
                    ("zero3", 3, 0.018, True, "float32", "framework_default", 8 * psi, 12 * psi, 8 * psi, True)]
    assert query_db(db, "SELECT op, calls, size_bytes, volume_bytes FROM training_comm ORDER BY op") == [
        ("all_gather", 3, 4 * psi, 4 * psi), ("reduce_scatter", 3, 4 * psi, 4 * psi)]
    assert query_db(db, "SELECT count(*) FROM training_steps WHERE repeat IS NOT NULL") == [(3,)]


def test_a_volume_that_does_not_follow_its_op_is_refused(tmp_path):
    doc = _fair_doc("ddp")
    doc["summary"]["comm_bytes"]["measured"]["per_op"] = [
        {"op": "all_reduce", "dtype": "float32", "calls": 1, "size_bytes": 100, "volume_bytes": 100}]  # should be 200
    with pytest.raises(UserError, match="volume_bytes"):
        collect(tmp_path / "r.duckdb", write_docs(tmp_path / "in", [doc]))
    assert not (tmp_path / "r.duckdb").exists() or query_db(tmp_path / "r.duckdb", "SELECT count(*) FROM runs") == [(0,)]
