"""The database's DDL, generated from the pandera schemas, and the check that a database is ours.

Tables and their unit comments come from :mod:`shardscope.results.schemas`; the views answer
the questions users ask. A database records its layout version in ``shardscope_meta``; a
database written before that table existed (layout 1) is recognised by its tables and
upgraded in place by adding the new tables and columns (every added column is nullable).
Layout 3 added the modeled and diagnosis tables (``collective_predictions``,
``strategy_predictions``, ``verdicts``, ``verdict_rows``, ``doctor_findings``) and made
``runs.world_size`` null for documents that are not one job; a layout-2 database is upgraded
the same way. Layout 4 types times as ``TIMESTAMP WITH TIME ZONE`` and JSON text as ``JSON``
(the pandera dtypes :class:`~shardscope.results.tablebase.ZonedTime` and
:class:`~shardscope.results.tablebase.JsonText`); an older database's VARCHAR columns are
converted in place, every value kept (:data:`RETYPED`).
"""

from __future__ import annotations

import functools
import hashlib

import duckdb

from shardscope.results.meanings import MEANINGS
from shardscope.results.schemas import TABLES
from shardscope.results.views import strategy_vs_ddp_sql

#: The layout this code writes, and every layout it can read (and upgrade).
SCHEMA_VERSION = "shardscope.results/4"
KNOWN_VERSIONS = ("shardscope.results/1", "shardscope.results/2", "shardscope.results/3", SCHEMA_VERSION)
META_TABLE = "shardscope_meta"

# pandera dtype name fragment -> DuckDB type (pandas 3 names strings ``str`` or ``string[pyarrow]``).
_SQL_TYPES = (("bool", "BOOLEAN"), ("int", "BIGINT"), ("float", "DOUBLE"), ("str", "VARCHAR"))
#: (type a column had before layout 4, its type now) -> how the upgrade converts a value: ISO 8601 text to a time
#: (text without a zone, which older layouts accepted as UTC, stays UTC: the upgrade's connection is in UTC), JSON text
#: kept as it is.
RETYPED = {("VARCHAR", "TIMESTAMP WITH TIME ZONE"): "CAST({column} AS TIMESTAMP WITH TIME ZONE)",
           ("VARCHAR", "JSON"): "CAST({column} AS JSON)"}
_UNITS = (("_bytes", "bytes"), ("_per_s", "per second"), ("_us", "microseconds"), ("_s", "seconds"), ("_gbps", "GB/s (1e9 bytes per second, as nccl-tests)"), ("_size", "ranks"))



def _latest_prediction_sql(table: str, per: str = "") -> str:
    """Each measured run's latest modeled rows of ``table`` (``per``: a further key, one row each), named by
    ``measured_run_id``: the predictions stage's rows name it; older rows, computed by collect, are owned by it."""
    measured = "coalesce(p.measured_run_id, p.run_id)"
    return f"""
        SELECT {measured} AS measured_run_id, p.* EXCLUDE (measured_run_id)
        FROM {table} p LEFT JOIN runs r ON r.run_id = p.run_id
        QUALIFY row_number() OVER (PARTITION BY {measured}{per}
                                   ORDER BY p.measured_run_id IS NULL, r.measured_at DESC NULLS LAST, p.run_id) = 1"""


#: Meanings of the views' own columns (a view column named like a table column takes that column's meaning).
VIEW_COLUMNS = {
    "peak_busbw_gbps": "largest bus bandwidth over the run's message sizes (nccl-tests busbw)",
    "peak_algbw_gbps": "largest algorithm bandwidth over the run's message sizes (bytes / time)",
    "peak_at_size_bytes": "message size at which the bus bandwidth peaked",
    "held_bytes": "parameters + gradients + optimizer state held by the largest rank after backward",
    "modeled_bytes": "the ZeRO paper's per-GPU bytes for this job (memory_predictions.total_bytes; modeled)",
    "step_time_vs_ddp": "median step time over DDP's on the same host, model, world size, placement and transport",
    "tokens_per_s_vs_ddp": "tokens/s over DDP's on the same host, model, world size, placement and transport",
    "held_bytes_vs_ddp": "held bytes over DDP's on the same host, model, world size, placement and transport",
}

_V, _B, _D = "VARCHAR", "BIGINT", "DOUBLE"
#: Each view's columns and their types, in order: what the column comments and the data dictionary document, written
#: here so that building the DDL needs no database (tests/results/test_column_docs.py checks them against the views).
VIEW_COLUMN_TYPES = {
    "modeled_run_memory": {"measured_run_id": _V, "run_id": _V, "strategy": _V, "model": _V, "n_params": _B,
                           "gpus": _B, "dtype": _V, "param_bytes": _B, "grad_bytes": _B, "optim_bytes": _B,
                           "total_bytes": _B, "method": _V},
    "modeled_run_peaks": {"measured_run_id": _V, "strategy": _V, "gpus": _B, "dtype": _V, "micro_batch": _B,
                          "seq_len": _B, "checkpointing": _V, "device": _V, "param_bytes": _B, "grad_bytes": _B,
                          "optim_bytes": _B, "activation_bytes": _B, "buffer_bytes": _B, "overhead_bytes": _B,
                          "peak_bytes": _B, "peak_phase": _V, "method": _V, "run_id": _V, "memory_model": _V,
                          "model": _V, "attention": _V},
    "collective_peaks": {"host": _V, "source": _V, "source_file": _V, "fabric": _V, "label": _V, "op": _V,
                         "world_size": _B, "placement": _V, "transport": _V, "dtype": _V, "peak_busbw_gbps": _D,
                         "peak_algbw_gbps": _D, "peak_at_size_bytes": _B, "run_id": _V},
    "strategy_summary": {"host": _V, "fabric": _V, "model": _V, "world_size": _B, "placement": _V, "transport": _V,
                         "strategy": _V, "outcome": _V, "median_step_time_s": _D, "tokens_per_s": _D, "mfu": _D,
                         "peak_memory_bytes": _B, "held_bytes": _B, "modeled_bytes": _B, "step_time_vs_ddp": _D,
                         "tokens_per_s_vs_ddp": _D, "held_bytes_vs_ddp": _D, "run_id": _V},
}

VIEWS = {
    # measured vs modeled is SQL over the measured tables and the predictions stage's rows (issue 34)
    "modeled_run_memory": _latest_prediction_sql("memory_predictions"),
    "modeled_run_peaks": _latest_prediction_sql("memory_peak_predictions", ", p.memory_model"),
    "collective_peaks": """
        SELECT r.host, r.source, r.source_file, coalesce(r.fabric, t.fabric) AS fabric, r.label,
               c.op, c.world_size, r.placement, r.transport, c.dtype,
               max(c.busbw_gbps) AS peak_busbw_gbps, max(c.algbw_gbps) AS peak_algbw_gbps,
               arg_max(c.size_bytes, c.busbw_gbps) AS peak_at_size_bytes, r.run_id
        FROM collectives c JOIN runs r USING (run_id)
        LEFT JOIN topologies t ON t.topology_hash = r.topology_hash
        GROUP BY ALL""",
    # Speed relative to DDP as results.views defines it (the figures select the latest run of each from the same SQL).
    "strategy_summary": f"""
        SELECT host, fabric, model, world_size, placement, transport, strategy, outcome, median_step_time_s, tokens_per_s, mfu,
               peak_memory_bytes, held_bytes, modeled_bytes, step_time_vs_ddp, tokens_per_s_vs_ddp, held_bytes_vs_ddp, run_id
        FROM ({strategy_vs_ddp_sql(
            "runs", "coalesce(r.fabric, topo.fabric) AS fabric, tr.mfu, p.total_bytes AS modeled_bytes",
            "LEFT JOIN topologies topo ON topo.topology_hash = r.topology_hash "
            "LEFT JOIN modeled_run_memory p ON p.measured_run_id = tr.run_id")})""",
}


def sql_type(dtype: object) -> str:
    """The DuckDB column type of a pandera column dtype (a time's or JSON text's dtype names its own)."""
    if getattr(dtype, "sql", None):
        return str(getattr(dtype, "sql"))
    name = str(dtype).lower()
    return next(sql for fragment, sql in _SQL_TYPES if fragment in name)


def column_unit(name: str) -> str | None:
    """The unit a column's name announces (``_bytes``, ``_s``, ``_gbps``), for the DDL comments."""
    for suffix, unit in _UNITS:
        if name.endswith(suffix):
            return unit
    return None


@functools.cache
def column_docs(name: str) -> dict[str, tuple[str | None, str]]:
    """Column -> (unit, meaning) of a table or view: the unit its name announces; the meaning its pandera field
    describes (``pa.Field(description=...)``), else :data:`shardscope.results.meanings.MEANINGS` by column name.

    A view's column takes the documentation of the table column of the same name, or of :data:`VIEW_COLUMNS`.
    Worked out once per process (the DDL asks for it on every load); the answer is shared: do not modify it.
    """
    if name in TABLES:
        return {col: (column_unit(col), column.description or MEANINGS.get(col, ""))
                for col, column in TABLES[name].to_schema().columns.items()}
    documented = {col: doc for table in TABLES for col, doc in column_docs(table).items() if doc[1]}
    return {col: (column_unit(col), VIEW_COLUMNS.get(col) or documented.get(col, (None, ""))[1])
            for col, _ in view_columns(name)}


def view_columns(name: str) -> tuple[tuple[str, str], ...]:
    """The (column, DuckDB type) pairs of view ``name`` (:data:`VIEW_COLUMN_TYPES`; a test checks them against the views)."""
    return tuple(VIEW_COLUMN_TYPES[name].items())


def comment_text(unit: str | None, meaning: str) -> str:
    """A column's comment: its meaning, then its unit (``unit: bytes``) where its name announces one."""
    meaning = " ".join(meaning.split())
    return "; ".join(part for part in (meaning, f"unit: {unit}" if unit else "") if part)


def data_dictionary() -> list[dict[str, str]]:
    """Every column of every table and view: table, column, type, unit, meaning (what ``shardscope db schema`` prints)."""
    rows = []
    for name in [*TABLES, *VIEWS]:
        types = column_types(name) if name in TABLES else dict(view_columns(name))
        for column, (unit, meaning) in column_docs(name).items():
            rows.append({"table": name, "column": column, "type": types.get(column, ""), "unit": unit or "",
                         "meaning": " ".join(meaning.split())})
    return rows


def dictionary_text() -> str:
    """:func:`data_dictionary` as aligned text, one table or view after another."""
    rows = data_dictionary()
    widths = {key: max(len(key), *(len(r[key]) for r in rows)) for key in ("table", "column", "type", "unit")}
    lines = ["  ".join(key.ljust(widths[key]) for key in widths) + "  meaning"]
    lines += ["  ".join(r[key].ljust(widths[key]) for key in widths) + "  " + r["meaning"] for r in rows]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def column_types(table: str) -> dict[str, str]:
    """Column name -> DuckDB type of ``table``, in schema order."""
    return dict(_column_types(table))


@functools.cache
def _column_types(table: str) -> tuple[tuple[str, str], ...]:
    """:func:`column_types`, worked out once per process (every load checks the database against it)."""
    return tuple((name, sql_type(col.dtype)) for name, col in TABLES[table].to_schema().columns.items())


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _tables_and_views() -> list[str]:
    """CREATE TABLE and VIEW statements alone (no comments)."""
    statements = [f"CREATE TABLE IF NOT EXISTS {META_TABLE} (key VARCHAR PRIMARY KEY, value VARCHAR)",
                  f"INSERT OR REPLACE INTO {META_TABLE} VALUES ('schema', {_quote(SCHEMA_VERSION)})",
                  # its table comment records the DDL's digest (upgrade); its columns say what they hold
                  f"COMMENT ON COLUMN {META_TABLE}.key IS 'what the row records about the database (schema: its "
                  "layout version)'",
                  f"COMMENT ON COLUMN {META_TABLE}.value IS 'the value of key (schema: the layout version, e.g. "
                  f"{SCHEMA_VERSION})'"]
    for table in TABLES:
        cols = ", ".join(f"{name} {sql}" for name, sql in column_types(table).items())
        statements.append(f"CREATE TABLE IF NOT EXISTS {table} ({cols})")
    return statements + [f"CREATE OR REPLACE VIEW {name} AS {sql}" for name, sql in VIEWS.items()]


def ddl() -> list[str]:
    """CREATE TABLE, VIEW and COMMENT statements of the whole database, generated from the schemas.

    Each table's comment is its schema's docstring; each column's, of tables and views alike, is
    :func:`comment_text` of :func:`column_docs` (the pandera field's description and the unit its name
    announces), so the database, ``db schema`` and the Parquet export say the same.
    """
    statements = _tables_and_views()
    for table, schema in TABLES.items():
        statements.append(f"COMMENT ON TABLE {table} IS {_quote(' '.join((schema.__doc__ or '').split()))}")
    for name in [*TABLES, *VIEWS]:
        for column, (unit, meaning) in column_docs(name).items():
            text = comment_text(unit, meaning)
            if text:
                statements.append(f"COMMENT ON COLUMN {name}.{column} IS {_quote(text)}")
    return statements


def schema_text() -> str:
    """The DDL as one SQL script (what ``shardscope db schema`` prints)."""
    return "".join(f"{' '.join(line.strip() for line in s.splitlines() if line.strip())};\n" for s in ddl())


def schema_problems(con: duckdb.DuckDBPyConnection, catalog: str | None = None, require_runs: bool = False) -> list[str]:
    """What makes the database attached as ``catalog`` (default: the connection's own) not one of ours.

    Ours means: its layout version is known, every table is one of :data:`TABLES` (or the
    meta table) and every column has the name and type the schema gives it. Missing tables
    and columns are fine (an older layout), and so is the VARCHAR an older layout gave a time
    or JSON column (:data:`RETYPED`); ``require_runs`` also demands a ``runs`` table.
    """
    found: dict[str, dict[str, str]] = {}
    for table, column, data_type in con.execute(
            "SELECT c.table_name, c.column_name, c.data_type FROM duckdb_columns() c JOIN duckdb_tables() t "
            "USING (database_name, schema_name, table_name) WHERE c.database_name = coalesce(?, current_database()) "
            "AND c.schema_name = 'main'", [catalog]).fetchall():
        found.setdefault(table, {})[column] = data_type
    problems = []
    if META_TABLE in found:
        versions = [v for (v,) in con.execute(f"SELECT value FROM {catalog + '.' if catalog else ''}{META_TABLE} WHERE key = 'schema'").fetchall()]
        if versions and versions[0] not in KNOWN_VERSIONS:
            problems.append(f"its layout is {versions[0]!r}, expected one of {', '.join(KNOWN_VERSIONS)}")
    for table, cols in found.items():
        if table == META_TABLE:
            continue
        if table not in TABLES:
            problems.append(f"table {table!r} is not a shardscope table")
            continue
        expected = column_types(table)
        for column, data_type in cols.items():
            if column not in expected:
                problems.append(f"table {table} has column {column!r}, which the shardscope schema does not have")
            elif data_type != expected[column] and (data_type, expected[column]) not in RETYPED:
                problems.append(f"column {table}.{column} is {data_type}, expected {expected[column]}")
    if require_runs and "runs" not in found and not problems:
        problems.append("it has no runs table")
    return problems


@functools.cache
def ddl_digest() -> str:
    """sha256 of this code's DDL: a database that records it has every table, column, comment and view already."""
    return hashlib.sha256("\n".join(ddl()).encode()).hexdigest()


def upgrade(con: duckdb.DuckDBPyConnection) -> None:
    """Bring the open database to :data:`SCHEMA_VERSION`: new tables, new (nullable) columns, retyped columns, views.

    The DDL (over a hundred statements) runs only when the database is of another layout
    version or its meta table's comment does not record this code's :func:`ddl_digest`, so
    repeated loads into an up-to-date database skip it. A column an older layout kept as
    VARCHAR is converted in place (:data:`RETYPED`); a value that does not convert is a
    UserError naming it, and the caller's transaction (or copy) leaves the database as it was.
    """
    meta = con.execute("SELECT comment FROM duckdb_tables() WHERE database_name = current_database() "
                       "AND schema_name = 'main' AND table_name = ?", [META_TABLE]).fetchall()
    if meta and meta[0][0] == f"ddl {ddl_digest()}" and con.execute(
            f"SELECT count(*) FROM {META_TABLE} WHERE key = 'schema' AND value = ?", [SCHEMA_VERSION]).fetchall()[0][0]:
        return
    present = {(t, c): data_type for t, c, data_type in con.execute(
        "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE database_name = current_database() "
        "AND schema_name = 'main'").fetchall()}
    tables = {t for t, _ in present}
    for table in TABLES:
        if table in tables:
            for column, sql in column_types(table).items():
                if (table, column) not in present:
                    con.execute(f"ALTER TABLE {table} ADD COLUMN {column} {sql}")
                elif (present[table, column], sql) in RETYPED:
                    _retype(con, table, column, present[table, column], sql)
    for statement in ddl():
        con.execute(statement)
    con.execute(f"COMMENT ON TABLE {META_TABLE} IS 'ddl {ddl_digest()}'")


def typed_replace(con: duckdb.DuckDBPyConnection, catalog: str, table: str) -> str:
    """`` REPLACE (...)`` for ``SELECT *`` of ``catalog``'s ``table``: each column an older layout kept as VARCHAR
    (:data:`RETYPED`) cast to its type now, so a read-only query of an older database sees times and JSON too.

    Empty where the table's columns have their types already. Text without a zone reads as UTC only in a session
    whose zone is UTC (every connection of :mod:`shardscope.results.store` is).
    """
    expected = column_types(table)
    stored = con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = ? "
                         "AND schema_name = 'main' AND table_name = ?", [catalog, table]).fetchall()
    casts = [RETYPED[data_type, expected[column]].format(column=column) + f" AS {column}"
             for column, data_type in stored if (data_type, expected.get(column)) in RETYPED]
    return f" REPLACE ({', '.join(casts)})" if casts else ""


def _retype(con: duckdb.DuckDBPyConnection, table: str, column: str, old: str, new: str) -> None:
    """Convert ``table.column`` from an older layout's type ``old`` to ``new`` in place (:data:`RETYPED`).

    Text without a zone is read as UTC, as the layouts that stored it read it; the connection's zone is set to
    UTC for the conversion and put back. A value that does not convert is named in a UserError.
    """
    from shardscope.errors import UserError

    using = RETYPED[old, new].format(column=column)
    zone = con.execute("SELECT current_setting('TimeZone')").fetchall()[0][0]
    con.execute("SET TimeZone = 'UTC'")
    try:
        # looked for first: a failed ALTER would abort the caller's transaction, and with it this question
        found = con.execute(f"SELECT {column} FROM {table} WHERE {column} IS NOT NULL "
                            f"AND {using.replace('CAST(', 'TRY_CAST(', 1)} IS NULL LIMIT 1").fetchall()
        if found:
            raise UserError(f"column {table}.{column} holds {found[0][0]!r}, which is not "
                            f"{'a time' if 'TIME' in new else 'JSON'}: the database cannot be upgraded to "
                            f"{SCHEMA_VERSION} (nothing was changed); correct or delete that row")
        con.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET DATA TYPE {new} USING {using}")
    finally:
        con.execute(f"SET TimeZone = {_quote(zone)}")
