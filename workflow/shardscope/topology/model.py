"""The topology data contract: GPUs, pairwise links, NVLink islands, NUMA nodes, fabric class.

Every probe (NVML, ``nvidia-smi topo -m``, ``rocm-smi``, the OS for CPU-only machines) and
every parser of saved probe text produces a :class:`Topology`; ``topology.json`` is its
:meth:`Topology.to_dict`. The fabric class and the islands are derived here, in one place.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

_NV_CODE = re.compile(r"^NV(\d+)$")
#: PCIe path codes of nvidia-smi, from nearest to farthest.
PCIE_PATH_CODES = ("PIX", "PXB", "PHB", "NODE", "SYS")

#: NVLinks one GPU of a generation can drive (its whole budget, whoever is at the other end).
#: Searched in order; the first pattern found in the GPU name wins.
_NVLINK_BUDGETS: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(r"GB[23]00|B[123]00"), 18),
    (re.compile(r"H100|H200|\bH20\b"), 18),
    (re.compile(r"H800|A800"), 8),
    (re.compile(r"A100"), 12),
    (re.compile(r"V100"), 6),
    (re.compile(r"P100"), 4),
    (re.compile(r"A6000|A5000|\bA40\b|3090"), 4),
)

#: The budget assumed when the GPU name is unknown: the most any current GPU has (H100, B200).
DEFAULT_NVLINK_BUDGET = 18


def nvlink_count(code: str) -> int:
    """Number of bonded NVLinks a matrix code such as ``NV18`` stands for (0 for PCIe codes)."""
    match = _NV_CODE.match(code)
    return int(match.group(1)) if match else 0


@dataclass(frozen=True)
class Gpu:
    """One accelerator as the probe saw it; fields the probe could not see are ``None``."""

    index: int
    name: str | None = None
    memory_bytes: int | None = None
    pci_bus_id: str | None = None
    numa_node: int | None = None
    cpu_affinity: str | None = None
    pcie_generation: int | None = None  # highest PCIe generation the GPU and slot support
    pcie_width: int | None = None  # highest PCIe link width (lanes) the GPU and slot support
    nearest_nics: tuple[str, ...] = ()  # NIC names (``Nic.name``) closest to this GPU, ties kept
    nearest_nic_code: str | None = None  # the path code to them (``PIX``, ``PXB``… ``SYS``)


@dataclass(frozen=True)
class Link:
    """The connection between GPUs ``a < b``: the matrix code (``NV18``, ``PIX``, ``SYS``…)."""

    a: int
    b: int
    code: str
    nvlinks: int = 0

    def __post_init__(self) -> None:
        if self.a >= self.b:
            raise ValueError(f"link endpoints must be ordered a < b, got {self.a}, {self.b}")


@dataclass(frozen=True)
class Nic:
    """A network interface from the topology matrix and the GPUs closest to it."""

    name: str
    device: str | None = None
    nearest_gpus: tuple[int, ...] = ()
    nearest_code: str | None = None


@dataclass(frozen=True)
class NumaNode:
    """A NUMA node with its CPU list (as the OS or nvidia-smi printed it) and core count."""

    id: int
    cpus: str | None = None
    cores: int | None = None


@dataclass
class Topology:
    """Everything later stages need to know about the node's interconnect."""

    gpus: list[Gpu]
    links: list[Link]
    numa_nodes: list[NumaNode]
    source: dict[str, Any]
    nics: list[Nic] = field(default_factory=list)
    cpu: dict[str, Any] = field(default_factory=dict)
    accelerator: str = "none"  # "nvidia", "amd" or "none"
    pcie_only_view: bool = False
    notes: list[str] = field(default_factory=list)
    fabric_override: str | None = None
    #: What the view may hide (``topo -mp``, a flattened VM view, a slice) and input values that were
    #: not used; see :mod:`shardscope.topology.views`. Printed by the commands, not only stored.
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        """Record, once, when the matrix cannot tell an NVSwitch from direct NVLinks, and what the view may hide."""
        from shardscope.topology.views import view_warnings

        if self.fabric_override is None:
            note = fabric_note([g.index for g in self.gpus], self.links, nvlink_budgets(self.gpus))
            if note is not None and note not in self.notes:
                self.notes.append(note)
        for warning in view_warnings(self.gpus, self.links, self.fabric, self.pcie_only_view):
            if warning not in self.warnings:
                self.warnings.append(warning)

    @property
    def islands(self) -> list[list[int]]:
        """Connected components of the NVLink (or XGMI) graph, each sorted, ordered by first GPU."""
        return nvlink_islands([g.index for g in self.gpus], self.links)

    @property
    def fabric(self) -> str:
        """The fabric class (docs/design.md) derived from the GPUs and links."""
        if self.fabric_override is not None:
            return self.fabric_override
        return classify_fabric([g.index for g in self.gpus], self.links, nvlink_budgets(self.gpus))

    def to_dict(self) -> dict[str, Any]:
        """The ``topology.json`` document: plain JSON types, stable key names."""
        return {
            "schema": "shardscope.topology/1",
            "fabric": self.fabric,
            "accelerator": self.accelerator,
            "gpu_count": len(self.gpus),
            "gpus": [dict(asdict(g), nearest_nics=list(g.nearest_nics)) for g in self.gpus],
            "links": [asdict(link) for link in self.links],
            "islands": self.islands,
            "numa_nodes": [asdict(n) for n in self.numa_nodes],
            "nics": [dict(asdict(n), nearest_gpus=list(n.nearest_gpus)) for n in self.nics],
            "cpu": dict(self.cpu),
            "pcie_only_view": self.pcie_only_view,
            "notes": list(self.notes),
            **({"warnings": list(self.warnings)} if self.warnings else {}),
            "source": dict(self.source),
        }


def nvlink_islands(gpu_indices: list[int], links: list[Link]) -> list[list[int]]:
    """Group GPUs into islands: connected components over links with at least one NVLink."""
    parent = {g: g for g in gpu_indices}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for link in links:
        if link.nvlinks > 0 and link.a in parent and link.b in parent:
            parent[find(link.a)] = find(link.b)
    groups: dict[int, list[int]] = {}
    for g in gpu_indices:
        groups.setdefault(find(g), []).append(g)
    return sorted((sorted(v) for v in groups.values()), key=lambda island: island[0])


def sys_socket_groups(gpu_indices: list[int], links: list[Link]) -> list[list[int]]:
    """CPU sockets inferred from PCIe paths: GPUs joined by non-``SYS`` paths, when ``SYS`` separates some.

    Needs a PCIe path code (PIX, PXB, PHB, NODE, SYS) for every GPU pair, since an NVLink
    code hides the PCIe path; returns ``[]`` otherwise, or when no pair is ``SYS``. Every
    pair across two returned groups is then ``SYS``: the groups sit on different sockets.
    """
    codes = {(link.a, link.b): link.code for link in links}
    pairs = [(a, b) for i, a in enumerate(gpu_indices) for b in gpu_indices[i + 1 :]]
    if not pairs or any(codes.get(p) not in PCIE_PATH_CODES for p in pairs):
        return []
    if "SYS" not in {codes[p] for p in pairs}:
        return []
    near = [Link(a, b, codes[(a, b)], nvlinks=1) for a, b in pairs if codes[(a, b)] != "SYS"]
    return nvlink_islands(gpu_indices, near)


def max_nvlinks(name: str | None) -> int:
    """NVLinks a GPU of this name can drive in total; the generous default when the name is unknown.

    A GPU cannot reach its peers over more links than it has, so a matrix that shows more
    NVLinks per GPU than this budget must route them through NVSwitch chips.
    """
    for pattern, budget in _NVLINK_BUDGETS:
        if name and pattern.search(name):
            return budget
    return DEFAULT_NVLINK_BUDGET


def nvlink_budgets(gpus: list[Gpu]) -> dict[int, int]:
    """The NVLink budget of each GPU, by index, from its name (see :func:`max_nvlinks`)."""
    return {g.index: max_nvlinks(g.name) for g in gpus}


def _nvlinks_per_gpu(gpu_indices: list[int], links: list[Link]) -> dict[int, int]:
    """Sum of the NVLink counts over each GPU's peers."""
    totals = dict.fromkeys(gpu_indices, 0)
    for link in links:
        for end in (link.a, link.b):
            if end in totals:
                totals[end] += link.nvlinks
    return totals


def _over_budget(gpu_indices: list[int], links: list[Link], budgets: Mapping[int, int] | None) -> bool:
    """Whether some GPU shows more NVLinks to its peers than it physically has."""
    budgets = budgets or {}
    totals = _nvlinks_per_gpu(gpu_indices, links)
    return any(total > budgets.get(g, DEFAULT_NVLINK_BUDGET) for g, total in totals.items())


def classify_fabric(gpu_indices: list[int], links: list[Link], budgets: Mapping[int, int] | None = None) -> str:
    """Fabric class from the NVLink graph (see docs/design.md and topology.schema.json for the meaning of each).

    All pairs NVLinked is ``nvswitch`` when some GPU's NVLink counts over its peers exceed
    its budget (``budgets`` by GPU index, :data:`DEFAULT_NVLINK_BUDGET` where missing): no GPU
    has that many links, so they run through switches. Otherwise it is ``nvlink_mesh``.
    """
    n = len(gpu_indices)
    if n == 0:
        return "cpu"
    if n == 1:
        return "single"
    nv_links = [link for link in links if link.nvlinks > 0]
    if not nv_links:
        return "pcie"
    if len(nvlink_islands(gpu_indices, links)) > 1:
        return "nvlink_islands"
    if len(nv_links) < n * (n - 1) // 2:
        return "nvlink_partial"
    return "nvswitch" if _over_budget(gpu_indices, nv_links, budgets) else "nvlink_mesh"


def fabric_note(gpu_indices: list[int], links: list[Link], budgets: Mapping[int, int] | None = None) -> str | None:
    """The caveat to record when the class is ``nvlink_mesh``: the matrix cannot rule out a switch."""
    if classify_fabric(gpu_indices, links, budgets) != "nvlink_mesh":
        return None
    most = max(_nvlinks_per_gpu(gpu_indices, links).values())
    return (
        f"fabric nvlink_mesh assumed: every GPU pair has NVLinks (or XGMI links) and the busiest GPU "
        f"shows {most}, within what one GPU can drive, so the matrix cannot tell direct links from a switch"
    )


def from_dict(doc: dict[str, Any]) -> Topology:
    """Rebuild a :class:`Topology` from a ``topology.json`` document (the inverse of ``to_dict``)."""
    return Topology(
        gpus=[Gpu(**dict(g, nearest_nics=tuple(g.get("nearest_nics", ())))) for g in doc.get("gpus", [])],
        links=[Link(**link) for link in doc.get("links", [])],
        numa_nodes=[NumaNode(**n) for n in doc.get("numa_nodes", [])],
        nics=[Nic(**dict(n, nearest_gpus=tuple(n.get("nearest_gpus", ())))) for n in doc.get("nics", [])],
        source=dict(doc.get("source", {})),
        cpu=dict(doc.get("cpu", {})),
        accelerator=doc.get("accelerator", "none"),
        pcie_only_view=bool(doc.get("pcie_only_view", False)),
        notes=list(doc.get("notes", [])),
        fabric_override=doc.get("fabric"),
        warnings=list(doc.get("warnings", [])),
    )
