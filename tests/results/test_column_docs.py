"""The database documents itself: every column of every table and view has a comment with its meaning (and unit)."""

from __future__ import annotations

import duckdb

from shardscope.results.ddl import VIEWS, column_docs, ddl, upgrade
from shardscope.results.schemas import TABLES


def test_every_column_of_every_table_and_view_has_a_comment() -> None:
    with duckdb.connect() as con:
        for statement in ddl():
            con.execute(statement)
        rows = con.execute("SELECT table_name, column_name, comment FROM duckdb_columns() "
                           "WHERE NOT internal AND schema_name = 'main'").fetchall()
    names = {table for table, _, _ in rows}
    assert names == set(TABLES) | set(VIEWS) | {"shardscope_meta"}
    bare = [f"{table}.{column}" for table, column, comment in rows if not comment or comment.startswith("unit:")]
    assert not bare, f"columns without a meaning: {bare}"


def test_a_comment_is_the_meaning_then_the_unit() -> None:
    with duckdb.connect() as con:
        for statement in ddl():
            con.execute(statement)
        (comment,) = con.execute("SELECT comment FROM duckdb_columns() WHERE table_name = 'collectives' "
                                 "AND column_name = 'busbw_gbps'").fetchone()
    unit, meaning = column_docs("collectives")["busbw_gbps"]
    assert comment == f"{meaning}; unit: {unit}" and unit.startswith("GB/s")


def test_an_older_database_gets_the_comments_when_upgraded(tmp_path) -> None:
    db = tmp_path / "old.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE TABLE runs (run_id VARCHAR, kind VARCHAR)")
        upgrade(con)
        (comment,) = con.execute("SELECT comment FROM duckdb_columns() WHERE table_name = 'runs' "
                                 "AND column_name = 'kind'").fetchone()
    assert comment.startswith("document kind")


def test_the_documented_view_columns_are_the_views_columns() -> None:
    from shardscope.results.ddl import VIEW_COLUMN_TYPES

    with duckdb.connect() as con:
        for statement in ddl():
            con.execute(statement)
        for view in VIEWS:
            found = con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ? "
                                "ORDER BY column_index", [view]).fetchall()
            assert found == list(VIEW_COLUMN_TYPES[view].items()), view
