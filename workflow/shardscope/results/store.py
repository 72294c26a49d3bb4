"""``shardscope collect``: validate every input, then load all of it into DuckDB at once.

All inputs are validated before the database is touched, and every problem is reported in
one pass (file, row, column, check). Loading happens on a copy of the database under an
exclusive lock, which replaces the original by an atomic rename only after a successful
commit and checkpoint: a failure leaves the database byte-for-byte as it was, and a second
writer waits for the first. Runs already present (same run id) are skipped, so collecting
the same files twice adds nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pandera.errors

from shardscope.errors import UserError
from shardscope.fileio import atomic_write_json, read_json
from shardscope.results.documents import tables_from_document
from shardscope.results.schemas import TABLES

# pandera dtype name fragment -> DuckDB type (pandas 3 names strings ``str`` or ``string[pyarrow]``).
_SQL_TYPES = (("bool", "BOOLEAN"), ("int", "BIGINT"), ("float", "DOUBLE"), ("str", "VARCHAR"))
_UNITS = (("_bytes", "bytes"), ("_s", "seconds"), ("_gbps", "GB/s (1e9 bytes per second, as nccl-tests)"), ("_size", "ranks"))

VIEWS = {
    "collective_peaks": """
        SELECT r.host, r.source, r.source_file, c.op, c.world_size, r.placement, r.transport, c.dtype,
               max(c.busbw_gbps) AS peak_busbw_gbps, max(c.algbw_gbps) AS peak_algbw_gbps,
               arg_max(c.size_bytes, c.busbw_gbps) AS peak_at_size_bytes, r.run_id
        FROM collectives c JOIN runs r USING (run_id)
        GROUP BY ALL""",
    "strategy_summary": """
        WITH t AS (
            SELECT r.host, tr.*, (SELECT max(m.param_bytes + m.grad_bytes + m.optim_bytes)
                                  FROM training_memory m WHERE m.run_id = tr.run_id) AS held_bytes
            FROM training_runs tr JOIN runs r USING (run_id))
        SELECT t.host, t.model, t.world_size, t.placement, t.strategy, t.outcome, t.median_step_time_s,
               t.tokens_per_s, t.mfu, t.peak_memory_bytes, t.held_bytes,
               t.median_step_time_s / ddp.median_step_time_s AS step_time_vs_ddp,
               t.tokens_per_s / ddp.tokens_per_s AS tokens_per_s_vs_ddp,
               t.held_bytes / ddp.held_bytes AS held_bytes_vs_ddp, t.run_id
        FROM t LEFT JOIN (SELECT * FROM t WHERE strategy = 'ddp' AND outcome = 'ok'
                          QUALIFY row_number() OVER (PARTITION BY host, model, world_size, placement ORDER BY run_id) = 1) ddp
          ON t.host IS NOT DISTINCT FROM ddp.host AND t.model = ddp.model AND t.world_size = ddp.world_size
         AND t.placement = ddp.placement""",
}


def sql_type(dtype: object) -> str:
    """The DuckDB column type of a pandera column dtype."""
    name = str(dtype).lower()
    return next(sql for fragment, sql in _SQL_TYPES if fragment in name)


def column_unit(name: str) -> str | None:
    """The unit a column's name announces (``_bytes``, ``_s``, ``_gbps``), for the DDL comments."""
    for suffix, unit in _UNITS:
        if name.endswith(suffix):
            return unit
    return None


def ddl() -> list[str]:
    """CREATE TABLE, COMMENT and VIEW statements of the whole database, generated from the schemas."""
    statements = []
    for table, schema in TABLES.items():
        columns = schema.to_schema().columns
        cols = ", ".join(f"{name} {sql_type(col.dtype)}" for name, col in columns.items())
        statements.append(f"CREATE TABLE IF NOT EXISTS {table} ({cols})")
        statements.append(f"COMMENT ON TABLE {table} IS '{(schema.__doc__ or '').strip().replace(chr(39), chr(39) * 2)}'")
        for name in columns:
            unit = column_unit(name)
            if unit:
                statements.append(f"COMMENT ON COLUMN {table}.{name} IS 'unit: {unit}'")
    statements += [f"CREATE OR REPLACE VIEW {name} AS {sql}" for name, sql in VIEWS.items()]
    return statements


def _describe(exc: pandera.errors.SchemaErrors, path: str, table: str) -> list[str]:
    """One line per failed (row, column, check); a row-level check is reported once per row."""
    messages: list[str] = []
    for _, case in exc.failure_cases.iterrows():
        row_check = case.get("schema_context") == "DataFrameSchema"
        column = "(row check)" if row_check or pd.isna(case.get("column")) else case.get("column")
        row = case.get("index")
        where = f"row {int(row)}" if pd.notna(row) else "all rows"
        value = "" if row_check else f" (value {case.get('failure_case')!r})"
        line = f"{path}: table {table}, {where}, column {column}: failed {case.get('check')}{value}"
        if line not in messages:
            messages.append(line)
    return messages


def validate_inputs(paths: list[str]) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """Validate every input file; return the rows per table and every error found, all at once."""
    frames: dict[str, list[pd.DataFrame]] = {t: [] for t in TABLES}
    errors: list[str] = []
    for path in paths:
        try:
            tables = tables_from_document(read_json(path), path)
        except UserError as exc:
            errors.append(str(exc))
            continue
        for table, rows in tables.items():
            if not rows:
                continue
            df = pd.DataFrame(rows, columns=list(TABLES[table].to_schema().columns))
            try:
                frames[table].append(TABLES[table].validate(df, lazy=True))
            except pandera.errors.SchemaErrors as exc:
                errors.extend(_describe(exc, path, table))
    combined = {t: pd.concat(f, ignore_index=True) if f else pd.DataFrame(columns=list(TABLES[t].to_schema().columns))
                for t, f in frames.items()}
    if not errors:
        runs = combined["runs"].drop_duplicates("run_id")
        combined = {t: df[df["run_id"].isin(runs["run_id"])].drop_duplicates() for t, df in combined.items()}
        combined["runs"] = runs
    return combined, errors


@contextlib.contextmanager
def exclusive_lock(db: Path) -> Iterator[None]:
    """Hold an exclusive lock beside the database for the whole load (a second writer waits)."""
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.with_name(db.name + ".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _load(con: duckdb.DuckDBPyConnection, frames: dict[str, pd.DataFrame]) -> tuple[int, int]:
    for statement in ddl():
        con.execute(statement)
    existing = {row[0] for row in con.execute("SELECT run_id FROM runs").fetchall()}
    new_ids = set(frames["runs"]["run_id"]) - existing
    for table, df in frames.items():
        fresh = df[df["run_id"].isin(new_ids)]
        if len(fresh):
            con.register("incoming", fresh)
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM incoming")
            con.unregister("incoming")
    return len(new_ids), len(set(frames["runs"]["run_id"]) & existing)


def collect(db: str | os.PathLike[str], inputs: list[str], manifest: str | None = None) -> dict[str, Any]:
    """Validate ``inputs`` and load them into ``db`` in one transaction; see the module docstring."""
    frames, errors = validate_inputs([str(p) for p in inputs])
    if errors:
        raise UserError(f"{len(errors)} problem(s) in the inputs; nothing was loaded:\n  " + "\n  ".join(errors))
    target = Path(db)
    with exclusive_lock(target):
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            if target.exists():
                shutil.copy2(target, tmp)
            else:
                tmp.unlink()
            with duckdb.connect(str(tmp)) as con:
                con.execute("BEGIN TRANSACTION")
                new_runs, skipped = _load(con, frames)
                con.execute("COMMIT")
                con.execute("CHECKPOINT")
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
            Path(str(tmp) + ".wal").unlink(missing_ok=True)
    summary = {"db": str(target), "inputs": [str(p) for p in inputs], "new_runs": new_runs, "skipped_runs": skipped,
               "rows": {t: int(len(df)) for t, df in frames.items()}}
    if manifest:
        atomic_write_json(manifest, summary)
    return summary


def connect_readonly(db: str | os.PathLike[str]) -> duckdb.DuckDBPyConnection:
    """Open the database for queries (figures, report); UserError if it does not exist."""
    if not Path(db).exists():
        raise UserError(f"{db}: database not found; run the pipeline or `shardscope collect` first")
    return duckdb.connect(str(db), read_only=True)
