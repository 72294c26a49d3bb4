"""Turn ``topology.json`` and the config into the list of jobs (the experiment plan).

World sizes come from the GPU count (powers of two up to it, and the count itself) or, on
a machine without GPUs, from ``cpu.ranks``. Placements say where a job's ranks sit:
``one_island`` (inside one NVLink island), ``cross_island`` (spread over islands),
``cross_numa`` (spread over NUMA nodes), ``all`` (every GPU) and ``local`` (CPU ranks).
Transports: ``default``, and ``pcie`` (NVLink disabled through NCCL variables) where links
are NVLink. Each job carries the GPUs it must see and the environment it must set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: NCCL variables that force traffic off NVLink (and NVLink SHARP) onto PCIe / shared memory.
PCIE_TRANSPORT_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}


@dataclass(frozen=True)
class Placement:
    """A named choice of GPUs for a world size."""

    name: str
    devices: tuple[int, ...]


def world_sizes(topology: dict[str, Any], config: dict[str, Any]) -> list[int]:
    """World sizes to run: the config's list, or derived from the hardware when ``auto``."""
    requested = config.get("world_sizes", "auto")
    gpus = topology.get("gpu_count", len(topology.get("gpus", [])))
    if gpus == 0:
        return [int(config["cpu"]["ranks"])]
    if requested != "auto":
        return sorted({int(n) for n in requested if int(n) <= gpus})
    sizes = {1 << k for k in range(1, gpus.bit_length()) if (1 << k) <= gpus}
    sizes.add(gpus)
    return sorted(sizes) if gpus > 1 else [1]


def _numa_of(topology: dict[str, Any]) -> dict[int, int | None]:
    return {g["index"]: g.get("numa_node") for g in topology.get("gpus", [])}


def _round_robin(groups: list[list[int]], n: int) -> tuple[int, ...]:
    picked: list[int] = []
    depth = 0
    while len(picked) < n and depth < max((len(g) for g in groups), default=0):
        for group in groups:
            if depth < len(group) and len(picked) < n:
                picked.append(group[depth])
        depth += 1
    return tuple(sorted(picked))


def placements(topology: dict[str, Any], n: int) -> list[Placement]:
    """Distinct GPU placements worth comparing for world size ``n`` on this topology."""
    gpus = [g["index"] for g in topology.get("gpus", [])]
    if not gpus:
        return [Placement("local", ())]
    if n >= len(gpus):
        return [Placement("all", tuple(gpus))]
    islands = sorted(topology.get("islands", [[g] for g in gpus]), key=lambda isl: (-len(isl), isl[0]))
    result: list[Placement] = []
    if len(islands[0]) >= n:
        result.append(Placement("one_island", tuple(islands[0][:n])))
    if len(islands) > 1:
        spread = _round_robin(islands, n)
        if all(p.devices != spread for p in result):
            result.append(Placement("cross_island", spread))
    numa = _numa_of(topology)
    nodes = sorted({v for v in numa.values() if v is not None})
    if len(nodes) > 1:
        by_node = [[g for g in gpus if numa[g] == node] for node in nodes]
        spread = _round_robin(by_node, n)
        if all(p.devices != spread for p in result):
            result.append(Placement("cross_numa", spread))
    if not result:
        result.append(Placement("packed", tuple(gpus[:n])))
    return result


def transports(topology: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """Transports to compare: ``pcie`` only where NVLink exists to be switched off."""
    wanted = config["collectives"].get("transports", ["default"])
    has_nvlink = any(link.get("nvlinks", 0) > 0 for link in topology.get("links", []))
    return [t for t in wanted if t == "default" or (t == "pcie" and has_nvlink)]


def device_profile(topology: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The config section that sizes jobs for this machine: ``gpu`` with GPUs, else ``cpu``."""
    return config["gpu"] if topology.get("gpu_count", 0) > 0 else config["cpu"]


def _job_env(transport: str) -> dict[str, str]:
    return dict(PCIE_TRANSPORT_ENV) if transport == "pcie" else {}


def make_plan(topology: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The ``plan.json`` document: every collective and training job with its GPUs and environment."""
    profile = device_profile(topology, config)
    on_gpu = topology.get("gpu_count", 0) > 0
    sizes = world_sizes(topology, config)
    collectives, training = [], []
    for n in sizes:
        for place in placements(topology, n):
            if n >= 2:
                for transport in transports(topology, config):
                    for op in config["collectives"]["ops"]:
                        collectives.append({
                            "job_id": f"{op}-ws{n}-{place.name}-{transport}",
                            "op": op, "world_size": n, "placement": place.name, "transport": transport,
                            "devices": list(place.devices), "env": _job_env(transport),
                        })
    train_sizes = [max(sizes)] if config["training"].get("world_sizes", "max") == "max" else [
        n for n in sizes if n in set(config["training"]["world_sizes"])]
    model = profile["model"]
    model_name = model if isinstance(model, str) else model.get("name", "custom")
    for n in train_sizes:
        place = placements(topology, n)[0]
        for strategy in config["training"]["strategies"]:
            training.append({
                "job_id": f"{strategy}-{model_name}-ws{n}-{place.name}",
                "strategy": strategy, "model": model_name, "world_size": n, "placement": place.name,
                "devices": list(place.devices), "env": {},
            })
    return {
        "schema": "shardscope.plan/1",
        "device": "gpu" if on_gpu else "cpu",
        "fabric": topology.get("fabric"),
        "world_sizes": sizes,
        "profile": profile,
        "collectives": collectives,
        "training": training,
    }
