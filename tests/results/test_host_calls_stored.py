"""A training result's Python calls per step (``summary.host_calls_per_step``) load into ``training_runs``;
an older result without it loads with a null, and a negative count is refused."""

from __future__ import annotations

import pytest
from factories import query_db, training_doc, write_docs

from shardscope.errors import UserError
from shardscope.results.store import collect


def test_the_recorded_python_calls_are_stored_and_older_results_give_null(tmp_path):
    doc = training_doc("zero3")
    doc["summary"]["host_calls_per_step"] = 15_321
    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "in", [doc, training_doc("ddp", host="old")]))
    assert query_db(db, "SELECT strategy, host_calls_per_step FROM training_runs ORDER BY strategy") == [
        ("ddp", None), ("zero3", 15_321)]


def test_a_negative_count_is_refused(tmp_path):
    doc = training_doc("ddp")
    doc["summary"]["host_calls_per_step"] = -3
    with pytest.raises(UserError, match="host_calls_per_step"):
        collect(tmp_path / "r.duckdb", write_docs(tmp_path / "in", [doc]))
