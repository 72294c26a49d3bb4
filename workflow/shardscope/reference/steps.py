"""The reference stage's commands, spelled once: the Snakemake rules join them into their shell lines and
:func:`shardscope.reference.build.build_reference_db` runs them in-process, so both build the same database."""

from __future__ import annotations

import os
from pathlib import Path

from shardscope.results.reference_manifest import MANIFEST_NAME, ModeledFabric, ReferenceRun

#: Message sizes of the modeled all-reduce: the large end, where the peak is (1 MiB .. 8 GiB, powers of two).
MODELED_MIN_BYTES = 2**20
MODELED_MAX_BYTES = 2**33

Folder = str | os.PathLike[str]


def import_name(run: ReferenceRun) -> str:
    """File name of a reference run's import document."""
    return f"{run.stem}.json"


def verdicts_name(run: ReferenceRun) -> str:
    """File name of a reference run's verdicts document (beside its import document)."""
    return f"{run.stem}.verdicts.json"


def modeled_name(fabric: ModeledFabric) -> str:
    """File name of a modeled fabric's predictions document."""
    stem = fabric.topology.replace("preset:", "preset-").removesuffix(".txt")
    return f"modeled-{stem}.predictions.json"


def topology_file(spec: str | None, folder: Folder) -> str | None:
    """The saved topology file a ``runs.json`` topology names (beside the logs), or None for a preset or none."""
    return str(Path(folder) / spec) if spec and not spec.startswith("preset:") else None


def topology_inputs(spec: str | None, folder: Folder) -> list[str]:
    """The files a step reads for its topology: the saved file, or none for a preset (a rule's input)."""
    path = topology_file(spec, folder)
    return [path] if path else []


def _topology_flag(spec: str | None, folder: Folder) -> list[str]:
    return ["--topology", topology_file(spec, folder) or spec] if spec else []


def import_command(run: ReferenceRun, folder: Folder, out: Folder) -> list[str]:
    """``collectives import LOG --reference runs.json --out OUT``: the log as a labelled reference import document."""
    return ["collectives", "import", str(Path(folder) / run.file), "--reference", str(Path(folder) / MANIFEST_NAME),
            "--out", str(out)]


def verdict_command(run: ReferenceRun, folder: Folder, document: Folder, out: Folder) -> list[str]:
    """``verdict DOC [--topology T] --out OUT``: the run judged like a user's sweep, against its topology if one is known."""
    return ["verdict", str(document), *_topology_flag(run.topology, folder), "--out", str(out)]


def modeled_command(fabric: ModeledFabric, folder: Folder, out: Folder) -> list[str]:
    """``predict collectives``: the cost model's all-reduce on one modeled fabric at its default GPU counts, labelled."""
    gpu = ["--gpu", fabric.gpu] if fabric.gpu else []
    return ["predict", "collectives", *_topology_flag(fabric.topology, folder), *gpu, "--ops", "all_reduce",
            "--min-bytes", str(MODELED_MIN_BYTES), "--max-bytes", str(MODELED_MAX_BYTES),
            "--label", fabric.label, "--fabric-label", fabric.fabric, "--out", str(out)]


def collect_command(db: Folder, inputs: list[str], manifest: Folder | None = None) -> list[str]:
    """``collect --db DB [--manifest M] INPUT...``: every document in one call, so each verdict links its run."""
    return ["collect", "--db", str(db), *(["--manifest", str(manifest)] if manifest else []), *inputs]
