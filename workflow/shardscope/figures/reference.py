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

``runs.json`` also lists ``modeled`` fabrics: one topology per fabric class of the finding (a
bundled ``nvidia-smi topo -m`` or a preset), for which the cost model's all-reduce bus bandwidth
at 2, 4, 8 … GPUs is loaded as a labelled ``predictions`` document (source ``modeled``). Figure 2
draws them as modeled lines beside the measured points, so a fabric class no public log covers
(NVLink-bridged pairs) is still shown, and always as modeled, never as measured.
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


@dataclass(frozen=True)
class ModeledFabric:
    """A fabric class drawn as modeled in figure 2: the topology the cost model runs on (``preset:NAME``
    or a file beside the logs), its legend label, the fabric class it is coloured with, why this
    topology stands for the class, and the GPU model when the topology does not name it."""

    topology: str
    label: str
    fabric: str
    note: str
    gpu: str | None = None


#: Message sizes of the modeled all-reduce: the large end, where the peak is (1 MiB .. 8 GiB).
MODELED_SIZES = tuple(2**k for k in range(20, 34))


def _manifest_entries(folder: str | os.PathLike[str], key: str) -> tuple[Path, list[Any]]:
    """(path, entries) of ``key`` in ``folder/runs.json`` (``runs`` is required, other lists may be absent)."""
    path = Path(folder) / MANIFEST_NAME
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        entries = document[key] if key == "runs" else document.get(key, [])
    except FileNotFoundError:
        raise UserError(f"{path}: reference manifest not found") from None
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise UserError(f"{path}: expected a JSON object with a 'runs' list ({exc})") from None
    if not isinstance(entries, list):
        raise UserError(f"{path}: '{key}' must be a list, got {type(entries).__name__}")
    return path, entries


def load_modeled(folder: str | os.PathLike[str] = REFERENCE_DIR) -> list[ModeledFabric]:
    """The modeled fabrics listed in ``folder/runs.json`` (``modeled``; none when absent)."""
    path, entries = _manifest_entries(folder, "modeled")
    fields = ("topology", "label", "fabric", "note")
    out = []
    for index, entry in enumerate(entries):
        missing = [f for f in fields if not isinstance(entry, dict) or not entry.get(f)]
        if missing:
            raise UserError(f"{path}: modeled[{index}] lacks {', '.join(missing)}; expected {', '.join(fields)}")
        out.append(ModeledFabric(**{f: entry[f] for f in fields}, gpu=entry.get("gpu")))
    return out


def load_manifest(folder: str | os.PathLike[str] = REFERENCE_DIR) -> list[ReferenceRun]:
    """The reference runs listed in ``folder/runs.json``; UserError if it is missing or malformed."""
    path, entries = _manifest_entries(folder, "runs")
    runs = []
    for index, entry in enumerate(entries):
        missing = [f for f in _FIELDS if not isinstance(entry, dict) or f not in entry]
        if missing:
            raise UserError(f"{path}: runs[{index}] lacks {', '.join(missing)}; expected {', '.join(_FIELDS)}")
        optional = {f: entry.get(f, default) for f, default in _OPTIONAL.items()}
        runs.append(ReferenceRun(**{f: entry[f] for f in _FIELDS}, **optional))
    return runs


def topology_files(folder: str | os.PathLike[str] = REFERENCE_DIR) -> list[str]:
    """The saved topologies (files beside the logs) that the reference verdicts are judged against and the
    modeled fabrics run on; presets need no file."""
    named = [run.topology for run in load_manifest(folder)] + [fabric.topology for fabric in load_modeled(folder)]
    return sorted({t for t in named if t and not t.startswith("preset:")})


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


def _topology(run: ReferenceRun | ModeledFabric, folder: str | os.PathLike[str]) -> tuple[dict[str, Any] | None, str | None]:
    """(topology.json document, name) of a run's ``topology``: a preset or a saved file beside the log."""
    if not run.topology:
        return None, None
    from shardscope.costmodel.commands import load_topology

    spec = run.topology if run.topology.startswith("preset:") else str(Path(folder) / run.topology)
    topology, _ = load_topology(spec)
    return topology, run.topology


def modeled_name(fabric: ModeledFabric) -> str:
    """File name of a modeled fabric's predictions document."""
    stem = fabric.topology.replace("preset:", "preset-").removesuffix(".txt")
    return f"modeled-{stem}.predictions.json"


def modeled_document(fabric: ModeledFabric, folder: str | os.PathLike[str] = REFERENCE_DIR) -> dict[str, Any]:
    """The ``shardscope.predictions/1`` document of the cost model's all-reduce on one modeled fabric, at
    the topology's default GPU counts (2, 4, 8 … up to one node) and :data:`MODELED_SIZES`, as
    ``shardscope predict collectives --ops all_reduce`` computes it; labelled for figure 2."""
    from shardscope.costmodel.documents import predictions_document, rows_for_sweep, topology_hash
    from shardscope.costmodel.machine import build_machine
    from shardscope.costmodel.sweep import default_world_sizes, predict_sweep

    topology, name = _topology(fabric, folder)
    machine = build_machine(topology, gpu_name=fabric.gpu, source=str(name))
    preds = predict_sweep(machine, ["all_reduce"], default_world_sizes(machine), MODELED_SIZES)
    doc = predictions_document(topology, machine, rows_for_sweep(preds, topology_hash(topology)))
    return {**doc, "label": fabric.label, "fabric_label": fabric.fabric}


def write_modeled_documents(out_dir: str | os.PathLike[str], folder: str | os.PathLike[str] = REFERENCE_DIR) -> list[Path]:
    """Write one predictions document per modeled fabric into ``out_dir``; returns their paths."""
    return [atomic_write_json(Path(out_dir) / modeled_name(f), modeled_document(f, folder)) for f in load_modeled(folder)]


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
    """Write the documents, their verdicts and the modeled fabrics' predictions, and load them with the
    real ``collect`` (one call, so each verdict links its run) into a fresh database ``db``.

    The database is built beside the target and renamed over it only when complete, so a
    failure leaves the previous one (or none) in place.
    """
    from shardscope.results.store import collect

    target = Path(db)
    target.parent.mkdir(parents=True, exist_ok=True)
    docs = write_reference_documents(docs_dir, folder)
    verdicts = write_reference_verdicts(docs, docs_dir, folder)
    modeled = write_modeled_documents(docs_dir, folder)
    fresh = target.with_name(f".{target.name}.building")
    fresh.unlink(missing_ok=True)
    try:
        summary = collect(fresh, [str(d) for d in [*docs, *verdicts, *modeled]])
        os.replace(fresh, target)
    finally:
        fresh.unlink(missing_ok=True)
        fresh.with_name(fresh.name + ".lock").unlink(missing_ok=True)
    summary.update(db=str(target), reference_runs=len(docs), verdicts=len(verdicts), modeled_fabrics=len(modeled))
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
