"""Reference runs: the manifest of the public nccl-tests logs bundled in ``reference/``.

Nobody on this project measured these runs; ``reference/SOURCES.md`` names each file's origin.
``runs.json`` lists each log with the label figures draw it under, its fabric class, link and
hardware, the topology its verdict is judged against (a verbatim ``nvidia-smi topo -m`` of the
same machine, or a cost-model preset the hardware maps to, an assumption said in
``topology_note``) and the cause its source documents; and the ``modeled`` fabrics (one
topology per fabric class of the finding) that figure 2 draws as modeled lines.

This module only reads that manifest (figures and the report name a run's link and sources
from it). The reference stage (:mod:`shardscope.reference`, ``workflow/rules/reference.smk``)
imports, judges, models and collects the runs into the reference database the figures attach.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardscope.errors import UserError
from shardscope.fileio import loads_bounded

#: The bundled reference logs and their manifest (package data beside the figures that draw them).
REFERENCE_DIR = Path(__file__).resolve().parents[1] / "figures" / "reference"
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


def _manifest_entries(folder: str | os.PathLike[str], key: str) -> tuple[Path, list[Any]]:
    """(path, entries) of ``key`` in ``folder/runs.json`` (``runs`` is required, other lists may be absent)."""
    path = Path(folder) / MANIFEST_NAME
    try:
        document = loads_bounded(path.read_text(encoding="utf-8"), path)
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
