"""Shared helpers of the cost-model tests: fixtures parsed once, published records turned into jobs."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from shardscope.costmodel.collectives import Job, peak_busbw_gbps, predict_collective
from shardscope.costmodel.machine import Machine, build_machine
from shardscope.costmodel.placement import best_placement
from shardscope.costmodel.presets import preset, synthetic_topology
from shardscope.topology.parse import parse_file

DATA = Path(__file__).resolve().parents[1] / "data"
REFERENCE = Path(__file__).resolve().parents[2] / "workflow" / "shardscope" / "figures" / "reference"
TOPO_FILES = sorted(p.name for p in (DATA / "topo").glob("*.txt"))


@functools.cache
def _topology_text(relative: str) -> str:
    return json.dumps(parse_file(DATA / relative).to_dict())


def topology(relative: str) -> dict[str, Any]:
    """The topology.json document of a saved probe output under tests/data (parsed once per session)."""
    return json.loads(_topology_text(relative))


def fixture_machine(name: str, gpu: str | None = None, **kwargs: Any) -> Machine:
    """A machine from one of tests/data/topo/*.txt."""
    return build_machine(topology(f"topo/{name}"), gpu_name=gpu, **kwargs)


def published_records() -> list[dict[str, Any]]:
    """Every record of tests/data/published/collectives.json."""
    return json.loads((DATA / "published" / "collectives.json").read_text())["records"]


def record_job(record: dict[str, Any]) -> Job:
    """The job a published record describes, on its stated (or saved) topology."""
    spec = record["topology"]
    if "file" in spec:
        doc = topology(spec["file"])
    elif "reference" in spec:
        doc = parse_file(REFERENCE / spec["reference"]).to_dict()
    elif "preset" in spec:
        doc = preset(spec["preset"])
    else:
        doc = synthetic_topology(**spec["synthetic"])
    machine = build_machine(doc, gpu_name=record.get("gpu"), nic_gbps=record.get("nic_gbps"))
    nodes = record.get("nodes", 1)
    nvlink = record.get("transport", "default") != "pcie"
    members = tuple(record.get("members") or best_placement(machine, record["world_size"] // nodes, nvlink).members)
    return Job(machine, members, nodes=nodes, nvlink=nvlink)


def record_prediction(record: dict[str, Any]) -> float:
    """The model's busbw for a record: at its message size, or the large-message peak when none is given."""
    job = record_job(record)
    algorithms = [record["algorithm"]] if record.get("algorithm") else None
    if record.get("size_bytes"):
        return predict_collective(record["op"], record["size_bytes"], job, algorithms).busbw_gbps
    return peak_busbw_gbps(record["op"], job, algorithms)


def validation_rows() -> list[dict[str, Any]]:
    """Every in-scope record with the model's busbw, the ratio modeled/measured and the algorithm NCCL is modeled to run."""
    rows = []
    for record in published_records():
        if not record["in_scope"]:
            continue
        modeled = record_prediction(record)
        job = record_job(record)
        algorithms = [record["algorithm"]] if record.get("algorithm") else None
        chosen = predict_collective(record["op"], record.get("size_bytes") or 1 << 40, job, algorithms)
        rows.append({"id": record["id"], "op": record["op"], "ranks": record["world_size"], "nodes": record.get("nodes", 1),
                     "measured": record["busbw_gbps"], "modeled": modeled, "ratio": modeled / record["busbw_gbps"],
                     "algorithm": chosen.algorithm, "bottleneck": chosen.bottleneck, "source": record["source"],
                     "known_miss": record.get("known_miss")})
    return rows
