"""One read-only connection over the results database and, optionally, the reference database.

Collective queries read the temporary views ``all_runs``, ``all_collectives`` and
``all_verdicts``: the user's rows, plus the reference database's rows when one is given
(attached read-only, so neither file is ever written here). A reference run that is already in
the results database (same run id) is not counted twice. ``all_collective_predictions``,
``all_strategy_predictions`` and ``all_doctor_findings`` read the same tables of both
databases. A table that an older database lacks reads as an empty view with the schema's
columns, so every query runs on every layout.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import duckdb

from shardscope.errors import UserError
from shardscope.results.ddl import column_types, typed_replace
from shardscope.results.store import connect_readonly


def _quoted(path: str | os.PathLike[str]) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def require_database(db: str | os.PathLike[str]) -> None:
    """UserError unless ``db`` exists (checked before any slower preparation such as loading reference runs)."""
    if not Path(db).exists():
        raise UserError(f"{db}: database not found; run the pipeline or `shardscope collect` first")


@contextlib.contextmanager
def open_results(db: str | os.PathLike[str], reference_db: str | os.PathLike[str] | None = None,
                 current: tuple[str, ...] | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open ``db`` read-only with the ``all_runs``/``all_collectives`` views; UserError if a file is missing.

    ``current`` (:class:`shardscope.results.selection.RunSelection` ``inputs``): only the database's runs loaded
    from these files, the newest load of each, are in ``all_runs`` (reference runs are kept); None: every run."""
    if reference_db is not None and not Path(reference_db).exists():
        raise UserError(f"{reference_db}: reference database not found; run `shardscope reference --db {reference_db}` first")
    con = connect_readonly(db)
    try:
        _create_views(con, reference_db, current)
    except duckdb.CatalogException as exc:
        con.close()
        raise UserError(f"{db}: not a shardscope results database ({exc}); run `shardscope collect` first") from None
    try:
        yield con
    finally:
        con.close()


#: Columns of ``runs`` that databases written before they existed lack; read as NULL there.
_LATER_RUN_COLUMNS = ("fabric", "label", "topology_hash")


def _tables(con: duckdb.DuckDBPyConnection, catalog: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for table, column in con.execute(
            "SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = ? AND schema_name = 'main'",
            [catalog]).fetchall():
        found.setdefault(table, set()).add(column)
    return found


def _runs_select(con: duckdb.DuckDBPyConnection, catalog: str) -> str:
    """``runs`` of ``catalog`` with every later column present, the fabric taken from the run's
    topology where the run itself does not name one, and the GPU memory of that topology."""
    tables = _tables(con, catalog)
    if "runs" not in tables:
        raise duckdb.CatalogException(f"table runs does not exist in {_ident(catalog)}")
    missing = [c for c in _LATER_RUN_COLUMNS if c not in tables["runs"]]
    typed = typed_replace(con, catalog, "runs")
    base = f"SELECT *{typed}{''.join(f', NULL::VARCHAR AS {c}' for c in missing)} FROM {_ident(catalog)}.main.runs"
    fabric = "r.fabric"
    joins = ""
    if "topologies" in tables:
        fabric = "coalesce(r.fabric, t.fabric)"
        joins += f" LEFT JOIN {_ident(catalog)}.main.topologies t ON t.topology_hash = r.topology_hash"
    memory = "NULL::BIGINT"
    if "gpus" in tables and "memory_bytes" in tables["gpus"]:
        memory = (f"(SELECT max(g.memory_bytes) FROM {_ident(catalog)}.main.gpus g "
                  "WHERE g.topology_hash = r.topology_hash)")
    return (f"SELECT r.* REPLACE ({fabric} AS fabric), {memory} AS gpu_memory_bytes "
            f"FROM ({base}) r{joins}")


#: Tables read through ``all_<table>`` views that union the results and the reference database.
_UNION_TABLES = ("verdicts", "collective_predictions", "strategy_predictions", "doctor_findings")


def _table_select(con: duckdb.DuckDBPyConnection, catalog: str, table: str) -> str:
    """``table`` of ``catalog``, or an empty relation with the schema's columns where it does not exist."""
    if table in _tables(con, catalog):
        return f"SELECT *{typed_replace(con, catalog, table)} FROM {_ident(catalog)}.main.{table}"
    columns = ", ".join(f"NULL::{sql} AS {name}" for name, sql in column_types(table).items())
    return f"SELECT {columns} WHERE false"


def _create_union_views(con: duckdb.DuckDBPyConnection, catalogs: list[str]) -> None:
    for table in _UNION_TABLES:
        parts = " UNION ALL BY NAME ".join(f"({_table_select(con, c, table)})" for c in catalogs)
        con.execute(f"CREATE TEMP VIEW all_{table} AS SELECT DISTINCT * FROM ({parts})")


def _current_runs(con: duckdb.DuckDBPyConnection, runs: str, current: tuple[str, ...] | None) -> str:
    """``runs`` restricted to the newest load of each file of ``current`` (all of ``runs`` for None)."""
    if current is None:
        return runs
    con.execute("CREATE TEMP TABLE current_inputs (source_file VARCHAR)")
    con.executemany("INSERT INTO current_inputs VALUES (?)", [[path] for path in current])
    return (f"SELECT * FROM ({runs}) WHERE source_file IN (SELECT source_file FROM current_inputs) "
            "QUALIFY measured_at IS NOT DISTINCT FROM max(measured_at) OVER (PARTITION BY source_file, kind)")


def _create_views(con: duckdb.DuckDBPyConnection, reference_db: str | os.PathLike[str] | None,
                  current: tuple[str, ...] | None = None) -> None:
    name = con.execute("SELECT current_database()").fetchone()[0]
    main_runs, main_catalog = _current_runs(con, _runs_select(con, name), current), _ident(name)
    if reference_db is None:
        con.execute(f"CREATE TEMP VIEW all_runs AS {main_runs}")
        con.execute(f"CREATE TEMP VIEW all_collectives AS SELECT * FROM {main_catalog}.main.collectives")
        _create_union_views(con, [name])
        return
    con.execute(f"ATTACH {_quoted(reference_db)} AS ref (READ_ONLY)")
    fresh = f"run_id NOT IN (SELECT run_id FROM {main_catalog}.main.runs)"
    con.execute(f"CREATE TEMP VIEW all_runs AS {main_runs} "
                f"UNION ALL BY NAME SELECT * FROM ({_runs_select(con, 'ref')}) WHERE {fresh}")
    con.execute(f"CREATE TEMP VIEW all_collectives AS SELECT * FROM {main_catalog}.main.collectives "
                f"UNION ALL BY NAME SELECT * FROM ref.main.collectives WHERE {fresh}")
    _create_union_views(con, [name, "ref"])
