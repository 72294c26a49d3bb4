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


#: Largest GPU set :meth:`View.shape` scores pair by pair in Python; larger ones go through the pair matrices.
SMALL_SET = 16


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
        self._position = {g: i for i, g in enumerate(self.gpus)}
        self._narrow: tuple[Any, Any] | None = None

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

    def _narrow_matrices(self) -> tuple[Any, Any]:
        """:meth:`matrices` in the narrowest integer types that hold them (distances 0-6, NVLink counts), so that
        the sub-matrix of a large set is cheap to gather."""
        if self._narrow is None:
            import numpy as np

            dist, nvl = self.matrices()
            self._narrow = (dist.astype(np.int8), nvl.astype(np.int16 if nvl.max(initial=0) < 2**15 else np.int64))
        return self._narrow

    def distance(self, a: int, b: int) -> int:
        """0 for NVLink, 1…5 for PIX…SYS, 6 when unknown."""
        return self.pairs[(min(a, b), max(a, b))][0]

    def nvlinks(self, a: int, b: int) -> int:
        """NVLinks between two GPUs (0 for PCIe paths)."""
        return self.pairs[(min(a, b), max(a, b))][1]

    def shape(self, devices: tuple[int, ...]) -> Shape:
        """The :class:`Shape` of a GPU set (``devices`` sorted), from the pair matrices: O(n^2) array work, not
        Python steps, so a plan of a 1,024-GPU board scores its thousands of candidate sets in well under a second.

        The slowest link is the farthest pair's, fewest NVLinks on ties, the first such pair in
        ``itertools.combinations`` order.
        """
        import numpy as np

        numa = [self.numa[g] for g in devices if g in self.numa]
        counts = [numa.count(n) for n in set(numa)]
        worst, total, nvlinks, non_nvlink, slowest = 0, 0, 0, 0, None
        if 1 < len(devices) <= SMALL_SET:  # a few pairs: Python is faster than building the arrays
            values = [self.pairs[pair] for pair in itertools.combinations(devices, 2)]
            worst, _, slowest = max(values, key=lambda v: (v[0], -v[1]))
            total, nvlinks = sum(v[0] for v in values), sum(v[1] for v in values)
            non_nvlink = sum(1 for v in values if v[0] != NVLINK_DISTANCE)
        elif len(devices) > 1:
            dist, nvl = self._narrow_matrices()
            at = np.array([self._position[g] for g in devices], dtype=np.int64)
            d, v = dist[np.ix_(at, at)], nvl[np.ix_(at, at)]  # symmetric, zero on the diagonal: each pair twice
            worst = int(d.max())
            farthest = np.triu(d == worst, 1)  # row-major upper triangle: the order of itertools.combinations
            first = int(np.flatnonzero(farthest & (v == v[farthest].min()))[0])
            row, column = divmod(first, len(devices))
            slowest = self.pairs[(devices[row], devices[column])][2]
            total, nvlinks = int(d.sum(dtype=np.int64)) // 2, int(v.sum(dtype=np.int64)) // 2
            non_nvlink = int(np.count_nonzero(d != NVLINK_DISTANCE)) // 2
        return Shape(
            devices=devices,
            islands=len({self.island[g] for g in devices}),
            numa_nodes=len(counts),
            most_per_numa=max(counts, default=0),
            non_nvlink_pairs=non_nvlink,
            worst=worst,
            total=total,
            nvlinks=nvlinks,
            slowest_link=slowest,
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
        depth = max(len(g) for g in groups)
        for shift in range(len(groups)):
            found.add(_round_robin(groups[shift:] + groups[:shift], n, depth))
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
    the cost falls from O(G^2 n^2) Python steps to about O(G^2 log n) array work. The growth does not
    depend on ``n`` either, so a view keeps it: asked for n after m < n, it goes on from m's sets.
    """
    import numpy as np

    state = view.__dict__.get("_growth")
    if state is None or state[0] > n:
        dist, nvl = view.matrices()
        state = (1, np.eye(len(view.gpus), dtype=bool), dist.copy(), nvl.copy())
    size, chosen, sum_dist, sum_nvl = state
    chosen, sum_dist, sum_nvl = _grow_all(view, chosen, sum_dist, sum_nvl, n - size)
    view.__dict__["_growth"] = (n, chosen, sum_dist, sum_nvl)
    gpus = np.array(view.gpus)
    return {tuple(int(g) for g in gpus[row]) for row in chosen}


def _grow_all(view: View, chosen: Any, sum_dist: Any, sum_nvl: Any, steps: int) -> tuple[Any, Any, Any]:
    """``steps`` more GPUs added to every set of ``chosen`` (rows), equal sets merged (see :func:`_grown_sets`);
    new arrays, the given ones untouched."""
    import numpy as np

    dist, nvl = view.matrices()
    count = len(view.gpus)
    chosen, sum_dist, sum_nvl = chosen.copy(), sum_dist.copy(), sum_nvl.copy()
    # -sum_nvl never outweighs one unit of distance: the weight bounds the NVLinks of any set of the board (the same
    # for every n, so that one growth serves every n)
    weight = count * int(nvl.max(initial=0)) + 1
    order = np.arange(count, dtype=np.int64)
    for _ in range(steps):
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
    return chosen, sum_dist, sum_nvl


def _groups(gpus: list[int], grouping: dict[int, int]) -> list[list[int]]:
    """GPUs grouped by a GPU -> group mapping, groups in order of their first GPU."""
    groups: dict[int, list[int]] = {}
    for g in gpus:
        groups.setdefault(grouping.get(g, -1 - g), []).append(g)
    return list(groups.values())


def _round_robin(groups: list[list[int]], n: int, depth_limit: int | None = None) -> tuple[int, ...]:
    """One GPU from each group in turn until n are picked (``depth_limit``: the largest group's size, if known)."""
    picked: list[int] = []
    for depth in range(depth_limit if depth_limit is not None else max(len(g) for g in groups)):
        for group in groups:
            if len(picked) == n:
                return tuple(sorted(picked))
            if depth < len(group):
                picked.append(group[depth])
    return tuple(sorted(picked))
