"""``shardscope db export``: every table and view of the database as Parquet (or CSV) files.

DuckDB writes each file with ``COPY (SELECT * FROM name) TO … (FORMAT parquet)``. The export
reads a private copy of the database (upgraded to the current layout if it is older), so
the database is never modified and every table and view is present; files are written in
a temporary folder inside the output folder and renamed into place only when all of them
were written, beside ``schema.sql`` (the DDL that recreates the tables).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import duckdb

from shardscope.errors import UserError
from shardscope.results.ddl import VIEWS, schema_text, upgrade
from shardscope.results.schemas import TABLES
from shardscope.results.store import check_database, is_duckdb_file

#: Output format -> DuckDB COPY options.
FORMATS = {"parquet": "(FORMAT parquet)", "csv": "(FORMAT csv, HEADER true)"}


def export_database(db: str | os.PathLike[str], out_dir: str | os.PathLike[str], fmt: str = "parquet") -> dict[str, int]:
    """Write ``<table>.<fmt>`` for every table and view of ``db`` into ``out_dir``; rows per file."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt}: unknown export format; expected one of {', '.join(FORMATS)}")
    source, out = Path(db), Path(out_dir)
    if not source.is_file():
        raise UserError(f"{db}: database not found; run the pipeline or `shardscope collect` first")
    if not is_duckdb_file(source):
        raise UserError(f"{db}: not a DuckDB database file")
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".export-", dir=out))
    try:
        snapshot = work / "snapshot.duckdb"
        shutil.copy2(source, snapshot)
        counts: dict[str, int] = {}
        with duckdb.connect(str(snapshot)) as con:
            check_database(con, db, require_runs=True)
            upgrade(con)
            for name in [*TABLES, *VIEWS]:
                target = str(work / f"{name}.{fmt}").replace("'", "''")
                con.execute(f"COPY (SELECT * FROM {name}) TO '{target}' {FORMATS[fmt]}")
                counts[name] = con.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
        (work / "schema.sql").write_text(schema_text())
        for name in [*counts, "schema"]:
            filename = "schema.sql" if name == "schema" else f"{name}.{fmt}"
            os.replace(work / filename, out / filename)
        return counts
    finally:
        shutil.rmtree(work, ignore_errors=True)
