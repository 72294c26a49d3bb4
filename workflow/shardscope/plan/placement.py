"""Where a job's ranks sit: GPU sets for one world size, chosen and named from the topology.

The vocabulary (also in :mod:`shardscope.plan.planner`) names each set by the one thing
that differs between them, so a figure can say "pin a small job to one NVL group":

With NVLink (any GPU pair has NVLinks or XGMI links):
  ``one_island``   every rank inside one NVLink island
  ``cross_island`` ranks in two or more islands, on as few NUMA nodes as possible
Without NVLink (every GPU is its own island, so islands say nothing):
  ``same_switch``  every pair under one PCIe switch tree (``PIX``/``PXB``)
  ``cross_switch`` some pair through a PCIe host bridge (``PHB``/``NODE``), all on one NUMA node
Either way:
  ``cross_numa``   ranks spread over as many NUMA nodes as possible (GPU NUMA ids; where a
                   PCIe-only matrix gives none, the CPU sockets that ``SYS`` paths separate)
  ``all``          every GPU (the world size is the GPU count)
  ``one_gpu``      one GPU of several (world size 1)
  ``packed``       the first GPUs, when the topology offers nothing to choose by
  ``local``        CPU processes (no GPU)

Each name is planned only when some GPU set satisfies it (an 8-GPU machine of NVLink pairs
has no ``one_island`` at world size 4), with the tightest such set: most NVLink pairs,
fewest NUMA nodes, nearest PCIe paths, then lowest indices. A set already planned under an
earlier name is not repeated. Sets are found by trying every combination, or, above
:data:`MAX_COMBINATIONS`, among greedy and round-robin candidates.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from shardscope.topology.model import PCIE_PATH_CODES, Link, sys_socket_groups

#: PCIe path codes from near to far; their rank is the distance of a pair without NVLink.
PATH_RANK = PCIE_PATH_CODES
NVLINK_DISTANCE = 0
UNKNOWN_DISTANCE = len(PATH_RANK) + 1
SWITCH_DISTANCE = 1 + PATH_RANK.index("PXB")
HOST_BRIDGE_DISTANCES = (1 + PATH_RANK.index("PHB"), 1 + PATH_RANK.index("NODE"))
#: Above this many GPU sets for one world size, candidates are built instead of enumerated.
MAX_COMBINATIONS = 20_000

NVLINK_PLACEMENTS = ("one_island", "cross_island", "cross_numa")
PCIE_PLACEMENTS = ("same_switch", "cross_switch", "cross_numa")


@dataclass(frozen=True)
class Placement:
    """A named choice of GPUs for a world size."""

    name: str
    devices: tuple[int, ...]

    @property
    def cuda_visible_devices(self) -> str:
        """The ``CUDA_VISIBLE_DEVICES`` value that shows a job exactly these GPUs (empty on CPU)."""
        return ",".join(str(d) for d in self.devices)


@dataclass(frozen=True)
class Shape:
    """What a GPU set spans: the numbers the placement rules compare."""

    devices: tuple[int, ...]
    islands: int
    numa_nodes: int  # distinct NUMA groups; 0 when the topology does not tell
    most_per_numa: int
    non_nvlink_pairs: int
    worst: int  # largest pair distance (0 = NVLink)
    total: int  # sum of pair distances
    nvlinks: int  # NVLinks over all pairs
    slowest_link: str | None  # the code of the farthest pair


class View:
    """The parts of ``topology.json`` placements are chosen from, with per-pair values precomputed."""

    def __init__(self, topology: dict[str, Any]) -> None:
        self.gpus = sorted(g["index"] for g in topology.get("gpus", []))
        self.island = {g: i for i, isl in enumerate(topology.get("islands", [])) for g in isl}
        for g in self.gpus:
            self.island.setdefault(g, -1 - g)  # a GPU no island lists is an island of its own
        links = {(link["a"], link["b"]): link for link in topology.get("links", [])}
        self.has_nvlink = any(link.get("nvlinks", 0) > 0 for link in links.values())
        self.numa = numa_groups(topology, self.gpus)
        #: (a, b) with a < b -> (distance, NVLinks, code) for every GPU pair.
        self.pairs: dict[tuple[int, int], tuple[int, int, str | None]] = {
            (a, b): _pair(links.get((a, b))) for a, b in itertools.combinations(self.gpus, 2)
        }
        self._matrices: tuple[Any, Any] | None = None

    def matrices(self) -> tuple[Any, Any]:
        """(distance, NVLinks) of every GPU pair as two square numpy arrays, rows and columns in ``gpus`` order."""
        if self._matrices is None:
            import numpy as np

            count = len(self.gpus)
            position = {g: i for i, g in enumerate(self.gpus)}
            dist = np.zeros((count, count), dtype=np.int64)
            nvl = np.zeros((count, count), dtype=np.int64)
            if self.pairs:
                rows = np.array([position[a] for a, _ in self.pairs], dtype=np.int64)
                cols = np.array([position[b] for _, b in self.pairs], dtype=np.int64)
                values = np.array([v[:2] for v in self.pairs.values()], dtype=np.int64)
                dist[rows, cols] = dist[cols, rows] = values[:, 0]
                nvl[rows, cols] = nvl[cols, rows] = values[:, 1]
            self._matrices = (dist, nvl)
        return self._matrices

    def distance(self, a: int, b: int) -> int:
        """0 for NVLink, 1…5 for PIX…SYS, 6 when unknown."""
        return self.pairs[(min(a, b), max(a, b))][0]

    def nvlinks(self, a: int, b: int) -> int:
        """NVLinks between two GPUs (0 for PCIe paths)."""
        return self.pairs[(min(a, b), max(a, b))][1]

    def shape(self, devices: tuple[int, ...]) -> Shape:
        """The :class:`Shape` of a GPU set (``devices`` sorted)."""
        values = [self.pairs[pair] for pair in itertools.combinations(devices, 2)]
        numa = [self.numa[g] for g in devices if g in self.numa]
        counts = [numa.count(n) for n in set(numa)]
        slowest = max(values, key=lambda v: (v[0], -v[1]), default=(0, 0, None))
        return Shape(
            devices=devices,
            islands=len({self.island[g] for g in devices}),
            numa_nodes=len(counts),
            most_per_numa=max(counts, default=0),
            non_nvlink_pairs=sum(1 for v in values if v[0] != NVLINK_DISTANCE),
            worst=slowest[0],
            total=sum(v[0] for v in values),
            nvlinks=sum(v[1] for v in values),
            slowest_link=slowest[2],
        )


def _pair(link: dict[str, Any] | None) -> tuple[int, int, str | None]:
    """(distance, NVLinks, code) of one link; unknown distance when the topology has no link."""
    if link is None:
        return UNKNOWN_DISTANCE, 0, None
    nvlinks = int(link.get("nvlinks", 0))
    code = link["code"]
    if nvlinks > 0:
        return NVLINK_DISTANCE, nvlinks, code
    return (1 + PATH_RANK.index(code) if code in PATH_RANK else UNKNOWN_DISTANCE), 0, code


def numa_groups(topology: dict[str, Any], gpus: list[int]) -> dict[int, int]:
    """GPU -> NUMA group: the GPUs' NUMA ids when all are known, else sockets that SYS paths separate.

    See :func:`shardscope.topology.model.sys_socket_groups`; empty when neither source tells.
    """
    ids = {g["index"]: g.get("numa_node") for g in topology.get("gpus", [])}
    if gpus and all(ids.get(g) is not None for g in gpus):
        return {g: ids[g] for g in gpus}
    links = [Link(**link) for link in topology.get("links", [])]
    return {g: i for i, group in enumerate(sys_socket_groups(gpus, links)) for g in group}


Rule = tuple[Callable[[Shape], bool], Callable[[Shape], tuple[Any, ...]]]

#: For each placement name: which sets qualify, and the key that ranks them (lowest first).
RULES: dict[str, Rule] = {
    "one_island": (
        lambda s: s.islands == 1,
        lambda s: (s.non_nvlink_pairs, s.numa_nodes, s.worst, -s.nvlinks, s.total, s.devices),
    ),
    "cross_island": (
        lambda s: s.islands >= 2,
        lambda s: (s.numa_nodes, s.islands, s.non_nvlink_pairs, s.worst, s.total, -s.nvlinks, s.devices),
    ),
    "same_switch": (
        lambda s: s.worst <= SWITCH_DISTANCE,
        lambda s: (s.worst, s.total, s.devices),
    ),
    "cross_switch": (
        lambda s: s.worst in HOST_BRIDGE_DISTANCES and s.numa_nodes <= 1,
        lambda s: (s.worst, s.total, s.devices),
    ),
    "cross_numa": (
        lambda s: s.numa_nodes >= 2,
        lambda s: (-s.numa_nodes, s.most_per_numa, s.non_nvlink_pairs, s.total, -s.nvlinks, s.devices),
    ),
}


def placements(topology: dict[str, Any], n: int) -> list[Placement]:
    """Distinct GPU placements worth comparing for world size ``n``, tightest first."""
    view = _view(topology)
    gpus = view.gpus
    if not gpus:
        return [Placement("local", ())]
    if n >= len(gpus):
        return [Placement("all", tuple(gpus))]
    if n == 1:
        return [Placement("one_gpu", (gpus[0],))]
    shapes = [view.shape(devices) for devices in candidate_sets(view, n)]
    result: list[Placement] = []
    for name in NVLINK_PLACEMENTS if view.has_nvlink else PCIE_PLACEMENTS:
        qualifies, key = RULES[name]
        best = min((s for s in shapes if qualifies(s)), key=key, default=None)
        if best is not None and all(p.devices != best.devices for p in result):
            result.append(Placement(name, best.devices))
    return result or [Placement("packed", tuple(gpus[:n]))]


def describe(topology: dict[str, Any], placement: Placement) -> dict[str, Any]:
    """What a placement spans, for ``plan.json``: islands, NUMA nodes and its slowest link's code."""
    if not placement.devices:
        return {"islands": 0, "numa_nodes": 0, "slowest_link": None}
    shape = _view(topology).shape(placement.devices)
    return {"islands": shape.islands, "numa_nodes": shape.numa_nodes, "slowest_link": shape.slowest_link}


def candidate_sets(view: View, n: int) -> Iterable[tuple[int, ...]]:
    """Every n-GPU set, or (when there are too many) greedy and round-robin candidates."""
    if math.comb(len(view.gpus), n) <= MAX_COMBINATIONS:
        return itertools.combinations(view.gpus, n)
    found = _grown_sets(view, n)
    groupings = [view.island, view.numa] if view.numa else [view.island]
    for grouping in groupings:
        groups = _groups(view.gpus, grouping)
        for shift in range(len(groups)):
            found.add(_round_robin(groups[shift:] + groups[:shift], n))
    found.add(tuple(view.gpus[:n]))
    return sorted(found)


_CACHED_VIEW: list[tuple[dict[str, Any], View]] = []


def _view(topology: dict[str, Any]) -> View:
    """The :class:`View` of ``topology``, built once per topology object (a plan asks for it per world size and placement)."""
    if not _CACHED_VIEW or _CACHED_VIEW[0][0] is not topology:
        _CACHED_VIEW[:] = [(topology, View(topology))]
    return _CACHED_VIEW[0][1]


def _grow(view: View, seed: int, n: int) -> tuple[int, ...]:
    """A tight set from ``seed``: add the GPU nearest to the set (most NVLinks on ties) until n.

    The reference for :func:`_grown_sets`, which grows every seed at once (a test compares them).
    """
    chosen = [seed]
    while len(chosen) < n:
        rest = [g for g in view.gpus if g not in chosen]
        chosen.append(min(rest, key=lambda g: (
            sum(view.distance(g, c) for c in chosen),
            -sum(view.nvlinks(g, c) for c in chosen),
            g,
        )))
    return tuple(sorted(chosen))


def _grown_sets(view: View, n: int) -> set[tuple[int, ...]]:
    """``{_grow(view, seed, n) for seed in view.gpus}``, grown for all seeds at once with numpy.

    Each row holds one seed's set and, per GPU, its summed distance and NVLinks to the set, updated
    by the added GPU's row (O(G) per step, not O(G * n)). The next GPU depends only on the set, so
    seeds whose sets have become equal are merged; on machines built of equal groups most are, and
    the cost falls from O(G^2 n^2) Python steps to about O(G^2 log n) array work.
    """
    import numpy as np

    dist, nvl = view.matrices()
    count = len(view.gpus)
    chosen = np.eye(count, dtype=bool)
    sum_dist, sum_nvl = dist.copy(), nvl.copy()
    weight = n * int(nvl.max(initial=0)) + 1  # -sum_nvl never outweighs one unit of distance
    order = np.arange(count, dtype=np.int64)
    for _ in range(n - 1):
        key = (sum_dist * weight - sum_nvl) * count + order
        key[chosen] = np.iinfo(np.int64).max
        pick = key.argmin(axis=1)
        chosen[np.arange(len(pick)), pick] = True
        sum_dist += dist[pick]
        sum_nvl += nvl[pick]
        packed = np.packbits(chosen, axis=1)
        _, first = np.unique(packed.view(np.dtype((np.void, packed.shape[1]))).ravel(), return_index=True)
        if len(first) < len(chosen):
            first.sort()
            chosen, sum_dist, sum_nvl = chosen[first], sum_dist[first], sum_nvl[first]
    gpus = np.array(view.gpus)
    return {tuple(int(g) for g in gpus[row]) for row in chosen}


def _groups(gpus: list[int], grouping: dict[int, int]) -> list[list[int]]:
    """GPUs grouped by a GPU -> group mapping, groups in order of their first GPU."""
    groups: dict[int, list[int]] = {}
    for g in gpus:
        groups.setdefault(grouping.get(g, -1 - g), []).append(g)
    return list(groups.values())


def _round_robin(groups: list[list[int]], n: int) -> tuple[int, ...]:
    """One GPU from each group in turn until n are picked."""
    picked: list[int] = []
    for depth in range(max(len(g) for g in groups)):
        for group in groups:
            if depth < len(group) and len(picked) < n:
                picked.append(group[depth])
    return tuple(sorted(picked))
