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
import pandas as pd
import pandera.errors

from shardscope.errors import UserError
from shardscope.results.ddl import KNOWN_VERSIONS, META_TABLE, RETYPED, column_types, schema_problems, upgrade
from shardscope.results.schemas import OWNER_KEYS, TABLES, owner_key
from shardscope.results.store import insert_frame, is_duckdb_file, problem_report, updating, validate, validate_frame


#: The types an older layout's VARCHAR columns have now (times, JSON).
RETYPED_TO = {new for _, new in RETYPED}


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


def _select(table: str, inputs: list[tuple[int, str, Path, dict[str, set[str]]]]) -> str:
    """One SELECT of ``table``'s new rows from every input that has it, each row with the index of its input.

    Absent (older) columns read as NULL and origin_db is filled in; a row is new when its
    run or topology was claimed for that input (:func:`_claim_new`).
    """
    key = owner_key(table)
    parts = []
    for index, alias, src, tables in inputs:
        exprs = [f"{index} AS merge_input"]
        for column, sql in column_types(table).items():
            if column == "origin_db":
                origin = _quote(str(src.resolve()))
                expr = f"coalesce(origin_db, {origin})" if column in tables[table] else origin
            elif column not in tables[table]:
                expr = f"NULL::{sql}"
            else:  # an older layout's VARCHAR time or JSON read as the type the output has (a no-op where it is)
                expr = f"CAST({column} AS {sql})" if sql in RETYPED_TO else column
            exprs.append(f"{expr} AS {column}")
        parts.append(f"SELECT {', '.join(exprs)} FROM {alias}.{table} "
                     f"WHERE {key} IN (SELECT {key} FROM claimed_{key} WHERE merge_input = {index})")
    return " UNION ALL ".join(parts) + " ORDER BY ALL"


def _claim_new(con: duckdb.DuckDBPyConnection, index: int, alias: str, tables: dict[str, set[str]], counts: dict[str, int]) -> None:
    """Claim for input ``index`` the runs and topologies that neither the output nor an earlier input holds."""
    for key, parent in OWNER_KEYS.items():
        if parent not in tables:
            continue
        con.execute(f"INSERT INTO claimed_{key} SELECT {key}, {index} FROM (SELECT DISTINCT {key} FROM {alias}.{parent} "
                    f"EXCEPT SELECT {key} FROM {parent} EXCEPT SELECT {key} FROM claimed_{key})")
        new, total = con.execute(f"SELECT (SELECT count(*) FROM claimed_{key} WHERE merge_input = {index}), "
                                 f"(SELECT count(DISTINCT {key}) FROM {alias}.{parent})").fetchall()[0]
        counts[f"new_{parent}"] += new
        counts[f"skipped_{parent}"] += total - new


def _orphans(con: duckdb.DuckDBPyConnection, alias: str, src: Path, tables: dict[str, set[str]]) -> list[str]:
    """Rows of one input whose run or topology is not in that input: one line per table (one query per input)."""
    counts = []
    for table in TABLES:
        key = owner_key(table)
        parent = OWNER_KEYS[key]
        if table not in tables or table == parent:
            continue
        where = f" WHERE {key} NOT IN (SELECT {key} FROM {alias}.{parent})" if parent in tables else ""
        counts.append(f"SELECT {_quote(table)} AS name, {_quote(parent)} AS parent, {_quote(key)} AS key, "
                      f"count(*) AS orphans FROM {alias}.{table}{where}")
    if not counts:
        return []
    found = con.execute(" UNION ALL ".join(counts)).fetchall()
    order = {table: i for i, table in enumerate(TABLES)}
    return [f"{src}: table {table} has {orphans} row(s) whose {key} is not in table {parent}"
            for table, parent, key, orphans in sorted(found, key=lambda row: order[row[0]]) if orphans]


def _conflicts(con: duckdb.DuckDBPyConnection, alias: str, src: Path, tables: dict[str, set[str]], out: Path) -> list[str]:
    """Runs of one input that the output holds under the same run id with other contents (both digests known)."""
    if "content_digest" not in tables.get("runs", set()):
        return []
    rows = con.execute(f"SELECT i.run_id FROM {alias}.runs i JOIN runs o USING (run_id) WHERE i.content_digest IS NOT NULL "
                       f"AND o.content_digest IS NOT NULL AND i.content_digest <> o.content_digest ORDER BY 1").fetchall()
    return [f"{src}: run id {run_id} is already in {out} with different contents (a conflict); keep one of them"
            for (run_id,) in rows]


def _layout(con: duckdb.DuckDBPyConnection, alias: str | None) -> str:
    """The layout version a database records (layout 1 recorded none)."""
    catalog = alias or con.execute("SELECT current_database()").fetchall()[0][0]
    has_meta = con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main' "
                           "AND table_name = ?", [catalog, META_TABLE]).fetchall()[0][0]
    if not has_meta:
        return KNOWN_VERSIONS[0]
    found = con.execute(f"SELECT value FROM {catalog}.{META_TABLE} WHERE key = 'schema'").fetchall()
    return str(found[0][0]) if found else KNOWN_VERSIONS[0]


def _host_aliases(con: duckdb.DuckDBPyConnection, catalogs: dict[str, tuple[str, dict[str, set[str]]]]) -> list[str]:
    """A sentence for a topology probe recorded under two host names (the same machine renamed), else nothing.

    Two topologies whose documents agree in everything but the host name are one probe of one
    machine at one instant: the probe time and the raw files' names are part of the document.
    (Run rows cannot show it: identical machines run identical jobs.)
    """
    parts = []
    for catalog, (name, tables) in catalogs.items():
        if "topology_json" in tables.get("topologies", set()):
            parts.append(f"SELECT {_quote(name)} AS db, host, json_merge_patch(topology_json, "
                         f"'{{\"source\":{{\"host\":null}}}}')::VARCHAR AS what FROM {catalog}.topologies WHERE host IS NOT NULL")
    if not parts:
        return []
    rows = con.execute(f"SELECT string_agg(DISTINCT db, ', ' ORDER BY db), string_agg(DISTINCT host, ', ' ORDER BY host) "
                       f"FROM ({' UNION ALL '.join(parts)}) GROUP BY what HAVING count(DISTINCT host) > 1 "
                       f"ORDER BY 1, 2 LIMIT 1").fetchall()
    return [f"{files}: the same machine appears under the host names {hosts} (one topology probe recorded "
            f"under both); merge it under one name" for files, hosts in rows]


def _validated_rows(pending: dict[str, pd.DataFrame], sources: list[Path]) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """Every table's new rows from all inputs validated in one pass; problems named by input and row.

    ``pending`` holds per table the rows of every input, with the index of its input in
    ``merge_input``; only when a table's rows fail are they validated again input by input.
    """
    valid: dict[str, pd.DataFrame] = {}
    problems: list[str] = []
    for table, frame in pending.items():
        if not len(frame):
            continue
        try:
            valid[table] = validate(table, frame.drop(columns="merge_input"))
        except pandera.errors.SchemaErrors:
            for index, part in frame.groupby("merge_input", sort=True):  # name each problem by its input and its row there
                rows = part.drop(columns="merge_input").reset_index(drop=True)
                problems.extend(validate_frame(table, rows, str(sources[int(index)]), named_rows=True)[1])
    return valid, problems


def merge(out: str | os.PathLike[str], inputs: list[str]) -> dict[str, Any]:
    """Merge the databases ``inputs`` into ``out`` (created if missing); counts of new and skipped runs.

    The rows each input adds are read first, then validated with one pandera pass per table
    over all inputs and inserted; inputs of different layout versions, or one machine under
    two host names, are refused with one sentence and nothing is written.
    """
    target, sources = Path(out), [Path(p) for p in inputs]
    problems = _input_problems(target, sources)
    if problems:
        raise UserError(problem_report(problems, "the databases to merge").replace("nothing was loaded", "nothing was merged"))
    counts: dict[str, int] = {f"{kind}_{parent}": 0 for kind in ("new", "skipped") for parent in OWNER_KEYS.values()}
    with updating(target) as con:
        con.execute("BEGIN TRANSACTION")
        existing = target.exists() and con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
                                                   "AND table_name = 'runs'").fetchall()[0][0]
        layouts = {str(target): _layout(con, None)} if existing else {}
        upgrade(con)
        for key in OWNER_KEYS:
            con.execute(f"CREATE OR REPLACE TEMP TABLE claimed_{key} ({key} VARCHAR, merge_input INTEGER)")
        attached: list[tuple[str, Path, dict[str, set[str]]]] = []
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
            layouts[str(src)] = _layout(con, alias)
            attached.append((alias, src, _source_tables(con, alias)))
        if problems:
            raise UserError(problem_report(problems, "the databases to merge").replace("nothing was loaded", "nothing was merged"))
        if len(set(layouts.values())) > 1:
            named = ", ".join(f"{path} ({version})" for path, version in layouts.items())
            raise UserError(f"cannot merge databases of different layout versions: {named}; merge each older one alone "
                            f"into a new file first (that upgrades it), then merge those; nothing was merged")
        own = _source_tables(con, con.execute("SELECT current_database()").fetchall()[0][0])
        renamed = _host_aliases(con, {"main": (str(target), own)} | {alias: (str(src), tables) for alias, src, tables in attached})
        if renamed:
            raise UserError(renamed[0] + "; nothing was merged")
        for index, (alias, src, tables) in enumerate(attached):
            problems += _orphans(con, alias, src, tables) + _conflicts(con, alias, src, tables, target)
            _claim_new(con, index, alias, tables, counts)
        pending = {}
        for table in TABLES:
            having = [(index, alias, src, tables) for index, (alias, src, tables) in enumerate(attached) if table in tables]
            if having:
                pending[table] = con.execute(_select(table, having)).df()
        valid, found = _validated_rows(pending, [src for _, src, _ in attached])
        problems += found
        if problems:
            raise UserError(problem_report(problems, "the databases to merge").replace("nothing was loaded", "nothing was merged"))
        for table in TABLES:
            if table in valid:
                insert_frame(con, table, valid[table])
        con.execute("COMMIT")
    return {"db": str(target), "inputs": [str(s) for s in sources], **counts}
