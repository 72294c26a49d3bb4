"""Latency-bandwidth (alpha-beta) time of one collective, per algorithm and protocol, as NCCL chooses.

``t = latency(algorithm, protocol, ranks, nodes) + S / algbw(algorithm, protocol)``: the form of
NCCL's own tuning model (src/graph/tuning.cc, ``ncclTopoGetAlgoTime``), and NCCL runs the
(algorithm, protocol) pair with the smallest time, so the prediction does too.

Bandwidths come from the machine's cuts (:mod:`shardscope.costmodel.machine`):

- ``ring`` (every op): bus bandwidth ``B`` = the weakest cut of the GPUs (and the network cut
  across nodes); ``algbw = B / busbw_factor(op, n)``, so the nccl-tests busbw tends to ``B``.
- ``tree`` (all_reduce): NCCL's ``0.92·B`` bus bandwidth and algbw = half of it.
- ``nvls`` (all_reduce on an NVSwitch with NVLink SHARP, Hopper and later, one node): each GPU
  sends its buffer into the switch and receives the reduced one, ``S·(n+1)/n`` bytes per
  direction (NVIDIA/nccl#2140, nccl-tests doc/PERFORMANCE.md "In-Network Reduction"), at NCCL's
  ``nvlsEfficiency`` of the NVLink bandwidth: ``algbw = B_switch·eff·n/(n+1)``.

Across nodes (``nodes > 1``) the network is one more cut (:meth:`Machine.network_gbps`: the NICs
next to the job's GPUs × line rate × the NIC class's efficiency), and:

- ``tree`` (all_reduce): NCCL's double binary tree between nodes (``ncclGetDtree`` in
  src/graph/trees.cc: a binary tree over the nodes and its mirror, or its shift for an odd count,
  each carrying half the data). The node that sends most carries :func:`tree_network_load` × S per
  direction (1 on 2 nodes, 1.5 on 3, 2 from 4 on, against the ring's 2(n-1)/n), so its algbw is
  ``network / load``, capped by the chain inside the node (NCCL's ``0.92·B/2``);
- ``nvls_tree`` (all_reduce, Hopper/Blackwell NVSwitch nodes): NVLink SHARP inside each node and
  the same tree between nodes: the smaller of the NVLS algbw and ``network / load``;
- NCCL *chooses* with its own tuning model, and so does the prediction: on more than one node it rates
  a ring and a tree by their graphs (:func:`network_graph`: one channel per NIC at NCCL's speed step
  within the NIC and PCIe rates; on 2 nodes the tree's intra-node speed raised up to twice that),
  the tree capped per channel at ``perChMaxTreeBws``; the time then comes from the traffic of the
  algorithm it chose. So a 2-node all-reduce runs the tree with 100 Gb/s NICs (p4dn's EFA: measured
  above the NICs, NVIDIA/nccl#527, #812) and the ring with 200 Gb/s ones on A100 (nccl-tests#175),
  and 3 or more nodes run the ring. ``algorithms`` (like ``NCCL_ALGO``) overrides the choice.
  Checked against tests/data/published/ (``benchmarks/validation.py``).

``all_to_all`` is a pairwise exchange (NCCL runs it as send/recv to every peer): each rank sends
S/n to each of the n-1 others, ``(g-1)·S/n`` inside its node over NVLink/PCIe (the weakest cut)
and ``g·(N-1)·S/n`` over the network, where a GPU gets its share of the node's NICs (``all-to-all
cannot aggregate the bandwidth of multiple NICs``, NVIDIA/nccl-tests#267); both run at once, so
``time = max`` of the two. nccl-tests' busbw (x(n-1)/n) is then the per-GPU NIC bandwidth × N/(N-1)
across nodes (the formula of NVIDIA/nccl-tests#130) and the intra-node bandwidth on one node.

Protocols (NCCL): Simple at full bandwidth; LL128 at 0.92 on NVLink (Volta..Blackwell); LL at
1/4 (all_reduce, reduce, any multi-node op) or 1/3, capped at ``llMaxBw``. Latencies are NCCL's
``baseLat + steps × hwLat`` tables (NVLink, PCI or network hops), in microseconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from shardscope.contracts.factors import OPS, busbw_factor
from shardscope.costmodel.machine import Machine

ALGORITHMS = ("ring", "tree", "nvls", "nvls_tree", "pairwise")
PROTOCOLS = ("LL", "LL128", "Simple")

# NCCL src/graph/tuning.cc at commit b6475625 (NCCL 2.19): latencies in microseconds.
_BASE_LAT = {"tree": {"LL": 6.8, "LL128": 14.0, "Simple": 0.0}, "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
             "nvls": {"Simple": 0.0}}
_HW_LAT = {
    "nvlink": {"tree": {"LL": 0.6, "LL128": 1.25, "Simple": 28.0}, "ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
               "nvls": {"Simple": 23.0}},
    "pcie": {"tree": {"LL": 1.0, "LL128": 1.9, "Simple": 28.0}, "ring": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7}},
    "net": {"tree": {"LL": 5.0, "LL128": 8.5, "Simple": 28.0}, "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}},
}
#: ``llMaxBws`` for one node by GPU generation (tuning.cc): Volta 39, Ampere/Hopper 87.7 GB/s.
_LL_MAX = {"volta": 39.0, "turing": 39.0, "pascal": 39.0, "ampere": 87.7, "hopper": 87.7, "blackwell": 87.7}
_LL128_ARCHS = ("volta", "ampere", "hopper", "blackwell")

#: NCCL's per-channel speeds of a multi-node graph search, GB/s (src/graph/search.cc at v2.19.3,
#: ``speedArrayInter`` and ``sm90SpeedArrayInter``), highest first.
_SPEEDS_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12)
_SPEEDS_INTER_SM90 = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)
#: NCCL's ``perChMaxTreeBws`` (src/graph/tuning.cc at v2.19.3): the most a tree channel is rated at, on
#: 1, 2 and 3+ nodes, by GPU generation (Blackwell takes Hopper's row, the newest one at that version).
_PER_CHANNEL_MAX_TREE = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8), "hopper": (38.7, 41.4, 36.0),
                         "blackwell": (38.7, 41.4, 36.0)}
#: NCCL's ``perChMaxRingLL128Bws`` (the same file): the most a ring LL128 channel is rated at.
_PER_CHANNEL_MAX_RING_LL128 = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7, "blackwell": 36.7}

#: Stand-in for the ``cpu`` fabric (gloo over the loopback on one host): NOT from a source.
#: Rough placeholders so predictions exist; calibrate them with measured rows.
CPU_GLOO_GBPS = 2.0
CPU_GLOO_LATENCY_US = 50.0


@dataclass(frozen=True)
class Job:
    """Where a collective runs: the GPUs used in each node, how many nodes, and the transport."""

    machine: Machine
    members: tuple[int, ...]
    """GPU indices used in every node (the same in each)."""
    nodes: int = 1
    nvlink: bool = True
    """False for the PCIe-forced transport (``NCCL_P2P_DISABLE=1 NCCL_NVLS_ENABLE=0``): no NVLink and no
    peer-to-peer, so GPU pairs talk through host memory (:meth:`Machine.cut_gbps` with ``p2p=False``)."""
    cpu_ranks: int = 0
    """Processes on the ``cpu`` fabric (no GPUs); 0 otherwise."""

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"nodes must be at least 1, got {self.nodes}")
        if self.machine.fabric == "cpu":
            if self.cpu_ranks < 1:
                raise ValueError("a job on the cpu fabric needs cpu_ranks >= 1")
            return
        if not self.members or len(set(self.members)) != len(self.members):
            raise ValueError(f"a job needs distinct GPUs, got {self.members}")
        unknown = [g for g in self.members if g not in self.machine.gpus]
        if unknown:
            raise ValueError(f"GPUs {unknown} are not in the topology (it has {list(self.machine.gpus)})")

    @property
    def world_size(self) -> int:
        """Ranks in the job."""
        return self.cpu_ranks if self.machine.fabric == "cpu" else len(self.members) * self.nodes

    @property
    def per_node(self) -> int:
        """Ranks in one node."""
        return self.world_size // self.nodes


@dataclass(frozen=True)
class Bandwidths:
    """The bandwidths a job can reach, GB/s, and the hardware class of its bottleneck."""

    bus_gbps: float
    """Ring bus bandwidth: the weakest cut, inside the node or across the network."""
    intra_gbps: float
    """The weakest cut inside one node."""
    link: str
    """``nvlink``, ``pcie``, ``net``, ``cpu`` or ``local``: what the weakest cut is made of."""
    intra_link: str
    switch_gbps: float
    """Per-GPU NVSwitch bandwidth when NVLS applies, else 0."""
    nvls_efficiency: float
    net_gbps: float = float("inf")
    """Effective network bandwidth out of one node (inf on one node)."""
    net_per_gpu_gbps: float = float("inf")
    """One GPU's share of it when all GPUs talk across nodes at once (all-to-all)."""


def job_bandwidths(job: Job) -> Bandwidths:
    """Bus bandwidths of a job (see the module docstring)."""
    machine = job.machine
    if machine.fabric == "cpu":
        return Bandwidths(CPU_GLOO_GBPS, CPU_GLOO_GBPS, "cpu", "cpu", 0.0, 0.0)
    # a GPU without PCIe peer access (GeForce) stages its PCIe traffic through host memory, as P2P off does
    intra, intra_link = machine.ring_gbps(job.members, use_nvlink=job.nvlink,
                                          p2p=job.nvlink and machine.spec.pcie_peer_access)
    bus, link = intra, intra_link
    if job.nodes > 1:
        net = machine.network_gbps(len(job.members))
        if net < bus:
            bus, link = net, "net"
    nvls_ok = job.nvlink and machine.fabric == "nvswitch" and machine.spec.nvls_efficiency > 0
    switch = machine.switch_bandwidth(job.members) if nvls_ok else 0.0
    net = machine.network_gbps(len(job.members)) if job.nodes > 1 else float("inf")
    per_gpu = machine.nic_per_gpu_gbps(len(job.members)) if job.nodes > 1 else float("inf")
    return Bandwidths(bus, intra, link, intra_link, switch, machine.spec.nvls_efficiency if nvls_ok else 0.0, net, per_gpu)


@dataclass(frozen=True)
class NetworkGraph:
    """What NCCL's graph search finds for a multi-node job, as its tuning model sees it (src/graph/search.cc).

    One channel per NIC the job uses (``channels``), each at ``speed_gbps``: the largest of NCCL's
    speeds within both the NIC's line rate and the GPU's PCIe link. A tree graph on 2 nodes then raises
    its intra-node speed (``tree_intra_gbps``) step by step while it is under twice the network speed
    and the node's NVLink/PCIe still carries every channel at it ("increase bwIntra for trees (2 nodes
    or collnet)"); rings and trees on more nodes keep the network speed.
    """

    channels: int
    speed_gbps: float
    tree_intra_gbps: float


def network_graph(job: Job, bw: Bandwidths) -> NetworkGraph:
    """NCCL's ring/tree graph for a multi-node job (see :class:`NetworkGraph`)."""
    machine = job.machine
    speeds = _SPEEDS_INTER_SM90 if machine.spec.arch in ("hopper", "blackwell") else _SPEEDS_INTER
    link = min(machine.pcie_gbps.get(g, float("inf")) for g in job.members)
    limit = min(machine.nic_gbps / 8.0, link)
    index = next((i for i, s in enumerate(speeds) if s <= limit), len(speeds) - 1)
    channels = machine.rails_used(job.per_node)
    speed = speeds[index]
    intra = speed
    if job.nodes <= 2 and job.per_node > 1:
        while index > 0 and intra < 2 * speed and channels * speeds[index - 1] <= bw.intra_gbps:
            index -= 1
            intra = speeds[index]
    return NetworkGraph(channels, speed, intra)


def _nccl_rated_tree_bus(job: Job, graph: NetworkGraph, proto: str, ll_max: float) -> float:
    """The tree bus bandwidth NCCL's tuning rates a multi-node all-reduce at (``ncclTopoTuneModel``)."""
    rows = _PER_CHANNEL_MAX_TREE.get(job.machine.spec.arch, _PER_CHANNEL_MAX_TREE["volta"])
    per_channel_max = rows[1] if job.nodes <= 2 else rows[2]
    rate = graph.tree_intra_gbps if job.nodes <= 2 else graph.speed_gbps
    bus = min(0.92 * graph.channels * rate, graph.channels * per_channel_max)
    if proto == "LL":
        return min(bus / 3.8, ll_max)
    if proto == "LL128":
        return bus * 120.0 / 128.0
    return bus


def _btree(n: int, rank: int) -> tuple[int, list[int]]:
    """(parent, children) of ``rank`` in NCCL's binary tree over ``n`` ranks (parent -1 at the root)."""
    bit = 1
    while bit < n and not bit & rank:
        bit <<= 1
    if rank == 0:
        return -1, ([bit >> 1] if n > 1 else [])
    parent = (rank ^ bit) | (bit << 1)
    if parent >= n:
        parent = rank ^ bit
    low = bit >> 1
    children = [rank - low] if low else []
    while low and rank + low >= n:
        low >>= 1
    if low:
        children.append(rank + low)
    return parent, children


def tree_network_load(nodes: int) -> float:
    """Bytes the busiest node sends over the network per byte of an all-reduce in NCCL's double binary tree.

    Each of the two trees carries half the buffer: a node sends its half up to its parent
    (reduce) and down to each child (broadcast). The second tree is the first mirrored (even
    node count) or shifted by one (odd), as in NCCL's ``ncclGetDtree``.
    """
    if nodes < 2:
        return 0.0
    worst = 0.0
    for r in range(nodes):
        p1, c1 = _btree(nodes, r)
        if nodes % 2:
            p2, c2 = _btree(nodes, (r - 1) % nodes)
        else:
            p2, c2 = _btree(nodes, nodes - 1 - r)
        links = (p1 >= 0) + len(c1) + (p2 >= 0) + len(c2)
        worst = max(worst, 0.5 * links)
    return worst


@dataclass(frozen=True)
class CollectivePrediction:
    """The modeled time of one collective and the bandwidths nccl-tests would report for it."""

    op: str
    world_size: int
    size_bytes: int
    time_s: float
    algorithm: str
    protocol: str
    algbw_gbps: float
    busbw_gbps: float
    bottleneck: str

    def __post_init__(self) -> None:
        if self.world_size < 2 or self.size_bytes <= 0 or not (self.time_s > 0 and math.isfinite(self.time_s)):
            raise ValueError(f"invalid prediction: {self.world_size} ranks, {self.size_bytes} B in {self.time_s} s")


def _steps(op: str, n: int) -> int:
    if op == "all_reduce":
        return 2 * (n - 1)
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return n - 1
    if op == "sendrecv":
        return 1
    return n


def _ring_latency_us(op: str, job: Job, hw: str, proto: str) -> float:
    n, nodes = job.world_size, job.nodes
    steps = _steps(op, n)
    inter = (2 * nodes if op == "all_reduce" else nodes - 1) if nodes > 1 else 0
    inter = min(inter, steps)
    return _BASE_LAT["ring"][proto] + (steps - inter) * _HW_LAT[hw]["ring"][proto] + inter * _HW_LAT["net"]["ring"][proto]


def _candidates(op: str, job: Job, bw: Bandwidths) -> list[tuple[str, str, float, float, float, str]]:
    """(algorithm, protocol, latency in s, algbw NCCL's tuning expects, algbw the traffic allows, bottleneck).

    The first algbw is how NCCL ranks the options; the second is what the chosen one reaches.
    """
    n = job.world_size
    factor = busbw_factor(op, n)
    arch = job.machine.spec.arch
    hw = "nvlink" if bw.intra_link == "nvlink" else "pcie"
    ll_share = 0.25 if (op in ("all_reduce", "reduce") or job.nodes > 1) else 1.0 / 3.0
    ll_max = _LL_MAX.get(arch, 39.0)
    if op == "all_to_all":
        return [_pairwise(job, bw, hw)]
    protocols: dict[str, float] = {"Simple": bw.bus_gbps, "LL": min(ll_max, bw.bus_gbps * ll_share)}
    if hw == "nvlink" and arch in _LL128_ARCHS and bw.link != "net":
        protocols["LL128"] = bw.bus_gbps * 0.92
    out = []
    graph = network_graph(job, bw) if job.nodes > 1 else None
    for proto, bus in protocols.items():
        rated = bus
        if graph is not None:  # NCCL rates a multi-node ring by its graph: channels x speed
            rated = graph.channels * graph.speed_gbps
            if proto == "LL":
                rated = min(ll_max, rated * ll_share)
            elif proto == "LL128":
                rated = min(rated * 0.92, graph.channels * _PER_CHANNEL_MAX_RING_LL128.get(arch, 20.0))
        out.append(("ring", proto, _ring_latency_us(op, job, hw, proto) * 1e-6, rated / factor, bus / factor, bw.link))
    if op == "all_reduce" and n > 2:
        per_node = job.per_node
        load = tree_network_load(job.nodes)
        for proto, scale in (("Simple", 0.92), ("LL", 0.92 / 3.8), ("LL128", 0.92 * (7.0 / 9.0 if job.nodes == 1 else 120.0 / 128.0))):
            if proto == "LL128" and "LL128" not in protocols:
                continue
            lat = _BASE_LAT["tree"][proto] + 2 * ((per_node - 1) * _HW_LAT[hw]["tree"][proto]
                                                 + math.log2(job.nodes) * _HW_LAT["net"]["tree"][proto])
            bus = min(bw.bus_gbps * scale, ll_max) if proto == "LL" else bw.bus_gbps * scale
            real, limit, rated = 0.5 * bus, bw.link, 0.5 * bus
            if graph is not None:
                rated = 0.5 * _nccl_rated_tree_bus(job, graph, proto, ll_max)
                intra = (min(bw.intra_gbps * scale, ll_max) if proto == "LL" else bw.intra_gbps * scale) * 0.5 \
                    if per_node > 1 else float("inf")
                over_net = bw.net_gbps * (scale / 0.92) / load
                real, limit = (over_net, "net") if over_net <= intra else (intra, bw.intra_link)
            out.append(("tree", proto, lat * 1e-6, rated, real, limit))
    if op == "all_reduce" and bw.switch_gbps > 0 and n >= 2:
        per_node = job.per_node
        nvls = bw.switch_gbps * bw.nvls_efficiency * per_node / (per_node + 1)
        lat = _HW_LAT["nvlink"]["nvls"]["Simple"] * 1e-6
        if job.nodes == 1:
            out.append(("nvls", "Simple", lat, nvls, nvls, "nvlink"))
        else:
            over_net = bw.net_gbps / tree_network_load(job.nodes)
            real, limit = (over_net, "net") if over_net <= nvls else (nvls, "nvlink")
            lat += (_BASE_LAT["tree"]["Simple"] + 2 * math.log2(job.nodes) * _HW_LAT["net"]["tree"]["Simple"]) * 1e-6
            out.append(("nvls_tree", "Simple", lat, real, real, limit))
    return out


def _pairwise(job: Job, bw: Bandwidths, hw: str) -> tuple[str, str, float, float, float, str]:
    """The all-to-all candidate (see the module docstring): intra-node and network shares at once."""
    n, g, nodes = job.world_size, job.per_node, job.nodes
    times = []
    if g > 1:
        times.append(((g - 1) / n / bw.intra_gbps, bw.intra_link))
    if nodes > 1:
        times.append((g * (nodes - 1) / n / bw.net_per_gpu_gbps, "net"))
    per_byte, limit = max(times)
    algbw = 1.0 / per_byte
    steps = n - 1
    inter = steps - (g - 1)
    lat = _BASE_LAT["ring"]["Simple"] + (g - 1) * _HW_LAT[hw]["ring"]["Simple"] + inter * _HW_LAT["net"]["ring"]["Simple"]
    return ("pairwise", "Simple", lat * 1e-6, algbw, algbw, limit)


def predict_collective(op: str, size_bytes: int, job: Job, algorithms: Sequence[str] | None = None) -> CollectivePrediction:
    """The modeled time and nccl-tests bandwidths of ``op`` on ``size_bytes`` (nccl-tests' S) for ``job``.

    ``algorithms`` restricts NCCL's choice (like ``NCCL_ALGO``); by default the fastest wins.
    """
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; expected one of {', '.join(OPS)}")
    if size_bytes <= 0:
        raise ValueError(f"message size must be positive, got {size_bytes}")
    n = job.world_size
    if n < 2:
        raise ValueError("a collective needs at least 2 ranks")
    bw = job_bandwidths(job)
    if job.machine.fabric == "cpu":
        factor = busbw_factor(op, n)
        time_s = CPU_GLOO_LATENCY_US * 1e-6 * math.log2(n) + size_bytes * factor / (CPU_GLOO_GBPS * 1e9)
        algbw = size_bytes / time_s / 1e9
        return CollectivePrediction(op, n, size_bytes, time_s, "gloo", "tcp", algbw, algbw * factor, "cpu")
    allowed = tuple(algorithms) if algorithms else ALGORITHMS
    options = [c for c in _candidates(op, job, bw) if c[0] in allowed] or _candidates(op, job, bw)
    best = min(options, key=lambda c: c[2] + size_bytes / (c[3] * 1e9))
    algorithm, protocol, latency_s, _, algbw, bottleneck = best
    time_s = latency_s + size_bytes / (algbw * 1e9)
    achieved = size_bytes / time_s / 1e9
    return CollectivePrediction(op, n, size_bytes, time_s, algorithm, protocol, achieved,
                                achieved * busbw_factor(op, n), bottleneck)


def peak_busbw_gbps(op: str, job: Job, algorithms: Sequence[str] | None = None) -> float:
    """The bus bandwidth the model tends to for very large messages (what nccl-tests calls the peak)."""
    return predict_collective(op, 1 << 40, job, algorithms).busbw_gbps
