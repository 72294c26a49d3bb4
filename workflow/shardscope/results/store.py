"""``shardscope collect``: validate every input, then load all of it into DuckDB at once.

All inputs are validated before the database is touched, and every problem is reported in
one pass (file, row, column, check): the shape of each document with JSON Schema, the
relations inside it, then every table's rows with pandera. Loading happens on a copy of the
database under an exclusive lock (:func:`updating`), which replaces the original by an
atomic rename only after a successful commit and checkpoint: a failure leaves the database
byte-for-byte as it was, and a second writer waits for the first. Runs already present
(same run id) and topologies already present (same hash) are skipped, so collecting the
same files twice adds nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pandera.errors

from shardscope.errors import UserError
from shardscope.fileio import atomic_write_json, loads_bounded, read_input_bytes
from shardscope.results.ddl import ddl, schema_problems, upgrade  # noqa: F401  (ddl: part of this module's API)
from shardscope.results.documents import consistency_errors, document_kind, same_run_digest, tables_from_document
from shardscope.results.documents_derived import link_judged_runs
from shardscope.results.schemas import OWNER_KEYS, TABLES, columns, owner_key, unique_keys
from shardscope.results.shapes import shape_errors

#: Problems listed per input file before the rest are only counted (all are always counted).
MAX_PROBLEMS_PER_FILE = 25
_UNIQUENESS_CHECKS = ("multiple_fields_uniqueness", "field_uniqueness")
#: The name the database being loaded is attached under (see :func:`updating`).
_TARGET = "shardscope_target"


#: The most rows (items of all the lists together) one input document may hold, checked before its shape: more
#: than any one job writes. A collectives job writes a row per message size (sizes double, so under 64 per op between
#: 1 B and 2^63 B); a training job a row per timed step of each repeat and one per rank (the config's bounds allow
#: 100,000 steps; ten repeats of that is the most this admits, far beyond any run made); a topology.json a link per
#: GPU pair, and its 4 MiB limit holds far fewer. A file of 10^7 empty rows took collect to 23 GB before this bound.
MAX_DOCUMENT_ROWS = 1_000_000


def read_document(path: str) -> Any:
    """The JSON in ``path``; UserError for a missing, unreadable, binary, malformed, too large or too deep file.

    Over :data:`~shardscope.fileio.DEFAULT_MAX_INPUT_MIB` is refused before reading, more than
    four times :data:`MAX_DOCUMENT_ROWS` brackets (counted before parsing) or more than it list items
    (after) before any row is built.
    """
    if Path(path).is_dir():
        raise UserError(f"{path}: is a directory; expected a result JSON file")
    try:
        data = read_input_bytes(path, what="a result JSON file")
    except PermissionError:
        raise UserError(f"{path}: cannot be read (permission denied)") from None
    too_many = UserError(f"{path}: holds more than {MAX_DOCUMENT_ROWS:,} rows; no job writes that many "
                         f"(expected one job's result or a topology.json)")
    if data.count(b"{") + data.count(b"[") > 4 * MAX_DOCUMENT_ROWS:  # an over-count (brackets in strings too)
        raise too_many
    try:
        doc = loads_bounded(data.decode("utf-8"), path)
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file; expected a result JSON file") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if _list_items(doc) > MAX_DOCUMENT_ROWS:
        raise too_many
    return doc


def _list_items(doc: Any) -> int:
    """Items of every list in ``doc`` together (its nesting is bounded already)."""
    count, stack = 0, [doc]
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            count += len(value)
            stack.extend(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
    return count


def describe(exc: pandera.errors.SchemaErrors, where: str, table: str, frame: pd.DataFrame | None = None) -> list[str]:
    """One line per failed (row, column, check); a row-level check is reported once per row.

    With ``frame`` (rows read from a database), each row is also named by its run id or
    topology hash, since its position means nothing to the reader.
    """
    messages: list[str] = []
    spec = TABLES[table].to_schema().columns if table in TABLES else {}
    cases = exc.failure_cases
    # a value that could not be coerced also fails the dtype check: its coercion's failure says why, once
    uncoerced = set(cases.loc[cases["check"].astype(str).str.startswith("coerce_dtype("), "column"])
    for _, case in cases.iterrows():
        check, column, row = str(case.get("check")), case.get("column"), case.get("index")
        if check.startswith("dtype(") and column in uncoerced:
            continue
        if check.startswith("coerce_dtype(") and getattr(getattr(spec.get(column), "dtype", None), "problem", None):
            check = spec[column].dtype.problem  # a time without its zone, text that is not JSON: say so
        if check == "column_in_schema":
            line = f"{where}: table {table}: unexpected column {case.get('failure_case')!r}"
        elif check == "column_in_dataframe":
            line = f"{where}: table {table}: missing column {case.get('failure_case')!r}"
        else:
            at = f"row {int(row)}" if pd.notna(row) else "all rows"
            if frame is not None and pd.notna(row) and int(row) in frame.index:
                key = owner_key(table)
                at += f" ({key} {frame.loc[int(row), key]})"
            if check in _UNIQUENESS_CHECKS:
                keys = ", ".join(unique_keys(table))
                line = f"{where}: table {table}, {at}, columns {keys}: duplicated key (another row has the same values)"
            else:
                row_check = case.get("schema_context") == "DataFrameSchema"
                name = "(row check)" if row_check or pd.isna(column) else column
                value = "" if row_check else f" (value {case.get('failure_case')!r})"
                line = f"{where}: table {table}, {at}, column {name}: failed {check}{value}"
        if line not in messages:
            messages.append(line)
    return messages


def validate(table: str, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` checked by ``table``'s pandera schema, the one judge of rows: the coerced frame, or pandera's
    ``SchemaErrors`` naming every failed row, column and check."""
    return TABLES[table].validate(frame, lazy=True)


def validate_frame(table: str, rows: list[dict[str, Any]] | pd.DataFrame, where: str,
                   named_rows: bool = False) -> tuple[pd.DataFrame | None, list[str]]:
    """Rows of ``table`` checked by its pandera schema: (validated frame, []) or (None, problems)."""
    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows, columns=columns(table))
    try:
        return validate(table, df), []
    except pandera.errors.SchemaErrors as exc:
        return None, describe(exc, where, table, df if named_rows else None)


def _link_topologies(parsed: list[tuple[str, dict[str, list[dict[str, Any]]]]]) -> None:
    """Tie each measured run (and each doctor run) to the topology of its host loaded in the same collect.

    A run whose host matches one topology's host gets that one; otherwise the one topology
    without a host (parsed from a saved file) if there is exactly one; a run without a host
    (the record of a failed job) gets the topology when only one was loaded.
    """
    topologies = {(t["topology_hash"], t["host"]) for _, tables in parsed for t in tables.get("topologies", [])}
    for _, tables in parsed:
        for run in tables.get("runs", []):
            if (run["source"] != "measured" and run["kind"] != "doctor") or run["topology_hash"]:
                continue
            if run["host"] is None:
                matches = {h for h, _ in topologies}
            else:
                matches = {h for h, host in topologies if host == run["host"]} or {h for h, host in topologies if host is None}
            if len(matches) == 1:
                run["topology_hash"] = matches.pop()


def _split_repeats(parsed: list[tuple[str, dict[str, list[dict[str, Any]]]]]) -> tuple[list[int], list[int]]:
    """Positions of the files validated in one pass, and of those validated alone.

    A file holding a run id or topology hash that an earlier file of the call already holds
    (the same run twice, or a conflict already reported) would look like a duplicated key in
    one pass over all files; it is validated on its own, as before, and its copy dropped later.
    """
    claimed: set[str] = set()
    batch, alone = [], []
    for i, (_, tables) in enumerate(parsed):
        keys = {row[key] for key, parent in OWNER_KEYS.items() for row in tables.get(parent, [])}
        (alone if keys & claimed else batch).append(i)
        claimed |= keys
    return batch, alone


def arrow_frame(df: pd.DataFrame) -> Any:
    """A validated pandas frame as the Arrow table DuckDB inserts from (its column types as pandera coerced them)."""
    import pyarrow

    return pyarrow.Table.from_pandas(df, preserve_index=False)


def _validate_batch(parsed: list[tuple[str, dict[str, list[dict[str, Any]]]]], table: str, errors: list[str]) -> Any:
    """``table``'s rows of every file in ``parsed``, validated in one pass, as an Arrow table; problems added to ``errors``.

    One pandera pass over all of them (:func:`validate`). When it fails, only the files its failing rows come
    from (every file, if a failure names no row) are validated again one by one, so each problem names its file
    and its row in that file exactly as a per-file validation does.
    """
    rows: list[dict[str, Any]] = []
    origin: list[int] = []
    for i, (_, tables) in enumerate(parsed):
        rows += tables.get(table, [])
        origin += [i] * len(tables.get(table, []))
    if not rows:
        return None
    try:
        return arrow_frame(validate(table, pd.DataFrame(rows, columns=columns(table))))
    except pandera.errors.SchemaErrors as exc:
        at = exc.failure_cases["index"] if "index" in exc.failure_cases else pd.Series([None])
        files = set(range(len(parsed))) if at.isna().any() else {origin[int(i)] for i in at}
        found = [line for i in sorted(files) if parsed[i][1].get(table)
                 for line in validate_frame(table, parsed[i][1][table], parsed[i][0])[1]]
        errors.extend(found or describe(exc, "the inputs", table))
        return None


def _validate_tables(parsed: list[tuple[str, dict[str, list[dict[str, Any]]]]], errors: list[str]) -> dict[str, Any]:
    """Every table's rows of every file validated (one pass per table) as Arrow tables; problems added to ``errors``.

    pandera's cost is mostly per call (about 2 ms per column), so each table is validated once over the rows
    of every document of the call, not once per document.
    """
    import pyarrow

    batch, alone = _split_repeats(parsed)
    frames: dict[str, Any] = {}
    for table in TABLES:
        found = [_validate_batch([parsed[i] for i in batch], table, errors)]
        found += [_validate_batch([parsed[i]], table, errors) for i in alone]
        valid = [t for t in found if t is not None]
        if len(valid) == 1:
            frames[table] = valid[0]
        elif valid:
            frames[table] = pyarrow.concat_tables([t.cast(valid[0].schema) for t in valid])
        else:
            frames[table] = arrow_frame(pd.DataFrame(columns=columns(table)))
    return frames


def _positions(rows: list[int]) -> Any:
    """Row positions as an int64 Arrow array (an empty Python list would be of Arrow's null type)."""
    import pyarrow

    return pyarrow.array(rows, type=pyarrow.int64())


def distinct(rows: Any, key: str | None = None) -> Any:
    """The Arrow table ``rows`` without repeated rows (same ``key``, or every column the same), the first one kept.

    Nulls count as equal, as pandas' ``drop_duplicates`` counts them.
    """
    if rows.num_rows < 2:
        return rows
    values = [rows.column(key).to_pylist()] if key else [rows.column(i).to_pylist() for i in range(rows.num_columns)]
    seen: set[tuple[Any, ...]] = set()
    keep = []
    for i, row in enumerate(zip(*values)):
        if row not in seen:
            seen.add(row)
            keep.append(i)
    return rows if len(keep) == rows.num_rows else rows.take(_positions(keep))


def validate_inputs(paths: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Validate every input file; return the rows per table (Arrow tables) and every error found, all at once.

    Each run's row carries ``content_digest`` (:func:`same_run_digest` of its document), so
    a later collect can tell the same run collected again from a conflicting one.
    """
    combined, errors, _ = _validate_inputs(paths)
    return combined, errors


def _validate_inputs(paths: list[str]) -> tuple[dict[str, Any], list[str], dict[str, str]]:
    """:func:`validate_inputs`, and the file each run id was first read from."""
    errors: list[str] = []
    parsed: list[tuple[str, dict[str, list[dict[str, Any]]]]] = []
    seen_runs: dict[str, tuple[str, str]] = {}
    for path in paths:
        try:
            doc = read_document(path)
            kind = document_kind(doc, path)
        except UserError as exc:
            errors.append(str(exc))
            continue
        problems = shape_errors(doc, kind, path)
        if problems:
            errors.extend(problems)
            continue
        errors.extend(consistency_errors(doc, kind, path))
        tables = tables_from_document(doc, path)
        for run in tables.get("runs", []):
            digest, first = same_run_digest(doc), seen_runs.get(run["run_id"])
            run["content_digest"] = digest
            if first and first[1] != digest:
                errors.append(f"{path}: describes the same run as {first[0]} (same kind, job id, host and time, "
                              f"run id {run['run_id']}) with different contents; keep one of them")
            seen_runs.setdefault(run["run_id"], (path, digest))
        parsed.append((path, tables))
    _link_topologies(parsed)
    link_judged_runs(parsed)
    combined = _validate_tables(parsed, errors)
    order = {path: i for i, path in enumerate(paths)}
    errors.sort(key=lambda line: order.get(line.split(": ", 1)[0], len(order)))  # stable: by input file, then as found
    if not errors:
        for key, parent in OWNER_KEYS.items():
            combined[parent] = distinct(combined[parent], key)
        for table, rows in combined.items():
            if table not in OWNER_KEYS.values():
                combined[table] = distinct(rows)
    return combined, errors, {run_id: path for run_id, (path, _) in seen_runs.items()}


def problem_report(errors: list[str], what: str = "the inputs") -> str:
    """All problems, grouped by file in the order found, at most MAX_PROBLEMS_PER_FILE lines per file."""
    by_file: dict[str, list[str]] = {}
    for line in errors:
        by_file.setdefault(line.split(": ", 1)[0], []).append(line)
    shown: list[str] = []
    for lines in by_file.values():
        shown += lines[:MAX_PROBLEMS_PER_FILE]
        if len(lines) > MAX_PROBLEMS_PER_FILE:
            shown.append(f"{lines[0].split(': ', 1)[0]}: … and {len(lines) - MAX_PROBLEMS_PER_FILE} more problem(s) in this file")
    return f"{len(errors)} problem(s) in {what}; nothing was loaded:\n  " + "\n  ".join(shown)


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


def is_duckdb_file(path: Path) -> bool:
    """Whether ``path`` starts with DuckDB's file header (the magic ``DUCK`` at byte 8)."""
    with open(path, "rb") as handle:
        return handle.read(12)[8:12] == b"DUCK"


def check_database(con: duckdb.DuckDBPyConnection, db: str | os.PathLike[str], catalog: str | None = None,
                   require_runs: bool = False) -> None:
    """UserError naming every reason the database attached as ``catalog`` is not a shardscope one."""
    problems = schema_problems(con, catalog, require_runs)
    if problems:
        raise UserError(f"{db}: not a shardscope results database this version reads: " + "; ".join(problems))


#: The zone of every session that reads or writes a database: DuckDB otherwise takes the machine's (``TZ``), and a
#: ``TIMESTAMP WITH TIME ZONE`` would come back, print and compare as text in that zone.
SESSION_ZONE = "SET TimeZone = 'UTC'"

#: The settings of the in-memory DuckDB that attaches a load's copy of the database. A commit checkpoints at
#: once, without writing the WAL first: the copy is checkpointed before it replaces the database anyway, and
#: a copy that fails is thrown away, so the WAL's crash safety protected nothing. No fsync by DuckDB:
#: :func:`updating` syncs the finished copy once before the rename (the only moment its bytes must be on disk).
#: Times are read and written in UTC (:data:`SESSION_ZONE`), whatever the machine's zone.
_HOST_SETTINGS = ("SET checkpoint_threshold = '0KB'", "SET auto_checkpoint_skip_wal_threshold = 0",
                  "SET fsync_mode = 'NONE'", SESSION_ZONE)


@contextlib.contextmanager
def updating(db: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to a private copy of ``db``, taken under the lock; it replaces ``db`` only if the block succeeds.

    The caller runs its transaction on the connection (the copy is its current database);
    on any exception the copy is thrown away and ``db`` stays byte-for-byte as it was. Each call
    opens its own in-memory DuckDB and closes it, which detaches the copy and drops whatever the block left.
    """
    with exclusive_lock(db):
        remove_leftover_copies(db)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{db.name}.", suffix=".tmp", dir=db.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            if db.exists():
                if db.is_dir() or not is_duckdb_file(db):
                    raise UserError(f"{db}: exists but is not a DuckDB database file; choose another --db path")
                shutil.copy2(db, tmp)
            else:
                tmp.unlink()
            with duckdb.connect() as con:
                for setting in _HOST_SETTINGS:
                    con.execute(setting)
                try:
                    con.execute(f"ATTACH '{str(tmp).replace(chr(39), chr(39) * 2)}' AS {_TARGET}")
                except duckdb.Error as exc:
                    raise UserError(f"{db}: cannot be opened by DuckDB {duckdb.__version__}: "
                                    f"{str(exc).splitlines()[0]}") from None
                con.execute(f"USE {_TARGET}")
                check_database(con, db)
                yield con
                con.execute(f"CHECKPOINT {_TARGET}")
            _sync(tmp)
            os.replace(tmp, db)
        finally:
            tmp.unlink(missing_ok=True)
            Path(str(tmp) + ".wal").unlink(missing_ok=True)


def remove_leftover_copies(db: Path) -> list[Path]:
    """Remove the private copies of ``db`` (and their WAL files) that killed loads left beside it; the paths removed.

    Called by :func:`updating` while it holds the lock, so no other writer is using one: a copy is
    ``.<db name>.<8 characters of mkstemp>.tmp``, and only files named exactly so are touched. Each
    is a whole copy of the database, so four killed collects of a 1 GB database left 4 GB.
    """
    pattern = re.compile(rf"\.{re.escape(db.name)}\.[a-z0-9_]{{8}}\.tmp(\.wal)?")
    removed = []
    for entry in db.parent.iterdir():
        if pattern.fullmatch(entry.name) and entry.is_file():
            entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed


def _sync(path: Path) -> None:
    """Flush ``path``'s bytes to disk (the host's DuckDB does not fsync; see :data:`_HOST_SETTINGS`)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def insert_frame(con: duckdb.DuckDBPyConnection, table: str, df: Any) -> None:
    """Append validated rows (a pandas frame or an Arrow table) to ``table`` by column name.

    The rows go to DuckDB as an Arrow table: DuckDB scans a pandas frame of a few rows in
    about three times the time of converting it to Arrow and scanning that. DuckDB finds the
    table by its local name (a replacement scan), which costs half of registering it as a view.
    """
    if len(df):
        import pyarrow

        rows = df if isinstance(df, pyarrow.Table) else pyarrow.Table.from_pandas(df, preserve_index=False)
        shardscope_incoming_rows = rows  # noqa: F841  (read by DuckDB's replacement scan below)
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM shardscope_incoming_rows")


def stored_keys(con: duckdb.DuckDBPyConnection, parent: str, key: str, values: set[str], also: str = "") -> list[tuple[Any, ...]]:
    """Rows (``key`` and the columns ``also`` names) of ``parent`` whose ``key`` is one of ``values``.

    Only the incoming keys are looked up: reading every stored key made each load's cost
    grow with the database.
    """
    if not values:
        return []
    return con.execute(f"SELECT {key}{', ' + also if also else ''} FROM {parent} WHERE {key} IN (SELECT unnest(?::VARCHAR[]))",
                       [sorted(values)]).fetchall()


def conflicts(con: duckdb.DuckDBPyConnection, runs: Any, run_paths: dict[str, str], db: str | os.PathLike[str],
              stored: list[tuple[Any, ...]] | None = None) -> list[str]:
    """One sentence per incoming run (``runs``: an Arrow table) whose run id the database holds with a different content digest.

    A run stored before digests were kept (null digest) cannot be compared and counts as present.
    ``stored``: the (run id, content digest) rows of the incoming run ids, if already looked up.
    """
    incoming = dict(zip(runs.column("run_id").to_pylist(), runs.column("content_digest").to_pylist()))
    if stored is None:
        stored = stored_keys(con, "runs", "run_id", set(incoming), "content_digest")
    clashes = sorted(run_id for run_id, digest in stored if digest is not None and incoming[run_id] != digest)
    return [f"{run_paths.get(run_id, 'an input')}: run id {run_id} is already in {db} with different contents "
            f"(a conflict: the same kind, job id, host and time measured differently); keep one of them"
            for run_id in clashes]


def _load(con: duckdb.DuckDBPyConnection, frames: dict[str, Any], present: dict[str, set[str]] | None = None) -> dict[str, int]:
    """Insert every run and topology not present yet (``frames``: Arrow tables; the layout is upgraded already); counts of new and skipped.

    ``present``: owner key -> the incoming keys the database holds, where already looked up.
    """
    counts: dict[str, int] = {}
    new_keys: dict[str, set[str]] = {}
    for key, parent in OWNER_KEYS.items():
        incoming = set(frames[parent].column(key).to_pylist())
        existing = (present or {}).get(key)
        if existing is None:
            existing = {row[0] for row in stored_keys(con, parent, key, incoming)}
        new_keys[key] = incoming - existing
        counts[f"new_{parent}"], counts[f"skipped_{parent}"] = len(incoming - existing), len(incoming & existing)
    for table, rows in frames.items():
        if len(rows):
            keys = rows.column(owner_key(table)).to_pylist()
            new = new_keys[owner_key(table)]
            insert_frame(con, table, rows if new >= set(keys) else rows.take(_positions([i for i, k in enumerate(keys) if k in new])))
    return counts


def collect(db: str | os.PathLike[str], inputs: list[str], manifest: str | None = None) -> dict[str, Any]:
    """Validate ``inputs`` and load them into ``db`` in one transaction; see the module docstring.

    A run whose id the database already holds with other contents is a conflict: nothing is loaded.
    """
    frames, errors, run_paths = _validate_inputs([str(p) for p in inputs])
    if errors:
        raise UserError(problem_report(errors))
    target = Path(db)
    manifest_written = False
    try:
        with updating(target) as con:
            con.execute("BEGIN TRANSACTION")
            upgrade(con)
            incoming = set(frames["runs"].column("run_id").to_pylist())
            stored = stored_keys(con, "runs", "run_id", incoming, "content_digest")
            clashes = conflicts(con, frames["runs"], run_paths, target, stored)
            if len(clashes) == 1:
                raise UserError(clashes[0] + "; nothing was loaded")
            if clashes:
                raise UserError(problem_report(clashes))
            counts = _load(con, frames, {"run_id": {row[0] for row in stored}})
            con.execute("COMMIT")
            summary = {"db": str(target), "inputs": [str(p) for p in inputs], "new_runs": counts["new_runs"],
                       "skipped_runs": counts["skipped_runs"], "new_topologies": counts["new_topologies"],
                       "skipped_topologies": counts["skipped_topologies"],
                       "rows": {t: int(len(df)) for t, df in frames.items()}}
            # Written before the copy replaces the database: a manifest that cannot be written (a full disk) fails the
            # load with the database as it was; if the replacement fails after it, the manifest is removed again.
            if manifest:
                atomic_write_json(manifest, summary)
                manifest_written = True
    except BaseException:
        if manifest and manifest_written:
            Path(manifest).unlink(missing_ok=True)
        raise
    return summary


def connect_readonly(db: str | os.PathLike[str]) -> duckdb.DuckDBPyConnection:
    """Open the database for queries (figures, report); UserError if it does not exist.

    The session's zone is UTC (:data:`SESSION_ZONE`): times come back, and print, the same on every machine.
    """
    if not Path(db).exists():
        raise UserError(f"{db}: database not found; run the pipeline or `shardscope collect` first")
    con = duckdb.connect(str(db), read_only=True)
    con.execute(SESSION_ZONE)
    return con
