"""Which GPUs a job of N should use, and what pinning it inside one NVL group is worth.

The best placement maximises the ring bus bandwidth (the weakest cut, :meth:`Machine.ring_gbps`),
then the NVSwitch bandwidth (for NVLS), then prefers the lowest GPU indices. The comparison the
advisor reports is the best placement *inside* one NVL group (:func:`~shardscope.costmodel.machine.nvl_groups`)
against the best one that *crosses* groups; either may not exist.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from shardscope.costmodel.machine import Machine, nvl_groups, socket_groups

#: Most subsets enumerated; past it, candidates are built from NVL groups and sockets.
MAX_SUBSETS = 3000


@dataclass(frozen=True)
class Placement:
    """A set of GPUs and the ring bus bandwidth between them."""

    members: tuple[int, ...]
    ring_gbps: float
    link: str
    """``nvlink`` or ``pcie``: what the weakest cut between the members is made of."""

    def __post_init__(self) -> None:
        if not self.members:
            raise ValueError("a placement needs at least one GPU")

    def label(self) -> str:
        """``gpus 0,1,2,3`` — how reports name it."""
        return "gpus " + ",".join(str(g) for g in self.members)


def _score(machine: Machine, members: tuple[int, ...], use_nvlink: bool) -> tuple[float, float, tuple[int, ...]]:
    ring, _ = machine.ring_gbps(members, use_nvlink, p2p=use_nvlink)
    return (ring, machine.switch_bandwidth(members) if use_nvlink else 0.0, tuple(-g for g in members))


def _candidates(machine: Machine, n: int) -> list[tuple[int, ...]]:
    gpus = list(machine.gpus)
    if math.comb(len(gpus), n) <= MAX_SUBSETS:
        return list(itertools.combinations(gpus, n))
    seeds: list[list[int]] = _one_of_each_kind(machine, nvl_groups(machine)) + socket_groups(machine) + [gpus]
    out = set()
    for seed in seeds:
        in_seed = set(seed)
        order = seed + [g for g in gpus if g not in in_seed]
        out.add(tuple(sorted(order[:n])))
    return sorted(out)


def _kind(machine: Machine, group: list[int]) -> tuple[object, ...]:
    """What a seed group is made of: its size, its NUMA nodes and the links inside it (codes and NVLink counts)."""
    inside = sorted((machine.code(a, b), machine.nv(a, b)) for a, b in itertools.combinations(group, 2))
    return len(group), tuple(sorted({machine.numa.get(g, -1) for g in group})), tuple(inside)


def _one_of_each_kind(machine: Machine, groups: list[list[int]]) -> list[list[int]]:
    """The lowest-indexed group of each kind (:func:`_kind`): on a large board of alike NVLink pairs or quads,
    every group of one kind seeds an equivalent candidate, the lowest-indexed one the best of them (its other
    members follow it in index order, so it splits no further group), and 512 alike pairs need not be scored
    512 times."""
    seen: dict[tuple[object, ...], list[int]] = {}
    for group in groups:
        seen.setdefault(_kind(machine, group), group)
    return list(seen.values())


def _make(machine: Machine, members: tuple[int, ...], use_nvlink: bool) -> Placement:
    ring, link = machine.ring_gbps(members, use_nvlink, p2p=use_nvlink)
    return Placement(tuple(members), ring, link)


def best_placement(machine: Machine, n: int, use_nvlink: bool = True) -> Placement:
    """The best ``n`` GPUs of one node for data-parallel training (see the module docstring)."""
    if not 1 <= n <= machine.gpu_count:
        raise ValueError(f"cannot place {n} GPUs on a node with {machine.gpu_count}")
    best = max(_candidates(machine, n), key=lambda m: _score(machine, m, use_nvlink))
    return _make(machine, best, use_nvlink)


@dataclass(frozen=True)
class GroupComparison:
    """Best placement inside one NVL group against the best one across groups, for one job size."""

    gpus: int
    inside: Placement | None
    across: Placement | None
    largest_group: int

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError(f"gpus must be at least 1, got {self.gpus}")


def compare_groups(machine: Machine, n: int) -> GroupComparison:
    """The best ``n``-GPU placement inside an NVL group and the best crossing groups (None where impossible)."""
    groups = nvl_groups(machine)
    largest = max((len(g) for g in groups), default=1)
    inside_sets = [c for g in groups if len(g) >= n for c in itertools.islice(itertools.combinations(g, n), MAX_SUBSETS)]
    inside = max(inside_sets, key=lambda m: _score(machine, m, True)) if n >= 2 and inside_sets else None
    across_sets = [m for m in _candidates(machine, n) if not any(set(m) <= set(g) for g in groups)] if n >= 2 else []
    across = max(across_sets, key=lambda m: _score(machine, m, True)) if across_sets else None
    return GroupComparison(n, _make(machine, inside, True) if inside else None,
                           _make(machine, across, True) if across else None, largest)
