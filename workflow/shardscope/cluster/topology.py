"""The topology of every node of a Slurm allocation, combined into one ``topology.json``.

Each node is probed by the same command a single node uses, ``python -m shardscope topology
detect``, started once per node by ``srun --ntasks-per-node 1``; each writes its own
``nodes/<node>/topology.json`` (and raw probe text) beside the combined file. The combined
document is the first node's topology (what the planner reads today) plus ``node_count`` and
``nodes``, the per-node documents. Nodes that differ (GPU model or count, links, fabric, CPU
model) stop the run: measurements from different machines must not be mixed into one answer.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from shardscope.cluster.slurm import Allocation
from shardscope.errors import UserError
from shardscope.fileio import atomic_write_json, read_json

#: Runs a command (list of arguments) and returns its exit status; replaced in unit tests.
Executor = Callable[[Sequence[str]], int]


def node_dir(out: str | Path, node: str) -> Path:
    """Where node ``node``'s own ``topology.json`` (and raw probe text) goes, beside ``out``."""
    return Path(out).parent / "nodes" / node


def probe_command(allocation: Allocation, out: str | Path, python: str = sys.executable) -> list[str]:
    """``srun`` running ``topology detect`` once on every node, each writing ``nodes/<node>/``."""
    nodes_dir = Path(out).parent / "nodes"
    script = 'exec "$0" -m shardscope topology detect --out "$1/$SLURMD_NODENAME/topology.json"'
    return ["srun", "--nodes", str(len(allocation.nodes)), "--ntasks-per-node", "1", "--kill-on-bad-exit=1",
            "sh", "-c", script, python, str(nodes_dir)]


def signature(doc: dict[str, Any]) -> dict[str, Any]:
    """What must be equal between nodes for their measurements to describe one machine type."""
    return {
        "fabric": doc.get("fabric"),
        "accelerator": doc.get("accelerator"),
        "gpus": [(g.get("name"), g.get("memory_bytes")) for g in doc.get("gpus", [])],
        "links": [(link.get("a"), link.get("b"), link.get("code")) for link in doc.get("links", [])],
        "cpu_model": doc.get("cpu", {}).get("model"),
    }


def combine_topologies(per_node: Sequence[tuple[str, dict[str, Any]]], job_id: str | None = None) -> dict[str, Any]:
    """One document for the allocation: the first node's topology plus every node's own.

    Raises :class:`UserError` when a node differs from the first one (see :func:`signature`).
    """
    if not per_node:
        raise UserError("no node topologies to combine")
    first_node, first = per_node[0]
    reference = signature(first)
    for node, doc in per_node[1:]:
        theirs = signature(doc)
        diff = sorted(key for key in reference if reference[key] != theirs[key])
        if diff:
            raise UserError(f"node {node} differs from node {first_node} in {', '.join(diff)}; "
                            "restrict the job to one node type (a partition or --constraint)")
    if len(per_node) == 1:
        return dict(first)
    combined = dict(first)
    source = dict(first.get("source", {}))
    source["slurm_job_id"] = job_id
    if "raw_files" in source:  # relative to the node's own topology.json: make them relative to ours
        source["raw_files"] = [f if Path(f).is_absolute() else f"nodes/{first_node}/{f}" for f in source["raw_files"]]
    combined["source"] = source
    combined["node_count"] = len(per_node)
    combined["nodes"] = [{"node": node, "host": doc.get("source", {}).get("host"), "topology": doc} for node, doc in per_node]
    return combined


def detect_allocation(allocation: Allocation | None, out: str | Path, python: str = sys.executable,
                      execute: Executor | None = None) -> dict[str, Any]:
    """Probe every node of ``allocation`` (or just this node) and write the combined ``out``.

    On one node this is exactly ``shardscope topology detect --out OUT``; on several, one
    ``srun`` task per node runs it into ``nodes/<node>/`` and the results are combined.
    """
    execute = execute or _execute
    if allocation is None or len(allocation.nodes) == 1:
        status = execute([python, "-m", "shardscope", "topology", "detect", "--out", str(out)])
        if status != 0:
            raise UserError(f"`shardscope topology detect` failed on this node (exit status {status})")
        return read_json(out)
    status = execute(probe_command(allocation, out, python))
    if status != 0:
        raise UserError(f"probing the nodes of Slurm job {allocation.job_id} failed (srun exit status {status})")
    per_node = []
    for node in allocation.nodes:
        path = node_dir(out, node) / "topology.json"
        if not path.exists():
            raise UserError(f"{path}: node {node} wrote no topology; is the file system shared between the nodes?")
        per_node.append((node, read_json(path)))
    combined = combine_topologies(per_node, allocation.job_id)
    atomic_write_json(out, combined)
    return combined


def check_node_count(allocation: Allocation | None, nodes: int | None) -> Allocation | None:
    """``allocation`` when it has ``nodes`` nodes (None: any count); a :class:`UserError` otherwise.

    ``nodes`` 1 probes this node alone, so it needs no allocation; more need one of exactly that size.
    """
    if nodes is None:
        return allocation
    if nodes < 1:
        raise UserError(f"--nodes must be at least 1, not {nodes}")
    if nodes == 1:
        return None
    if allocation is None:
        raise UserError(f"--nodes {nodes} needs a Slurm allocation: run it inside `sbatch`/`salloc --nodes {nodes}` "
                        "or from a rule submitted with the slurm profile")
    if len(allocation.nodes) != nodes:
        raise UserError(f"--nodes {nodes} but Slurm job {allocation.job_id} has {len(allocation.nodes)} node(s) "
                        f"({','.join(allocation.nodes)}); submit it with --nodes {nodes}")
    return allocation


def _execute(cmd: Sequence[str]) -> int:
    print("$ " + shlex.join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(list(cmd), check=False).returncode


def summary(doc: dict[str, Any]) -> str:
    """One line for logs: nodes, fabric and GPUs per node."""
    nodes = doc.get("node_count", 1)
    return json.dumps({"nodes": nodes, "fabric": doc.get("fabric"), "gpus_per_node": doc.get("gpu_count", 0)})
