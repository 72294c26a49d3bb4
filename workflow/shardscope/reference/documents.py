"""One bundled log as a ``collectives_import`` document labelled as a reference run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from shardscope.errors import UserError
from shardscope.results.reference_manifest import ReferenceRun, load_manifest

if TYPE_CHECKING:
    from shardscope.collectives.nccl_tests import NcclTestsResult


def run_for_log(manifest: str | Path, log: str | Path) -> ReferenceRun:
    """The run of ``manifest`` (a ``runs.json``) whose ``file`` is the name of ``log``; UserError if none is."""
    name = Path(log).name
    runs = load_manifest(Path(manifest).parent)
    for run in runs:
        if run.file == name:
            return run
    raise UserError(f"{manifest}: no run has file {name!r}; expected one of {', '.join(r.file for r in runs)}")


def reference_document(run: ReferenceRun, result: NcclTestsResult) -> dict[str, Any]:
    """The import document of ``run``, read as ``result``: ``source: reference``, its label, fabric and sources.

    Rows of 0 bytes (nccl-tests prints them when the size is below one element per rank) have
    no bandwidth and are left out; every other row is kept as read. The file is named
    ``reference/<file>`` wherever the log lies, so the run's id does not depend on the folder.
    """
    from shardscope.collectives.nccl_tests import to_rows_for_db

    name = f"reference/{run.file}"
    rows = [{**row, "source": "reference"} for row in to_rows_for_db(result, name) if row["size_bytes"] > 0]
    if not rows:
        raise UserError(f"{run.file}: no row with a message size above 0 bytes; expected an nccl-tests sweep")
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
