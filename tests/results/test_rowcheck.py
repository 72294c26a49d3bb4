"""results.rowcheck: the rows of a collect checked as plain values must get pandera's decision and pandera's values.

The rows are those collect builds from real documents (the factories' collective and training
documents, the H200 plan's predictions, the #293 verdicts of a tests/data nccl-tests log, the
doctor's findings, the H200 topology: tests/results/conftest.py). Each damaged copy breaks one
check of one column once (a bound, an allowed set, a string length, a null where none is
allowed, a wrong type, an infinity, a repeated key). Whenever the fast path accepts rows,
pandera must accept them too and store the same values; where pandera rejects them, the fast
path must not accept them (collect then takes pandera's path, which words the problems).
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pandera.errors
import pytest
from factories import collective_doc, training_doc, write_docs, write_json

from shardscope.results import rowcheck, store
from shardscope.results.documents import tables_from_document
from shardscope.results.documents_derived import link_judged_runs
from shardscope.results.rowcheck import arrow_rows, scalar_table
from shardscope.results.schemas import TABLES, columns
from shardscope.results.store import arrow_frame, collect, read_document


@pytest.fixture
def inputs(tmp_path: Path, predictions_doc, verdicts_doc, doctor_doc, h200_topology, verdict_inputs) -> list[str]:
    """One document of each kind collect reads, as files."""
    docs = [collective_doc("all_reduce"), collective_doc("all_gather"), training_doc("ddp"), training_doc("zero3")]
    paths = write_docs(tmp_path / "in", docs) + [write_json(tmp_path / f"{name}.json", doc) for name, doc in (
        ("predictions", predictions_doc), ("doctor", doctor_doc), ("verdicts", verdicts_doc), ("topology", h200_topology))]
    return paths + [verdict_inputs["gdr"]]


@pytest.fixture
def rows(inputs: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows as collect builds them from ``inputs``, before validation."""
    parsed = [(p, tables_from_document(read_document(p), p)) for p in inputs]
    link_judged_runs(parsed)
    found: dict[str, list[dict[str, Any]]] = {}
    for _, tables in parsed:
        for table, table_rows in tables.items():
            found.setdefault(table, []).extend(table_rows)
    for row in found.get("runs", []):
        row.setdefault("content_digest", "0" * 64)
    return {table: table_rows for table, table_rows in found.items() if table_rows}


def _pandera(table: str, table_rows: list[dict[str, Any]]) -> Any:
    """pandera's decision on the rows: the validated rows as the Arrow table collect stores, or None."""
    try:
        return arrow_frame(table, TABLES[table].validate(pd.DataFrame(table_rows, columns=columns(table)), lazy=True))
    except pandera.errors.SchemaErrors:
        return None


def test_every_table_is_read_into_scalar_rules():
    assert all(scalar_table(table) is not None for table in TABLES)


def test_real_rows_pass_and_are_stored_as_pandera_returns_them(rows):
    assert len(rows) >= 15, sorted(rows)
    for table, table_rows in rows.items():
        fast = arrow_rows(table, table_rows)
        assert fast is not None, table
        expected = _pandera(table, table_rows)
        assert expected is not None and fast.equals(expected), table


def _violations(col: Any) -> list[Any]:
    """Values that break each of the column's checks once: its bounds, its allowed set, its string length,
    its type (a string or an int where pandas converts), an infinity, and a null where the column allows none."""
    bad: list[Any] = ["x" if col.kind != "string" else 7, math.inf, True, 1.5]
    if not col.nullable:
        bad += [None, math.nan]
    for predicate in col.scalar:
        kwargs = predicate.keywords
        for name in ("min_value", "max_value", "value"):
            bound = kwargs.get(name)
            if isinstance(bound, (int, float)) and not isinstance(bound, bool):
                bad += [bound - 1 if name == "min_value" else bound + 1, bound]
        if predicate.func is rowcheck._str_length:
            low, high = kwargs.get("min_value"), kwargs.get("max_value")
            bad += ["" if low is None else "a" * max(low - 1, 0), "b" * ((high or kwargs.get("exact_value") or 1) + 1)]
        if "allowed_values" in kwargs:
            bad += ["not-one-of-them"]
    return bad


def test_each_check_broken_once_is_refused_where_pandera_refuses(rows):
    """Fast accepts => pandera accepts, with the same stored values; pandera refuses => fast refuses.

    Every damaged case the fast path accepts goes to pandera; one more case per table holds
    a null in every nullable column at once.
    """
    accepted = refused = 0
    for table, table_rows in rows.items():
        spec = scalar_table(table)
        base = table_rows[:1]
        nulls = copy.deepcopy(base)
        nulls[0].update({col.name: None for col in spec.columns if col.nullable})
        cases = [base * 2, nulls]
        for col in spec.columns:
            for value in _violations(col):
                damaged = copy.deepcopy(base)
                damaged[0][col.name] = value
                cases.append(damaged)
        for case in cases:
            fast = arrow_rows(table, case)
            if fast is None:
                refused += 1
                continue
            accepted += 1
            expected = _pandera(table, case)
            assert expected is not None and fast.equals(expected), (table, case[0])
    print(f"fast path: {accepted} damaged cases accepted (pandera agreed), {refused} refused")
    assert refused > 1000 and accepted > 20  # both sides of the comparison are exercised


def test_refused_cases_include_every_kind_of_check(rows):
    """The scalar rules are applied: each kind of violation pandera rejects is refused by the fast path."""
    def refused(table: str, column: str, value: Any) -> bool:
        damaged = copy.deepcopy(rows[table][:1])
        damaged[0][column] = value
        assert _pandera(table, damaged) is None, (table, column, value)  # pandera rejects it ...
        return arrow_rows(table, damaged) is None  # ... and so does the fast path

    assert refused("collectives", "size_bytes", 0)  # gt
    assert refused("collectives", "time_s", math.inf)  # the shared finite check
    assert refused("collectives", "op", "all_to_nowhere")  # isin
    assert refused("runs", "run_id", "short")  # str_length
    assert refused("runs", "source_file", None)  # not nullable
    assert refused("training_runs", "mfu", 1.5)  # le
    assert refused("collectives", "size_bytes", "x")  # not coercible
    assert refused("collectives", "algbw_gbps", 1e6)  # a dataframe check: algbw must equal size / time
    doubled = rows["collectives"][:1] * 2
    assert _pandera("collectives", doubled) is None and arrow_rows("collectives", doubled) is None  # unique key


TIMES = ["2026-11-29T00:00:00+00:00", "2026-11-29T00:00:00.123456Z", "2026-11-29T10:00:00-23:59", "2026-11-29T00:00:00",
         "2026-11-29 00:00:00", "2026-11-29", "20261129T000000Z", "2026-02-30T00:00:00", "2026-11-29T24:00:00",
         "2026-11-29T23:59:60", "1500-01-01T00:00:00", "2300-01-01T00:00:00", "1677-09-21T00:12:43+23:59",
         "2026-11-29T00:00:00.1234567", "2026-11-29T00:00:00+24:00", "2026-11-29T00:00:00+0000", "yesterday", ""]


@pytest.mark.parametrize("table, column", [("runs", "measured_at"), ("doctor_findings", "checked_at")])
def test_times_the_fast_path_accepts_are_times_pandera_accepts(rows, table, column):
    """The iso_time checks run on plain strings (tablebase.iso_time_text): never an acceptance pandera would refuse."""
    accepted = 0
    for value in TIMES:
        damaged = copy.deepcopy(rows[table][:1])
        damaged[0][column] = value
        fast, expected = arrow_rows(table, damaged), _pandera(table, damaged)
        if fast is not None:
            accepted += 1
            assert expected is not None and fast.equals(expected), value
    assert 3 <= accepted < len(TIMES)


def _contents(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'").fetchall()]
        return {t: sorted(map(repr, con.execute(f"SELECT * EXCLUDE (source_file) FROM {t}").fetchall())
                          if "source_file" in [c for (c,) in con.execute(
                              "SELECT column_name FROM duckdb_columns() WHERE table_name = ?", [t]).fetchall()]
                          else map(repr, con.execute(f"SELECT * FROM {t}").fetchall())) for t in tables}
    finally:
        con.close()


def test_collect_stores_the_same_rows_by_either_path(tmp_path, inputs, monkeypatch):
    fast_db, slow_db = tmp_path / "fast.duckdb", tmp_path / "slow.duckdb"
    collect(fast_db, inputs)
    monkeypatch.setattr(store, "arrow_rows", lambda table, rows: None)  # every table through pandera
    collect(slow_db, inputs)
    fast, slow = _contents(fast_db), _contents(slow_db)
    assert sum(map(len, fast.values())) > 50
    assert fast == slow


def test_a_database_changed_by_another_writer_is_checked_again(tmp_path, inputs):
    """The skip of the layout check after this process's own write must not hide a file someone else replaced."""
    from shardscope.errors import UserError

    db = tmp_path / "r.duckdb"
    collect(db, inputs[:1])
    collect(db, inputs[1:2])
    other = duckdb.connect(str(tmp_path / "other.duckdb"))
    other.execute("CREATE TABLE strangers (x INTEGER)")
    other.close()
    (tmp_path / "other.duckdb").replace(db)
    with pytest.raises(UserError, match="not a shardscope results database"):
        collect(db, inputs[2:3])
