"""Reference runs: the public nccl-tests logs bundled in ``reference/``, as import documents.

Nobody on this project measured these runs. They are read with the same nccl-tests reader as
a user's own logs, shaped like ``shardscope collectives import --out`` documents with
``source: reference``, a ``label`` and a ``fabric``, and loaded with the real ``collect`` into
a reference database of the same schema. Figures 1 and 2 draw them beside the user's runs,
always marked "reference"; ``reference/SOURCES.md`` names each file's origin.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardscope.errors import UserError
from shardscope.fileio import atomic_write_json

REFERENCE_DIR = Path(__file__).with_name("reference")
MANIFEST_NAME = "runs.json"
_FIELDS = ("file", "label", "fabric", "link", "hardware", "source_url")


@dataclass(frozen=True)
class ReferenceRun:
    """One bundled log: its file, how figures label it, its fabric class, link and source."""

    file: str
    label: str
    fabric: str
    link: str | None
    hardware: str
    source_url: str

    @property
    def stem(self) -> str:
        """The file name without its extension, used to name the import document."""
        return Path(self.file).stem


def load_manifest(folder: str | os.PathLike[str] = REFERENCE_DIR) -> list[ReferenceRun]:
    """The reference runs listed in ``folder/runs.json``; UserError if it is missing or malformed."""
    path = Path(folder) / MANIFEST_NAME
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["runs"]
    except FileNotFoundError:
        raise UserError(f"{path}: reference manifest not found") from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: expected a JSON object with a 'runs' list ({exc})") from None
    runs = []
    for index, entry in enumerate(entries):
        missing = [f for f in _FIELDS if not isinstance(entry, dict) or f not in entry]
        if missing:
            raise UserError(f"{path}: runs[{index}] lacks {', '.join(missing)}; expected {', '.join(_FIELDS)}")
        runs.append(ReferenceRun(**{f: entry[f] for f in _FIELDS}))
    return runs


def reference_document(run: ReferenceRun, folder: str | os.PathLike[str] = REFERENCE_DIR) -> dict[str, Any]:
    """The ``collectives_import`` document of one reference run, as ``collect`` loads it.

    Rows of 0 bytes (nccl-tests prints them when the size is below one element per rank)
    have no bandwidth and are left out; every other row is kept as read.
    """
    from shardscope.collectives.nccl_tests import read_nccl_tests, to_rows_for_db

    path = Path(folder) / run.file
    result = read_nccl_tests(path)
    name = f"reference/{run.file}"
    rows = [{**row, "source": "reference"} for row in to_rows_for_db(result, name) if row["size_bytes"] > 0]
    return {
        "schema": "shardscope.collectives-import/1",
        "kind": "collectives_import",
        "source": "reference",
        "source_file": name,
        "label": run.label,
        "fabric": run.fabric,
        "reference": {"hardware": run.hardware, "source_url": run.source_url, "link": run.link},
        "op": result.op,
        "world_size": result.world_size,
        "generation": result.generation,
        "version": result.version,
        "devices": result.devices,
        "peak_busbw_gbps": max(row["busbw_gbps"] for row in rows),
        "reported_avg_busbw_gbps": result.reported_avg_busbw_gbps,
        "rows": rows,
    }


def write_reference_documents(out_dir: str | os.PathLike[str],
                              folder: str | os.PathLike[str] = REFERENCE_DIR) -> list[Path]:
    """Write one import document per reference run into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    written = []
    for run in load_manifest(folder):
        written.append(atomic_write_json(out / f"{run.stem}.json", reference_document(run, folder)))
    return written


def build_reference_db(db: str | os.PathLike[str], docs_dir: str | os.PathLike[str],
                       folder: str | os.PathLike[str] = REFERENCE_DIR,
                       manifest: str | None = None) -> dict[str, Any]:
    """Write the documents and load them, with the real ``collect``, into a fresh database ``db``.

    The database is built beside the target and renamed over it only when complete, so a
    failure leaves the previous one (or none) in place.
    """
    from shardscope.results.store import collect

    target = Path(db)
    target.parent.mkdir(parents=True, exist_ok=True)
    docs = write_reference_documents(docs_dir, folder)
    fresh = target.with_name(f".{target.name}.building")
    fresh.unlink(missing_ok=True)
    try:
        summary = collect(fresh, [str(d) for d in docs])
        os.replace(fresh, target)
    finally:
        fresh.unlink(missing_ok=True)
        fresh.with_name(fresh.name + ".lock").unlink(missing_ok=True)
    summary["db"] = str(target)
    if manifest:
        atomic_write_json(manifest, summary)
    return summary


@contextlib.contextmanager
def reference_database(reference_db: str | os.PathLike[str] | None, bundled: bool = True) -> Iterator[Path | None]:
    """The reference database to draw with: ``reference_db`` when given, else (``bundled``) one built
    from the bundled logs in a temporary folder for the duration of the block, else None."""
    if reference_db is not None:
        yield Path(reference_db)
    elif not bundled:
        yield None
    else:
        with tempfile.TemporaryDirectory(prefix="shardscope-reference.") as tmp:
            db = Path(tmp) / "reference.duckdb"
            build_reference_db(db, tmp)
            yield db
