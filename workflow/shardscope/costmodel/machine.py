"""A topology.json turned into capacities: how many GB/s can cross any cut of a set of GPUs.

A ring collective (NCCL's ring all-reduce, all-gather, reduce-scatter, its pipelined broadcast
and reduce) sends every byte across every cut of the ring once in each direction, so its bus
bandwidth is bounded by the weakest cut of the GPUs it spans (and NCCL's ring search reaches
that bound on the machines it was built for). The capacity of a cut is

- NVLink: the sum of the direct NVLinks that cross it, or on an NVSwitch the smaller side's
  total NVLink bandwidth to the switch (each GPU's links all go to the switch);
- otherwise PCIe: each GPU's own PCIe link (its uplink on one side, downlink on the other),
  5/6 of it when the traffic goes through an Intel root complex (``INTEL_P2P_OVERHEAD``), and
  the CPU sockets' link when every path across the cut is ``SYS``.

NCCL does not add PCIe to NVLink inside one collective, so a cut with NVLinks is counted at its
NVLink capacity only. Multi-node jobs add a network cut: the NICs one node's GPUs use (at most
one per GPU: NCCL puts each ring channel on the NIC nearest its GPU) × line rate × the NIC
class's efficiency (:data:`~shardscope.costmodel.hardware.NIC_EFFICIENCY`). The NIC count, rate
and class come from the topology's ``nics`` (those next to a GPU), its ``network`` block
(``{"nics", "gbps", "kind"}``, written by presets) or the ``--nics``/``--nic-gbps`` overrides.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shardscope.costmodel.hardware import (
    INTEL_P2P_FACTOR,
    NIC_EFFICIENCY,
    GpuSpec,
    cpu_inter_socket,
    infer_spec,
    pcie_effective_gbps,
    spec_for_name,
)
from shardscope.errors import UserError
from shardscope.topology.model import Link, classify_fabric, max_nvlinks

_THROUGH_CPU = ("PHB", "NODE", "SYS", "SOC")
#: Path codes of two GPUs behind one PCIe switch (no host bridge between them).
_SAME_SWITCH = ("PIX", "PXB")
#: Host-staged traffic (P2P off): the bytes per second one root port moves up and down together, in
#: NCCL's effective links of that port (:func:`~shardscope.costmodel.hardware.pcie_effective_gbps`).
#: The host does not serve a port's two directions at once at full rate but from one pool as wide as
#: the link's raw data rate after 128b/130b encoding (x16 Gen3 15.75 GB/s against NCCL's 12: the ratio
#: below). Source: NVIDIA/nccl#384 (2 GPUs, PCIe 3.0 x16, SHM, one channel: all_reduce 3.9 GB/s, i.e. four
#: flows of 3.9 = 15.6 GB/s through the port, where one-way broadcast reaches 10.3; maintainer: "Some
#: components (in particular some CPUs) do not handle bidirectional traffic well"). Not fitted to
#: tests/data/published/ (nccl#384 is not one of its records).
HOST_STAGED_POOL_LINKS = (8.0 * 16 * 128 / 130 / 8) / 12.0
#: Largest set whose cuts are all enumerated; larger sets use single-GPU, island and socket cuts.
EXACT_CUT_LIMIT = 12


@dataclass(frozen=True)
class Machine:
    """One node's GPUs and the capacities between them (see the module docstring)."""

    gpus: tuple[int, ...]
    spec: GpuSpec
    fabric: str
    switch_gbps: Mapping[int, float]
    """Per GPU, effective NVLink bandwidth to the switch (NVSwitch fabrics only)."""
    nvlink_gbps: Mapping[tuple[int, int], float]
    """Per pair ``a < b`` with direct NVLinks (or XGMI), their effective bandwidth."""
    path_code: Mapping[tuple[int, int], str]
    """Per pair ``a < b``, the PCIe path code of the matrix (``PIX``, ``NODE``, ``SYS``…)."""
    pcie_gbps: Mapping[int, float]
    """Per GPU, the effective bandwidth of its own PCIe link."""
    inter_socket_gbps: float
    intel_cpu: bool
    rail_nics: int
    """NICs attached to GPUs (``PIX``/``PXB``), the rails a multi-node job can use."""
    nic_gbps: float
    """Line rate of one NIC, Gb/s."""
    memory_bytes: int | None
    numa: Mapping[int, int | None] = field(default_factory=dict)
    """Per GPU, its NUMA node when known: the PCIe path of NVLinked pairs, which the matrix hides."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    nic_kind: str = "ib"
    """``ib``, ``roce``, ``efa`` or ``tcp`` (Ethernet through NCCL's sockets): the share of the line rate reached
    (``NIC_EFFICIENCY``)."""

    def __post_init__(self) -> None:
        if self.fabric != "cpu" and not self.gpus:
            raise ValueError("a GPU machine needs at least one GPU")
        if self.inter_socket_gbps <= 0 or self.nic_gbps <= 0:
            raise ValueError("inter-socket and NIC bandwidths must be positive")
        if self.nic_kind not in NIC_EFFICIENCY:
            raise ValueError(f"unknown NIC kind {self.nic_kind!r}; expected one of {', '.join(NIC_EFFICIENCY)}")

    @property
    def nic_efficiency(self) -> float:
        """Share of the NIC line rate a collective reaches on this machine's NIC class."""
        return NIC_EFFICIENCY[self.nic_kind]

    @property
    def gpu_count(self) -> int:
        """GPUs in one node."""
        return len(self.gpus)

    def nv(self, a: int, b: int) -> float:
        """Effective direct NVLink bandwidth between two GPUs (0 when none)."""
        return self.nvlink_gbps.get((min(a, b), max(a, b)), 0.0)

    def code(self, a: int, b: int) -> str:
        """The PCIe path code between two GPUs.

        Where the matrix shows NVLink (or nothing) instead, it is inferred from the NUMA nodes:
        ``NODE`` on the same node or when unknown, ``SYS`` across nodes.
        """
        known = self.path_code.get((min(a, b), max(a, b)))
        if known is not None:
            return known
        na, nb = self.numa.get(a), self.numa.get(b)
        return "SYS" if na is not None and nb is not None and na != nb else "NODE"

    def nvlinked(self, a: int, b: int) -> bool:
        """Whether two GPUs talk over NVLink (directly, or through the NVSwitch)."""
        return self.fabric == "nvswitch" or self.nv(a, b) > 0

    def cut_gbps(self, side: Iterable[int], other: Iterable[int], use_nvlink: bool = True,
                 ring: _RingIndex | None = None) -> tuple[float, str]:
        """(capacity in GB/s from ``side`` to ``other``, ``"nvlink"`` or ``"pcie"``) — see the module docstring.

        ``ring``: the members of the ring ``side`` and ``other`` split (their order and array positions, built once
        per ring by :meth:`_ring`), so that a cut of a large ring costs no per-cut index of ``other``; the same
        answer, added in the same order."""
        a_side, b_side = list(side), list(other)
        index = _pair_index(self, a_side + b_side) if ring is None else ring.index
        if use_nvlink:
            if self.fabric == "nvswitch":
                switch = self.switch_gbps.__getitem__
                nv = min(sum(map(switch, a_side)), sum(map(switch, b_side)))
            elif index is not None:
                nv = index.nvlink_across(a_side, b_side, None if ring is None else ring.order)
            else:
                nv = sum(self.nv(a, b) for a in a_side for b in b_side)
            if nv > 0:
                return nv, "nvlink"
        if index is not None:
            at = None if ring is None else ring.positions_without(a_side)
            through_cpu = index.codes_all_in(a_side, b_side, _THROUGH_CPU, at)
            all_sys = index.codes_all_in(a_side, b_side, ("SYS", "SOC"), at)
        else:
            codes = [self.code(a, b) for a in a_side for b in b_side]
            through_cpu, all_sys = all(c in _THROUGH_CPU for c in codes), bool(codes) and all(c in ("SYS", "SOC") for c in codes)
        factor = INTEL_P2P_FACTOR if self.intel_cpu and through_cpu else 1.0
        pcie = self.pcie_gbps.__getitem__
        capacity = factor * min(sum(map(pcie, a_side)), sum(map(pcie, b_side)))
        if all_sys:
            capacity = min(capacity, self.inter_socket_gbps)
        return capacity, "pcie"

    def ring_gbps(self, members: Sequence[int], use_nvlink: bool = True, p2p: bool = True) -> tuple[float, str]:
        """(bus bandwidth a ring over ``members`` can reach, the link type of its weakest cut).

        ``p2p=False`` (``NCCL_P2P_DISABLE=1``, or peer access unavailable): GPU pairs talk through host
        memory (NCCL's SHM transport), so each rank's send goes up to the root complex and its receive
        comes back down. The ``k`` members behind one root port (one PCIe switch, joined by
        ``PIX``/``PXB`` paths, or a GPU alone on its port) send ``k`` flows up and receive ``k`` down
        through it, and the host serves both directions of a port from one pool
        (:data:`HOST_STAGED_POOL_LINKS` links wide): at most ``pool · link / (2k)`` each, where P2P
        would stay inside the switch.
        """
        key = (tuple(members), use_nvlink, p2p)
        memo = self.__dict__.setdefault("_ring_memo", {})  # frozen: the same ring always gets the same answer
        if key not in memo:
            memo[key] = self._ring(list(members), use_nvlink, p2p)
        return memo[key]

    def _ring(self, members: list[int], use_nvlink: bool, p2p: bool) -> tuple[float, str]:
        """:meth:`ring_gbps`, computed: the weakest cut over every split of ``members``."""
        if len(members) < 2:
            return float("inf"), "local"
        best: tuple[float, str] = (float("inf"), "nvlink")
        index = _pair_index(self, members) if len(members) > EXACT_CUT_LIMIT else None
        ring = _RingIndex(index, members) if index is not None else None
        for side in self._cuts(members):
            on_side = set(side)
            other = [g for g in members if g not in on_side]
            capacity = self.cut_gbps(side, other, use_nvlink, ring)
            if capacity[0] < best[0]:
                best = capacity
        if not p2p and best[1] == "pcie":
            for group in self._switch_groups(members):
                shared = HOST_STAGED_POOL_LINKS * min(self.pcie_gbps[g] for g in group) / (2 * len(group))
                best = min(best, (shared, "pcie"))
        return best

    def _switch_groups(self, members: Sequence[int]) -> list[list[int]]:
        """Members behind a common PCIe switch: connected components of the ``PIX``/``PXB`` paths among them."""
        index = _pair_index(self, members)
        if index is not None:
            return index.components(list(members), _SAME_SWITCH)
        left, groups = list(members), []
        while left:
            group, frontier = [left.pop(0)], None
            frontier = list(group)
            while frontier:
                g = frontier.pop()
                near = [h for h in left if self.code(g, h) in _SAME_SWITCH]
                for h in near:
                    left.remove(h)
                group += near
                frontier += near
            groups.append(sorted(group))
        return groups

    def _cuts(self, members: list[int]) -> Iterable[tuple[int, ...]]:
        """Sides of the cuts to test: all of them for small sets (the first member fixed on one side)."""
        if len(members) <= EXACT_CUT_LIMIT:
            first, rest = members[0], members[1:]
            for k in range(len(rest)):
                for combo in itertools.combinations(rest, k):
                    yield (first, *combo)
            return
        yield from ((g,) for g in members)
        for group in nvl_groups(self, members) + socket_groups(self, members):
            if 0 < len(group) < len(members):
                yield tuple(group)

    def switch_bandwidth(self, members: Sequence[int]) -> float:
        """The smallest per-GPU NVSwitch bandwidth among ``members`` (0 off an NVSwitch)."""
        if self.fabric != "nvswitch" or not members:
            return 0.0
        return min(self.switch_gbps[g] for g in members)

    def rails_used(self, gpus_per_node: int) -> int:
        """NICs one node's job uses: one per GPU at most (a NIC without a GPU next to it is idle)."""
        return max(1, min(self.rail_nics or 1, gpus_per_node))

    def network_gbps(self, gpus_per_node: int) -> float:
        """Effective bandwidth out of one node for a multi-node ring: rails used × NIC line rate × efficiency."""
        return self.rails_used(gpus_per_node) * self.nic_gbps / 8.0 * self.nic_efficiency

    def nic_per_gpu_gbps(self, gpus_per_node: int) -> float:
        """Effective network bandwidth of one GPU when every GPU talks to other nodes at once (all-to-all)."""
        return self.network_gbps(gpus_per_node) / max(1, gpus_per_node)


def _memoized(name: str, machine: Machine, nodes: list[int],
              compute: Callable[[], list[list[int]]]) -> list[list[int]]:
    """``compute()``, remembered per machine and member list (the machine is frozen: the same members always get the
    same groups); a fresh copy each time, so no caller can change what the next one gets."""
    memo = machine.__dict__.setdefault(f"_{name}_memo", {})
    key = tuple(nodes)
    if key not in memo:
        memo[key] = compute()
    return [list(group) for group in memo[key]]


def nvl_groups(machine: Machine, members: Sequence[int] | None = None) -> list[list[int]]:
    """NVL groups: sets of GPUs every pair of which is NVLinked (maximal cliques of the NVLink graph).

    On an NVSwitch the whole machine is one group; on NVL-pair boxes each bridged pair; on a
    DGX-1 hybrid cube mesh the two fully linked quads (and the cross-quad pairs). A job inside
    one group talks only over NVLink.
    """
    nodes = list(members) if members is not None else list(machine.gpus)
    if machine.fabric == "nvswitch":
        return [sorted(nodes)]
    return _memoized("nvl_groups", machine, nodes, lambda: _cliques(machine, nodes))


def _cliques(machine: Machine, nodes: list[int]) -> list[list[int]]:
    """:func:`nvl_groups`, computed: the maximal cliques of the NVLink graph among ``nodes``."""
    index = _pair_index(machine, nodes)
    if index is not None:
        inside = set(nodes)
        neighbours = {g: {h for h in index.linked.get(g, {}) if h in inside and h != g} for g in nodes}
    else:
        neighbours = {g: {h for h in nodes if h != g and machine.nvlinked(g, h)} for g in nodes}
    cliques: list[list[int]] = []

    def expand(r: set[int], p: set[int], x: set[int]) -> None:
        """Bron-Kerbosch: extend clique r by candidates p, excluding x."""
        if not p and not x:
            if len(r) > 1:
                cliques.append(sorted(r))
            return
        for v in sorted(p):
            expand(r | {v}, p & neighbours[v], x & neighbours[v])
            p = p - {v}
            x = x | {v}

    expand(set(), set(nodes), set())
    return sorted(cliques, key=lambda c: (-len(c), c))


def socket_groups(machine: Machine, members: Sequence[int] | None = None) -> list[list[int]]:
    """GPUs grouped by CPU socket: connected components of the pairs whose path is not ``SYS``."""
    nodes = list(members) if members is not None else list(machine.gpus)
    return _memoized("socket_groups", machine, nodes, lambda: _socket_components(machine, nodes))


def _socket_components(machine: Machine, nodes: list[int]) -> list[list[int]]:
    """:func:`socket_groups`, computed."""
    index = _pair_index(machine, nodes)
    near = index.same_socket(nodes, machine.fabric == "nvswitch") if index is not None else None
    groups: list[list[int]] = []
    seen: set[int] = set()
    for g in nodes:
        if g in seen:
            continue
        stack, group = [g], []
        seen.add(g)
        while stack:
            v = stack.pop()
            group.append(v)
            joined = near(v) if near is not None else (
                h for h in nodes if machine.nvlinked(v, h) or machine.code(v, h) not in ("SYS", "SOC"))
            for h in joined:
                if h not in seen:
                    seen.add(h)
                    stack.append(h)
        groups.append(sorted(group))
    return groups


class _PairIndex:
    """A machine's pairwise values as arrays, so that a cut of n GPUs costs array work, not n² Python calls.

    Built once per :class:`Machine` (cached in its ``__dict__``); plans of hundreds of GPUs ask for
    thousands of cuts of large rings, which per-pair method calls made cubic in the GPU count.
    """

    def __init__(self, machine: Machine) -> None:
        import numpy as np

        self.position = {g: i for i, g in enumerate(machine.gpus)}
        #: GPU -> {NVLinked GPU: effective GB/s}, both directions.
        self.linked: dict[int, dict[int, float]] = {}
        for (a, b), gbps in machine.nvlink_gbps.items():
            if gbps > 0:
                self.linked.setdefault(a, {})[b] = gbps
                self.linked.setdefault(b, {})[a] = gbps
        self.names = sorted({"NODE", "SYS", *machine.path_code.values()})
        ids = {name: i for i, name in enumerate(self.names)}
        numa = np.array([-1 if machine.numa.get(g) is None else machine.numa[g] for g in machine.gpus])
        known = numa >= 0
        across = known[:, None] & known[None, :] & (numa[:, None] != numa[None, :])
        self.codes = np.where(across, ids["SYS"], ids["NODE"]).astype(np.int16)  # Machine.code's inference
        for (a, b), code in machine.path_code.items():
            if a in self.position and b in self.position:
                i, j = self.position[a], self.position[b]
                self.codes[i, j] = self.codes[j, i] = ids[code]
        self._allowed: dict[tuple[str, ...], Any] = {}
        self.nvlinked = np.zeros(self.codes.shape, dtype=bool)
        for a, peers in self.linked.items():
            if a in self.position:
                self.nvlinked[self.position[a], [self.position[b] for b in peers if b in self.position]] = True

    def nvlink_across(self, side: list[int], other: list[int], ring_order: Mapping[int, int] | None = None) -> float:
        """Summed NVLink GB/s between ``side`` and ``other``, added in the order of the pairwise loop it replaces.
        ``ring_order``: the order of the ring that ``side`` and ``other`` split, when the caller has it (``other`` is
        then its members less ``side``, in the same order)."""
        at, gone = ({b: i for i, b in enumerate(other)}, ()) if ring_order is None else (ring_order, set(side))
        total = 0.0
        for a in side:
            for _, gbps in sorted((at[b], gbps) for b, gbps in self.linked.get(a, {}).items()
                                  if b in at and b not in gone):
                total += gbps
        return total

    def allowed(self, codes: tuple[str, ...]) -> Any:
        """The boolean matrix of GPU pairs whose path code is one of ``codes`` (built once per tuple)."""
        import numpy as np

        matrix = self._allowed.get(codes)
        if matrix is None:
            wanted = [i for i, name in enumerate(self.names) if name in codes]
            matrix = self._allowed[codes] = np.isin(self.codes, wanted)
        return matrix

    def components(self, nodes: list[int], codes: tuple[str, ...]) -> list[list[int]]:
        """Connected components of the pairs among ``nodes`` whose path code is one of ``codes``, each sorted, in the
        order of their first member in ``nodes``."""
        import numpy as np

        at = np.array([self.position[g] for g in nodes], dtype=np.int64)
        near = self.allowed(codes)[np.ix_(at, at)]
        left = np.ones(len(nodes), dtype=bool)
        groups = []
        for start in range(len(nodes)):
            if not left[start]:
                continue
            group = np.zeros(len(nodes), dtype=bool)
            group[start], left[start] = True, False
            frontier = group.copy()
            while frontier.any():
                frontier = near[frontier].any(axis=0) & left
                left &= ~frontier
                group |= frontier
            groups.append(sorted(nodes[i] for i in np.flatnonzero(group)))
        return groups

    def codes_all_in(self, side: list[int], other: list[int], allowed: tuple[str, ...],
                     other_positions: Any = None) -> bool:
        """Whether every pair across the cut has a path code in ``allowed`` (False for an empty cut);
        ``other_positions``: ``other``'s rows of the matrices, when the caller has them."""
        if not side or not other:
            return False
        matrix = self.allowed(allowed)
        rows = matrix[[self.position[g] for g in side]]
        columns = [self.position[g] for g in other] if other_positions is None else other_positions
        return bool(rows[:, columns].all())

    def same_socket(self, nodes: list[int], nvswitch: bool) -> Any:
        """A function: the members of ``nodes`` joined to a GPU by NVLink or by a path other than ``SYS``/``SOC``."""
        import numpy as np

        at = np.array([self.position[g] for g in nodes], dtype=np.int64)
        far = self.allowed(("SYS", "SOC"))[np.ix_(at, at)]
        joined = ~far | (True if nvswitch else self.nvlinked[np.ix_(at, at)])
        order = {g: i for i, g in enumerate(nodes)}
        return lambda g: [nodes[j] for j in np.flatnonzero(joined[order[g]])]


class _RingIndex:
    """The members of one ring, for the cuts of it (:meth:`Machine.cut_gbps`): their order and matrix rows, so that
    the other side of a small cut of a large ring is the members less the cut, not a new index per cut."""

    def __init__(self, index: _PairIndex, members: Sequence[int]) -> None:
        import numpy as np

        self.index = index
        self.members = list(members)
        self.order = {g: i for i, g in enumerate(self.members)}
        self.positions = np.array([index.position[g] for g in self.members], dtype=np.int64)

    def positions_without(self, side: Sequence[int]) -> Any:
        """The matrix rows of the members not in ``side``, in their order."""
        import numpy as np

        keep = np.ones(len(self.members), dtype=bool)
        keep[[self.order[g] for g in side]] = False
        return self.positions[keep]


def _pair_index(machine: Machine, members: Iterable[int]) -> _PairIndex | None:
    """The machine's :class:`_PairIndex` (built on first use), or None when a member is not one of its GPUs."""
    index = machine.__dict__.get("_pair_index")
    if index is None:
        index = machine.__dict__.setdefault("_pair_index", _PairIndex(machine))
    return index if index.position.keys() >= set(members) else None


def _nv_count(link: Mapping[str, Any]) -> int:
    value = link.get("nvlinks") or 0
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _classify(gpus: tuple[int, ...], link_docs: list[Mapping[str, Any]], gpu_docs: list[Mapping[str, Any]]) -> str:
    """The fabric class of a document that does not state one, by the topology stage's own rules."""
    links = []
    for link in link_docs:
        try:
            a, b = sorted((int(link["a"]), int(link["b"])))
        except (KeyError, TypeError, ValueError):
            continue
        if a != b:
            links.append(Link(a=a, b=b, code=str(link.get("code") or ""), nvlinks=_nv_count(link)))
    budgets = {int(g["index"]): max_nvlinks(g.get("name")) for g in gpu_docs}
    return classify_fabric(list(gpus), links, budgets)


#: Machines built in this process, by their document and overrides (:func:`build_machine`); a few at most.
_BUILT: dict[tuple[Any, ...], Machine] = {}
_BUILT_MAX = 8


def build_machine(doc: Mapping[str, Any], gpu_name: str | None = None, memory_bytes: int | None = None,
                  nic_gbps: float | None = None, source: str = "topology", nics: int | None = None) -> Machine:
    """A :class:`Machine` from a topology.json document, with optional user overrides.

    ``gpu_name`` replaces what the topology says (or does not say) about the GPU model;
    ``memory_bytes`` the GPU memory; ``nic_gbps`` the NIC line rate; ``nics`` the NICs per node
    a multi-node job can use. Never fails on a well-formed topology: unknown values fall back to
    documented assumptions, noted in ``notes``.

    The same document with the same overrides gives the same (frozen) machine, built once per process: a plan asks
    for it per world size, strategy and panel, and the machine's caches (its pair index, rings and groups) are what
    keep a 1,024-GPU plan near-linear.
    """
    import json

    try:
        key: tuple[Any, ...] | None = (json.dumps(doc, sort_keys=True), gpu_name, memory_bytes, nic_gbps, source, nics)
    except (TypeError, ValueError):  # not a JSON document (a test's own mapping): build it, remember nothing
        key = None
    if key is not None and key in _BUILT:
        return _BUILT[key]
    machine = _build_machine(doc, gpu_name, memory_bytes, nic_gbps, source, nics)
    if key is not None:
        if len(_BUILT) >= _BUILT_MAX:
            _BUILT.pop(next(iter(_BUILT)))
        _BUILT[key] = machine
    return machine


def _build_machine(doc: Mapping[str, Any], gpu_name: str | None, memory_bytes: int | None, nic_gbps: float | None,
                   source: str, nics: int | None) -> Machine:
    """:func:`build_machine`, built."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("gpus", []), list):
        raise UserError(f"{source}: not a topology.json document (expected an object with a 'gpus' list)")
    if nics is not None and (isinstance(nics, bool) or not isinstance(nics, int) or nics < 1):
        raise UserError(f"--nics must be a positive integer (NICs per node), got {nics!r}")
    if nic_gbps is not None and not (isinstance(nic_gbps, (int, float)) and nic_gbps > 0):
        raise UserError(f"--nic-gbps must be a positive line rate in Gb/s, got {nic_gbps!r}")
    notes: list[str] = []
    spec = spec_for_name(gpu_name) if gpu_name else None
    if gpu_name and spec is None:  # not in the table: a PCIe GPU of unknown memory and peak, said so (advise
        # defaults them)
        spec = GpuSpec(family=gpu_name, arch="unknown", pcie_generation=4, memory_bytes=None, reference_name=None,
                       nic_gbps=100.0, note=unknown_gpu_message(gpu_name))
    gpu_docs = [g for g in doc.get("gpus", []) if isinstance(g, Mapping)]
    if spec is None and not gpu_docs:
        spec = GpuSpec(family="CPU processes (gloo)", arch="unknown", pcie_generation=4, memory_bytes=None,
                       reference_name=None, nic_gbps=100.0,
                       note=("no GPUs: collectives run between CPU processes over gloo; their bandwidth and latency "
                             "are placeholders, not measurements — calibrate with measured rows (--calibrate)"))
    spec = spec or infer_spec(dict(doc))
    if spec.note:
        notes.append(spec.note)
    try:
        gpus = tuple(sorted(int(g["index"]) for g in gpu_docs))
    except (KeyError, TypeError, ValueError):
        raise UserError(f"{source}: every GPU needs an integer 'index'") from None
    link_docs = [link for link in doc.get("links", []) if isinstance(link, Mapping)]
    fabric = str(doc.get("fabric") or _classify(gpus, link_docs, gpu_docs))
    nvlink: dict[tuple[int, int], float] = {}
    codes: dict[tuple[int, int], str] = {}
    switch: dict[int, float] = dict.fromkeys(gpus, 0.0)
    for link in link_docs:
        try:
            a, b = sorted((int(link["a"]), int(link["b"])))
        except (KeyError, TypeError, ValueError):
            continue
        count = _nv_count(link)
        if count:
            nvlink[(a, b)] = count * spec.nvlink_gbps
            for end in (a, b):
                if end in switch:
                    switch[end] = max(switch[end], count * spec.nvlink_gbps)
        else:
            codes[(a, b)] = str(link.get("code") or "SYS").upper()
    listed = set(gpus)
    known = {(a, b) for a, b in (*nvlink, *codes) if a != b and a in listed and b in listed}
    missing = math.comb(len(listed), 2) - len(known)  # counted, not listed: a 1,024-GPU board has 523,776 pairs
    if missing and fabric != "nvswitch":
        notes.append(f"{missing} GPU pair(s) have no path in the topology; NODE assumed (SYS across NUMA nodes)")
    numa = {int(g["index"]): g.get("numa_node") if isinstance(g.get("numa_node"), int) else None for g in gpu_docs}
    pcie: dict[int, float] = {}
    for g in gpu_docs:
        gen = g.get("pcie_generation") or spec.pcie_generation
        width = g.get("pcie_width") or 16
        pcie[int(g["index"])] = pcie_effective_gbps(int(gen), int(width))
    if gpu_docs and not any(g.get("pcie_generation") for g in gpu_docs):
        notes.append(f"PCIe generation not in the topology: Gen{spec.pcie_generation} x16 assumed ({pcie_effective_gbps(spec.pcie_generation):g} GB/s)")
    if len(gpus) > 1 and not spec.pcie_peer_access:
        notes.append(f"{spec.family}: no PCIe peer-to-peer (NVIDIA's driver has none on GeForce boards), so NCCL "
                     "stages PCIe traffic through host memory")
    socket_bw, intel, why = cpu_inter_socket(dict(doc.get("cpu") or {}), spec.pcie_generation)
    if "assumed" in why and any(codes.get(p) in ("SYS", "SOC") for p in codes):
        notes.append(f"{why}: {socket_bw:g} GB/s between sockets")
    nic_docs = [n for n in doc.get("nics", []) if isinstance(n, Mapping)]
    rails = sum(1 for n in nic_docs if str(n.get("nearest_code") or "").upper() in ("PIX", "PXB") and n.get("nearest_gpus"))
    network = doc.get("network") if isinstance(doc.get("network"), Mapping) else {}
    if isinstance(network.get("nics"), int) and network["nics"] > 0:
        rails = int(network["nics"])
    rails = nics or rails
    line_rate = nic_gbps or (float(network["gbps"]) if isinstance(network.get("gbps"), (int, float)) and network["gbps"] > 0
                             else spec.nic_gbps)
    kind = str(network.get("kind") or "ib")
    memory = memory_bytes
    if memory is None:
        sizes = [int(g["memory_bytes"]) for g in gpu_docs if isinstance(g.get("memory_bytes"), int) and g["memory_bytes"] > 0]
        memory = min(sizes) if sizes else spec.memory_bytes
        if not sizes and spec.memory_bytes is not None and gpus:
            notes.append(f"GPU memory not in the topology: {spec.memory_bytes / 2**30:g} GiB assumed for {spec.family}")
    return Machine(gpus=gpus, spec=spec, fabric=fabric, switch_gbps=switch, nvlink_gbps=nvlink, path_code=codes,
                   pcie_gbps=pcie, inter_socket_gbps=socket_bw, intel_cpu=intel, rail_nics=rails,
                   nic_gbps=line_rate, memory_bytes=memory, numa=numa, notes=tuple(notes),
                   nic_kind=kind if kind in NIC_EFFICIENCY else "ib")


def unknown_gpu_message(name: str) -> str:
    """One sentence for a GPU name the table does not know: the close matches and the flags to use."""
    import difflib

    from shardscope.costmodel.hardware import known_gpu_names

    close = difflib.get_close_matches(name, known_gpu_names(), n=3, cutoff=0.4)
    hint = f" (close matches: {', '.join(close)})" if close else ""
    return (f"--gpu {name!r} is not a GPU model the cost model knows{hint}: its links are modeled as a PCIe Gen4 "
            "GPU's; --peak-tflops (dense bf16) and --memory-gib give its own peak and memory")
