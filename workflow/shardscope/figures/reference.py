"""Reference runs: the public nccl-tests logs bundled in ``reference/``, as import documents.

Nobody on this project measured these runs. They are read with the same nccl-tests reader as
a user's own logs, shaped like ``shardscope collectives import --out`` documents with
``source: reference``, a ``label`` and a ``fabric``, and loaded with the real ``collect`` into
a reference database of the same schema. Figures 1 and 2 draw them beside the user's runs,
always marked "reference"; ``reference/SOURCES.md`` names each file's origin.

Each run is also judged like the user's sweeps (``shardscope verdict``: plateau, size to 90%,
latency floor, expected busbw, verdict) against the topology ``runs.json`` names for it: a
verbatim ``nvidia-smi topo -m`` of the same machine, or a cost-model preset the hardware maps
to (an assumption, said in ``topology_note``); without one the verdict is ``unknown``. The
verdict documents are loaded in the same ``collect`` as the runs, so ``verdicts.judged_run_id``
links each verdict to its run.
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
#: Optional fields of a run in ``runs.json`` and their default.
_OPTIONAL = {"topology": None, "topology_note": None, "documented_cause": None}


@dataclass(frozen=True)
class ReferenceRun:
    """One bundled log: its file, how figures label it, its fabric class, link and source; the topology
    its verdict is computed against (``preset:NAME`` or a file beside the log, None: not known), why
    that topology, and the cause its source documents for its bandwidth, if any."""

    file: str
    label: str
    fabric: str
    link: str | None
    hardware: str
    source_url: str
    topology: str | None = None
    topology_note: str | None = None
    documented_cause: str | None = None

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
        optional = {f: entry.get(f, default) for f, default in _OPTIONAL.items()}
        runs.append(ReferenceRun(**{f: entry[f] for f in _FIELDS}, **optional))
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
        "reference": {"hardware": run.hardware, "source_url": run.source_url, "link": run.link,
                      "topology": run.topology, "topology_note": run.topology_note,
                      "documented_cause": run.documented_cause},
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


def verdicts_name(run: ReferenceRun) -> str:
    """File name of a reference run's verdicts document (beside its import document)."""
    return f"{run.stem}.verdicts.json"


def _topology(run: ReferenceRun, folder: str | os.PathLike[str]) -> tuple[dict[str, Any] | None, str | None]:
    """(topology.json document, name) of a run's ``topology``: a preset or a saved file beside the log."""
    if not run.topology:
        return None, None
    from shardscope.costmodel.commands import load_topology

    spec = run.topology if run.topology.startswith("preset:") else str(Path(folder) / run.topology)
    topology, _ = load_topology(spec)
    return topology, run.topology


def reference_verdicts(run: ReferenceRun, document: str | os.PathLike[str],
                       folder: str | os.PathLike[str] = REFERENCE_DIR) -> dict[str, Any]:
    """The ``shardscope.verdicts/1`` document of one reference run's import ``document``, judged as
    ``shardscope verdict DOCUMENT --topology T`` would, against the run's topology (None: unknown)."""
    from shardscope.costmodel.documents import topology_hash
    from shardscope.diagnose.evaluate import evaluate

    topology, name = _topology(run, folder)
    doc = evaluate([str(document)], topology, name)
    if topology is not None:
        doc["topology_hash"] = topology_hash(topology)
    return doc


def write_reference_verdicts(docs: list[Path], out_dir: str | os.PathLike[str],
                             folder: str | os.PathLike[str] = REFERENCE_DIR) -> list[Path]:
    """Write each run's verdicts document beside its import document (``docs``, in manifest order)."""
    out = Path(out_dir)
    return [atomic_write_json(out / verdicts_name(run), reference_verdicts(run, doc, folder))
            for run, doc in zip(load_manifest(folder), docs)]


def build_reference_db(db: str | os.PathLike[str], docs_dir: str | os.PathLike[str],
                       folder: str | os.PathLike[str] = REFERENCE_DIR,
                       manifest: str | None = None) -> dict[str, Any]:
    """Write the documents and their verdicts and load them, with the real ``collect`` (one call, so
    each verdict links its run), into a fresh database ``db``.

    The database is built beside the target and renamed over it only when complete, so a
    failure leaves the previous one (or none) in place.
    """
    from shardscope.results.store import collect

    target = Path(db)
    target.parent.mkdir(parents=True, exist_ok=True)
    docs = write_reference_documents(docs_dir, folder)
    verdicts = write_reference_verdicts(docs, docs_dir, folder)
    fresh = target.with_name(f".{target.name}.building")
    fresh.unlink(missing_ok=True)
    try:
        summary = collect(fresh, [str(d) for d in [*docs, *verdicts]])
        os.replace(fresh, target)
    finally:
        fresh.unlink(missing_ok=True)
        fresh.with_name(fresh.name + ".lock").unlink(missing_ok=True)
    summary.update(db=str(target), reference_runs=len(docs), verdicts=len(verdicts))
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
