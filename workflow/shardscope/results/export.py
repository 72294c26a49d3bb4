"""``shardscope db export``: every table and view of the database as Parquet (or CSV) files, or per-step metrics as JSONL.

The export reads a private copy of the database (upgraded to the current layout if it is older),
so the database is never modified and every table and view is present. Everything is written
into a temporary folder beside the output folder and renamed into place only when all of it was
written: an output folder that exists is refused, or with ``force`` replaced whole (never a
folder mixing an older export's files with this one's).

``parquet``
    ``<table>.parquet`` per table and view, each column carrying its unit and meaning as Arrow
    field metadata (``unit``, ``description``: :func:`shardscope.results.ddl.column_docs`, the
    same text as the database's column comments), beside ``schema.sql``. Times are Parquet
    timestamps in UTC; JSON columns are strings of Parquet's ``JSON`` type (Arrow's ``arrow.json``).
``csv``
    ``<table>.csv`` per table and view (header row), beside ``schema.sql``; times as ISO 8601 text in UTC.
``jsonl``
    ``training_steps.jsonl``: one line per timed step of every training run, for experiment
    trackers (:data:`STEP_METRICS`; the README shows TensorBoard, MLflow and W&B reading it).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import duckdb

from shardscope.errors import UserError
from shardscope.results.ddl import VIEWS, column_docs, column_types, schema_text, upgrade, view_columns
from shardscope.results.schemas import TABLES
from shardscope.results.store import SESSION_ZONE, check_database, is_duckdb_file
from shardscope.results.tablebase import ZonedTime, iso_text_sql

FORMATS = ("parquet", "csv", "jsonl")

#: Per-step metrics of the JSONL export: name -> SQL over training_steps s and training_runs r. tokens/s and MFU
#: of one step scale the run's (median) values by median / this step's time, exactly as the run's are derived.
STEP_METRICS = {
    "loss": "s.loss",
    "step_time_s": "s.step_time_s",
    "tokens_per_s": "r.tokens_per_s * r.median_step_time_s / s.step_time_s",
    "mfu": "r.mfu * r.median_step_time_s / s.step_time_s",
    "peak_memory_bytes": "s.peak_memory_bytes",
}
_STEP_LABELS = ("run_id", "job_id", "strategy", "model", "world_size", "placement", "host")


def export_database(db: str | os.PathLike[str], out_dir: str | os.PathLike[str], fmt: str = "parquet",
                    force: bool = False) -> dict[str, int]:
    """Write ``db``'s export in ``fmt`` as the folder ``out_dir`` (see the module docstring); rows per file."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt}: unknown export format; expected one of {', '.join(FORMATS)}")
    source, out = Path(db), Path(out_dir)
    if not source.is_file():
        raise UserError(f"{db}: database not found; run the pipeline or `shardscope collect` first")
    if not is_duckdb_file(source):
        raise UserError(f"{db}: not a DuckDB database file")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a folder; export into a new folder")
    if out.exists() and not force:
        raise UserError(f"{out}: the folder exists; export into a new folder, or pass --force to replace it whole")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.export-", dir=out.parent))
    try:
        snapshot = work / ".snapshot.duckdb"
        shutil.copy2(source, snapshot)
        with duckdb.connect(str(snapshot)) as con:
            con.execute(SESSION_ZONE)
            check_database(con, db, require_runs=True)
            upgrade(con)
            counts = _steps_jsonl(con, work) if fmt == "jsonl" else _tables(con, work, fmt)
        snapshot.unlink()
        for leftover in work.glob(".snapshot.duckdb*"):
            leftover.unlink()
        _replace_folder(work, out)
        return counts
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _tables(con: duckdb.DuckDBPyConnection, folder: Path, fmt: str) -> dict[str, int]:
    """Every table and view as ``<name>.<fmt>`` in ``folder``, and ``schema.sql``; rows per name."""
    counts: dict[str, int] = {}
    for name in [*TABLES, *VIEWS]:
        if fmt == "parquet":
            _write_parquet(con, name, folder / f"{name}.parquet")
        else:
            target = str(folder / f"{name}.csv").replace("'", "''")
            con.execute(f"COPY (SELECT *{_times_as_text(name)} FROM {name}) TO '{target}' (FORMAT csv, HEADER true)")
        counts[name] = con.execute(f"SELECT count(*) FROM {name}").fetchall()[0][0]  # fetched whole: no open result
    (folder / "schema.sql").write_text(schema_text())
    return counts


def _types(name: str) -> dict[str, str]:
    """Column name -> DuckDB type of table or view ``name``."""
    return column_types(name) if name in TABLES else dict(view_columns(name))


def _times_as_text(name: str) -> str:
    """`` REPLACE (...)`` writing ``name``'s times as the ISO 8601 text the documents carry (CSV has no time type)."""
    times = [f"{iso_text_sql(column)} AS {column}" for column, sql in _types(name).items() if sql == ZonedTime.sql]
    return f" REPLACE ({', '.join(times)})" if times else ""


def _write_parquet(con: duckdb.DuckDBPyConnection, name: str, path: Path) -> None:
    """Table or view ``name`` as Parquet, each field's metadata holding its unit and description."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = con.sql(f"SELECT * FROM {name}").to_arrow_table()  # a relation: no extra copy of the rows
    docs = column_docs(name)
    types = _types(name)
    fields = []
    for field in table.schema:
        unit, description = docs.get(field.name, (None, None))
        meta = {"description": description or ""}
        if unit:
            meta["unit"] = unit
        if types.get(field.name) == "JSON":  # DuckDB hands JSON over as plain strings; Parquet's JSON type says it is
            field = field.with_type(pa.json_())
        fields.append(field.with_metadata(meta))
    pq.write_table(table.cast(pa.schema(fields, metadata=table.schema.metadata)), str(path))


def _steps_jsonl(con: duckdb.DuckDBPyConnection, folder: Path) -> dict[str, int]:
    """``training_steps.jsonl``: one JSON object per timed step of each training run (labels and :data:`STEP_METRICS`)."""
    metrics = ", ".join(f"{sql} AS {name}" for name, sql in STEP_METRICS.items())
    rows = con.execute(f"""
        SELECT s.run_id, ru.job_id, r.strategy, r.model, r.world_size, r.placement, ru.host, s.step, {metrics}
        FROM training_steps s JOIN training_runs r USING (run_id) JOIN runs ru USING (run_id)
        ORDER BY s.run_id, s.step""").fetchall()
    with open(folder / "training_steps.jsonl", "w", encoding="utf-8") as handle:
        for row in rows:
            labels = dict(zip(_STEP_LABELS, row[:len(_STEP_LABELS)]))
            step = row[len(_STEP_LABELS)]
            values = dict(zip(STEP_METRICS, row[len(_STEP_LABELS) + 1:]))
            handle.write(json.dumps({**labels, "step": step, "metrics": values}, sort_keys=True) + "\n")
    return {"training_steps": len(rows)}


def _replace_folder(new: Path, out: Path) -> None:
    """Put the folder ``new`` at ``out``: a rename, or (``out`` existing, so forced) the old folder moved aside first."""
    if not out.exists():
        os.replace(new, out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    os.replace(out, old / out.name)
    os.replace(new, out)
    shutil.rmtree(old, ignore_errors=True)
