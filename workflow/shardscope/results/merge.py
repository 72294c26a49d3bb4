"""``shardscope db merge``: combine the databases of several machines into one, keeping provenance.

Each input is attached read-only; its runs and topologies that the output lacks are
re-validated with the same pandera schemas as ``collect`` and copied with all their rows,
in one transaction on a copy of the output taken under its lock (see
:func:`shardscope.results.store.updating`). Every copied run and topology records in
``origin_db`` the database it first came from; its host and source file come along
unchanged. Merging the same input again adds nothing. An input whose layout is not one
this version knows is refused, and nothing is merged.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import duckdb

from shardscope.errors import UserError
from shardscope.results.ddl import column_types, schema_problems, upgrade
from shardscope.results.schemas import OWNER_KEYS, TABLES, owner_key
from shardscope.results.store import insert_frame, is_duckdb_file, problem_report, updating, validate_frame


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _input_problems(target: Path, sources: list[Path]) -> list[str]:
    problems = []
    for src in sources:
        if not src.is_file():
            problems.append(f"{src}: database not found")
        elif not is_duckdb_file(src):
            problems.append(f"{src}: not a DuckDB database file")
        elif target.exists() and src.resolve() == target.resolve():
            problems.append(f"{src}: is the output database itself")
    return problems


def _source_tables(con: duckdb.DuckDBPyConnection, alias: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for table, column in con.execute("SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = ? "
                                     "AND schema_name = 'main'", [alias]).fetchall():
        found.setdefault(table, set()).add(column)
    return found


def _select(table: str, alias: str, present: set[str], origin: str) -> str:
    """SELECT of ``table``'s columns from the input: absent (older) columns as NULL, origin_db filled in."""
    exprs = []
    for column, sql in column_types(table).items():
        if column == "origin_db":
            expr = f"coalesce(origin_db, {_quote(origin)})" if column in present else _quote(origin)
        else:
            expr = column if column in present else f"NULL::{sql}"
        exprs.append(f"{expr} AS {column}")
    key = owner_key(table)
    return f"SELECT {', '.join(exprs)} FROM {alias}.{table} WHERE {key} IN (SELECT {key} FROM new_{key}) ORDER BY ALL"


def _merge_one(con: duckdb.DuckDBPyConnection, alias: str, src: Path, counts: dict[str, int]) -> list[str]:
    """Copy the runs and topologies of one attached input that the output lacks; problems found."""
    tables = _source_tables(con, alias)
    problems = []
    for key, parent in OWNER_KEYS.items():
        source = f"SELECT DISTINCT {key} FROM {alias}.{parent}" if parent in tables else f"SELECT NULL::VARCHAR AS {key} WHERE false"
        con.execute(f"CREATE OR REPLACE TEMP TABLE new_{key} AS {source} EXCEPT SELECT {key} FROM {parent}")
        new = con.execute(f"SELECT count(*) FROM new_{key}").fetchone()[0]
        total = con.execute(f"SELECT count(DISTINCT {key}) FROM {alias}.{parent}").fetchone()[0] if parent in tables else 0
        counts[f"new_{parent}"] = counts.get(f"new_{parent}", 0) + new
        counts[f"skipped_{parent}"] = counts.get(f"skipped_{parent}", 0) + total - new
    for table in TABLES:
        key = owner_key(table)
        parent = OWNER_KEYS[key]
        if table not in tables or table == parent:
            continue
        orphans = con.execute(f"SELECT count(*) FROM {alias}.{table} WHERE {key} NOT IN "
                              f"(SELECT {key} FROM {alias}.{parent})" if parent in tables else
                              f"SELECT count(*) FROM {alias}.{table}").fetchone()[0]
        if orphans:
            problems.append(f"{src}: table {table} has {orphans} row(s) whose {key} is not in table {parent}")
    for table in TABLES:
        if table in tables:
            df = con.execute(_select(table, alias, tables[table], str(src.resolve()))).df()
            validated, found = validate_frame(table, df, str(src), named_rows=True)
            problems.extend(found)
            if validated is not None and not problems:
                insert_frame(con, table, validated)
    return problems


def merge(out: str | os.PathLike[str], inputs: list[str]) -> dict[str, Any]:
    """Merge the databases ``inputs`` into ``out`` (created if missing); counts of new and skipped runs."""
    target, sources = Path(out), [Path(p) for p in inputs]
    problems = _input_problems(target, sources)
    if problems:
        raise UserError(problem_report(problems, "the databases to merge").replace("nothing was loaded", "nothing was merged"))
    counts: dict[str, int] = {f"{kind}_{parent}": 0 for kind in ("new", "skipped") for parent in OWNER_KEYS.values()}
    with updating(target) as con:
        con.execute("BEGIN TRANSACTION")
        upgrade(con)
        for i, src in enumerate(sources):
            alias = f"merge_input_{i}"
            try:
                con.execute(f"ATTACH {_quote(str(src))} AS {alias} (READ_ONLY)")
            except duckdb.Error as exc:
                problems.append(f"{src}: cannot be opened by DuckDB {duckdb.__version__}: {str(exc).splitlines()[0]}")
                continue
            layout = schema_problems(con, alias, require_runs=True)
            if layout:
                problems.append(f"{src}: not a shardscope results database this version reads: " + "; ".join(layout))
                continue
            problems.extend(_merge_one(con, alias, src, counts))
        if problems:
            raise UserError(problem_report(problems, "the databases to merge").replace("nothing was loaded", "nothing was merged"))
        con.execute("COMMIT")
    return {"db": str(target), "inputs": [str(s) for s in sources], **counts}
