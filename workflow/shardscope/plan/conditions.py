"""Fabric conditions training runs under, chosen from the topology (or the emulated presets on CPU).

The question a node answers is "which strategy is fastest *on this fabric*", so training is
planned per condition, as collectives are per placement and transport:

================  ============================================================================
``default``       the planned training world sizes, tightest placement, NCCL's own transport
``pcie``          the largest of them with NVLink switched off through NCCL variables
                  (only where NVLink exists)
``one_island``    a job of one island's size inside one NVLink island (only where the node
                  has two or more islands: NVL pairs, quads)
``cross_island``  the same world size over two or more islands
``one_numa``      PCIe-only nodes: a job of one NUMA node's GPU count inside one NUMA node
``cross_numa``    the same world size over NUMA nodes (the CPU interconnect on the path)
================  ============================================================================

Config ``training.strategies`` are trained under ``default``; ``training.conditions`` maps the
other conditions to the strategies trained under them (a condition missing from it is not
planned). A condition this node cannot offer is listed with the sentence why.

On CPU the conditions come from the emulated fabric presets (config ``emulated``), each
(preset, placement) standing for one of them (:data:`EMULATED_CONDITIONS`), training the
strategies of :func:`emulated_strategies`; without emulated fabrics CPU processes share one
host, and only ``default`` is planned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardscope.contracts.groups import gpu_islands
from shardscope.plan.placement import Placement, numa_groups, placements

if TYPE_CHECKING:
    from shardscope.settings import PlannerSettings

#: Every condition name, in the order the plan lists them.
CONDITIONS = ("default", "pcie", "one_island", "cross_island", "one_numa", "cross_numa")
#: Built-in emulated (preset, placement) -> the condition it stands for. ``fast`` stands for the
#: default transport; it trains the strategies of ``pcie``, so that both presets compare the same ones.
EMULATED_CONDITIONS = {("fast", "all"): "default", ("pcie_like", "all"): "pcie",
                       ("nvl_groups", "in_group"): "one_island", ("nvl_groups", "across_groups"): "cross_island"}


@dataclass(frozen=True)
class Condition:
    """One planned condition: the ranks' GPUs, their world size and the transport."""

    name: str
    world_size: int
    placement: Placement
    transport: str = "default"


@dataclass(frozen=True)
class Skipped:
    """A condition this node cannot offer, and the sentence why."""

    name: str
    reason: str


def _has_nvlink(topology: dict[str, Any]) -> bool:
    return any(link.get("nvlinks", 0) > 0 for link in topology.get("links", []))


def gpu_conditions(topology: dict[str, Any], sizes: list[int], train_sizes: list[int],
                   wanted: set[str]) -> list[Condition | Skipped]:
    """The conditions of ``wanted`` (besides ``default``) this GPU node offers, or why not, in :data:`CONDITIONS` order.

    ``sizes`` are the planned world sizes: an island or NUMA condition runs at the largest of them
    that fits one island (NUMA node), so its placements are those the plan lists for collectives."""
    gpus = int(topology.get("gpu_count", len(topology.get("gpus", []))))
    nvlink = _has_nvlink(topology)
    out: list[Condition | Skipped] = []
    if "pcie" in wanted:
        n = max(train_sizes)
        if not nvlink:
            out.append(Skipped("pcie", "no GPU pair of this node has NVLink, so there is nothing to switch off"))
        elif n < 2:
            out.append(Skipped("pcie", "training runs on one GPU here, and one rank sends nothing over any link"))
        else:
            out.append(Condition("pcie", n, placements(topology, n)[0], "pcie"))
    out += _split_conditions(topology, gpus, nvlink, wanted, sizes)
    return out


def _split_conditions(topology: dict[str, Any], gpus: int, nvlink: bool, wanted: set[str],
                      sizes: list[int]) -> list[Condition | Skipped]:
    """``one_island``/``cross_island`` on nodes of NVLink islands, ``one_numa``/``cross_numa`` on PCIe-only nodes."""
    out: list[Condition | Skipped] = []
    islands = [sorted(i) for i in topology.get("islands", []) if i]
    island_size = max((len(i) for i in islands), default=0)
    for inside, across in (("one_island", "cross_island"), ("one_numa", "cross_numa")):
        names = [name for name in (inside, across) if name in wanted]
        if not names:
            continue
        if inside == "one_island":
            if not nvlink:
                why = "no GPU pair of this node has NVLink, so it has no NVLink islands"
            elif len(islands) < 2:
                why = "every GPU is in one NVLink island (NVSwitch or a connected mesh), so no job crosses islands"
            elif island_size < 2:
                why = "every NVLink island holds one GPU"
            else:
                why = ""
            n = island_size
        else:
            groups = sorted(set(numa_groups(topology, sorted(g["index"] for g in topology.get("gpus", []))).values()))
            per_group = _smallest_group(topology)
            if nvlink:
                why = ("planned on PCIe-only nodes, where the CPU interconnect is the slow path; this node's GPUs "
                       "talk over NVLink (see the island and transport conditions)")
            elif len(groups) < 2:
                why = "the topology shows one NUMA node (or none), so no job can cross NUMA nodes"
            elif per_group < 2:
                why = "a NUMA node holds one GPU, so no job of two ranks fits inside one"
            else:
                why = ""
            n = per_group
        fitting = [size for size in sizes if 2 <= size <= n and size < gpus]
        if not why and not fitting:
            why = f"no planned world size ({sizes}) of two or more ranks fits within {n} GPUs"
        if why:
            out += [Skipped(name, why) for name in names]
            continue
        n = max(fitting)
        found = {p.name: p for p in placements(topology, n)}
        inner = found.get(inside) if inside == "one_island" else next(
            (p for p in placements(topology, n) if p.name in ("same_switch", "cross_switch")), None)
        pair = {inside: inner, across: found.get(across)}
        for name in names:
            place = pair[name]
            if place is None or n >= gpus:
                out.append(Skipped(name, f"no set of {n} GPUs of this node is {name.replace('_', ' ')}"))
            else:
                out.append(Condition(name, n, Placement(place.name, place.devices)))
    return out


def _smallest_group(topology: dict[str, Any]) -> int:
    """GPUs on the NUMA node (or socket) that holds the fewest of them."""
    groups = numa_groups(topology, sorted(g["index"] for g in topology.get("gpus", [])))
    counts = [list(groups.values()).count(v) for v in set(groups.values())]
    return min(counts, default=0)


def cpu_skips(wanted: set[str], emulated_problem: str | None) -> list[Skipped]:
    """Why the non-default conditions of ``wanted`` are not planned on CPU processes of one host
    (``emulated_problem``: why the emulated fabrics that stand for them are skipped, when they are)."""
    why = "CPU processes on one host share one fabric, and " + (
        emulated_problem.rstrip(".") if emulated_problem
        else "no emulated (preset, placement) of config emulated stands for this condition "
             "(emulated.enabled must be true, or auto on a machine without GPUs; built-in presets: fast and "
             "pcie_like, nvl_groups' in_group and across_groups)")
    return [Skipped(name, why) for name in CONDITIONS[1:] if name in wanted]


def rank_groups(topology: dict[str, Any], devices: tuple[int, ...], world_size: int) -> list[int]:
    """Each rank's NVLink island (GPUs in ``devices`` order); one group for CPU processes on one host."""
    return gpu_islands(topology.get("islands", []), devices) if devices else [0] * world_size


def emulated_groups(definition: dict[str, Any], placement: str) -> list[int]:
    """Each rank's switch on an emulated preset (its host's one link), in the placement's rank order."""
    switch = {}
    for link in definition["links"]:
        for host, other in ((link["a"], link["b"]), (link["b"], link["a"])):
            if host.startswith("h"):
                switch[host] = other
    names = sorted(set(switch.values()))
    return [names.index(switch[h]) for h in definition["placements"][placement]]


def emulated_condition(preset: str, placement: str) -> str | None:
    """The condition an emulated (preset, placement) stands for: the built-in table, else a placement named after one."""
    known = EMULATED_CONDITIONS.get((preset, placement))
    if known:
        return known
    return placement if placement in CONDITIONS[1:] else None


def emulated_strategies(config: PlannerSettings, condition: str, wanted: dict[str, list[str]]) -> list[str]:
    """The strategies trained over an emulated (preset, placement) standing for ``condition``: config
    ``emulated.strategies`` when set (one short list for every preset: the CPU finding needs DDP and one
    sharded strategy), else those ``training.conditions`` gives the condition (``fast``, standing for
    ``default``, trains those of ``pcie``, so that both presets compare the same strategies)."""
    chosen = config.emulated.strategies
    if chosen:
        return list(chosen)
    return list(wanted.get("pcie" if condition == "default" else condition, []))
