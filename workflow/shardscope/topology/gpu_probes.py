"""Accelerator probes tried in order by :func:`shardscope.topology.detect.detect`.

Each probe is a zero-argument callable returning ``(Topology, raw)`` or ``None`` when its
tool or library is absent or sees no GPU; ``raw`` maps a file name to the verbatim probe
output, stored beside ``topology.json`` for provenance.

NVIDIA: NVML (``pynvml`` from nvidia-ml-py) gives names, memory, PCI bus ids, NUMA nodes,
PCIe generation/width, the PCIe path between each GPU pair and where each active NVLink
ends (a peer GPU or an NVSwitch). ``nvidia-smi topo -m`` is always kept verbatim; its links
are used when NVML cannot report the PCIe paths, and its NICs and CPU affinity always.
AMD: ``rocm-smi --showtopo``. The functions that turn NVML answers or command text into a
Topology take them as arguments, so tests feed recorded outputs.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardscope.errors import UserError
from shardscope.fileio import dump_json
from shardscope.topology.cpu import probe_numa_nodes
from shardscope.topology.model import Gpu, Link, NumaNode, Topology
from shardscope.topology.nvidia_smi import parse_nvidia_smi
from shardscope.topology.rocm_smi import parse_rocm_smi

ProbeResult = tuple[Topology, dict[str, str]]

#: Names of the raw files a probe returns.
NVIDIA_SMI_RAW = "nvidia-smi-topo-m.txt"
NVML_RAW = "nvml.json"
ROCM_SMI_RAW = "rocm-smi-showtopo.txt"
#: How long a command-line probe may run before it counts as absent.
TOOL_TIMEOUT_S = 60

# NVML enum values (part of its stable C ABI).
_NVML_FEATURE_ENABLED = 1
_NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
#: nvmlGpuTopologyLevel_t -> the code nvidia-smi prints; 0 is two GPUs on one board (K80).
_ANCESTOR_CODES = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


@dataclass
class NvmlGpu:
    """What NVML says about one GPU, including where its active NVLinks end."""

    index: int
    name: str | None = None
    memory_bytes: int | None = None
    pci_bus_id: str | None = None
    numa_node: int | None = None
    pcie_generation: int | None = None
    pcie_width: int | None = None
    peer_nvlinks: dict[int, int] = field(default_factory=dict)
    switch_nvlinks: int = 0


@dataclass
class NvmlSnapshot:
    """NVML's answers for the whole node; ``pcie_paths`` (a, b, code) is None when incomplete."""

    driver_version: str | None
    gpus: list[NvmlGpu]
    pcie_paths: list[tuple[int, int, str]] | None


def run_tool(argv: list[str], timeout_s: float = TOOL_TIMEOUT_S) -> str | None:
    """Standard output of a command on PATH that succeeds; None when absent, failing or hung."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 and done.stdout.strip() else None


def _text(value: Any) -> str | None:
    """NVML strings arrive as ``str`` or ``bytes`` depending on the binding's version."""
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _query(nvml: Any, function: str, *args: Any) -> Any:
    """Call an NVML function; None when the driver or binding lacks it or it fails."""
    try:
        return getattr(nvml, function)(*args)
    except (nvml.NVMLError, AttributeError):
        return None


def _bus_key(bus_id: str | None) -> str | None:
    """A PCI bus id in sysfs form (``0000:18:00.0``) from NVML's (``00000000:18:00.0``)."""
    if not bus_id or ":" not in bus_id:
        return None
    domain, rest = bus_id.split(":", 1)
    try:
        return f"{int(domain, 16):04x}:{rest.lower()}"
    except ValueError:
        return None


def _sysfs_numa_node(bus_id: str | None, sysfs_root: str | Path) -> int | None:
    """The NUMA node Linux reports for a PCI device; None when unknown (-1) or unreadable."""
    key = _bus_key(bus_id)
    path = Path(sysfs_root) / "sys/bus/pci/devices" / (key or "") / "numa_node"
    try:
        node = int(path.read_text().strip()) if key else -1
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def _read_gpu(nvml: Any, index: int, handle: Any, sysfs_root: str | Path) -> NvmlGpu:
    """Name, memory, bus id, NUMA node and PCIe capability of one GPU."""
    pci = _query(nvml, "nvmlDeviceGetPciInfo", handle)
    memory = _query(nvml, "nvmlDeviceGetMemoryInfo", handle)
    bus_id = _text(pci.busId) if pci is not None else None
    numa = _query(nvml, "nvmlDeviceGetNumaNodeId", handle)
    return NvmlGpu(
        index=index,
        name=_text(_query(nvml, "nvmlDeviceGetName", handle)),
        memory_bytes=int(memory.total) if memory is not None else None,
        pci_bus_id=bus_id,
        numa_node=numa if isinstance(numa, int) and numa >= 0 else _sysfs_numa_node(bus_id, sysfs_root),
        pcie_generation=_query(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle),
        pcie_width=_query(nvml, "nvmlDeviceGetMaxPcieLinkWidth", handle),
    )


def _count_nvlinks(nvml: Any, handle: Any, gpu_by_bus: dict[str, int]) -> tuple[dict[int, int], int]:
    """Active NVLinks of one GPU: per peer GPU index, and how many end at an NVSwitch."""
    peers: dict[int, int] = {}
    switch = 0
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        if _query(nvml, "nvmlDeviceGetNvLinkState", handle, link) != _NVML_FEATURE_ENABLED:
            continue
        remote = _query(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        peer = gpu_by_bus.get(_bus_key(_text(remote.busId)) or "") if remote is not None else None
        if peer is not None:
            peers[peer] = peers.get(peer, 0) + 1
        elif _query(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link) == _NVML_NVLINK_DEVICE_TYPE_SWITCH:
            switch += 1
    return peers, switch


def _pcie_paths(nvml: Any, handles: list[Any]) -> list[tuple[int, int, str]] | None:
    """The PCIe path code of every GPU pair ``a < b``; None if NVML cannot tell for some pair."""
    paths = []
    for a in range(len(handles)):
        for b in range(a + 1, len(handles)):
            level = _query(nvml, "nvmlDeviceGetTopologyCommonAncestor", handles[a], handles[b])
            if level not in _ANCESTOR_CODES:
                return None
            paths.append((a, b, _ANCESTOR_CODES[level]))
    return paths


def read_nvml(nvml: Any, sysfs_root: str | Path = "/") -> NvmlSnapshot | None:
    """Everything the probe needs from NVML (the ``pynvml`` module or a stand-in); None without GPUs."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(_query(nvml, "nvmlDeviceGetCount") or 0)]
        gpus = [_read_gpu(nvml, i, h, sysfs_root) for i, h in enumerate(handles)]
        gpu_by_bus = {key: g.index for g in gpus if (key := _bus_key(g.pci_bus_id))}
        for gpu, handle in zip(gpus, handles):
            gpu.peer_nvlinks, gpu.switch_nvlinks = _count_nvlinks(nvml, handle, gpu_by_bus)
        snapshot = NvmlSnapshot(
            driver_version=_text(_query(nvml, "nvmlSystemGetDriverVersion")),
            gpus=gpus,
            pcie_paths=_pcie_paths(nvml, handles),
        )
    except nvml.NVMLError:
        return None
    finally:
        _query(nvml, "nvmlShutdown")
    return snapshot if gpus else None


def _nvml_links(snapshot: NvmlSnapshot, pcie_paths: list[tuple[int, int, str]]) -> list[Link]:
    """Links from NVML: NV<n> with direct plus switched NVLinks, else the PCIe path code.

    GPUs that both reach NVSwitches are joined through them by as many links as the
    smaller side has, which is what ``nvidia-smi topo -m`` prints for such pairs.
    """
    by_index = {g.index: g for g in snapshot.gpus}
    links = []
    for first, second, pcie_code in pcie_paths:
        a, b = by_index[first], by_index[second]
        count = a.peer_nvlinks.get(b.index, 0) + min(a.switch_nvlinks, b.switch_nvlinks)
        links.append(Link(a=a.index, b=b.index, code=f"NV{count}" if count else pcie_code, nvlinks=count))
    return links


def _merge_gpu(seen: NvmlGpu, from_matrix: Gpu | None) -> Gpu:
    """A Gpu from NVML's answers, completed with the matrix's CPU affinity, NUMA node and nearest NICs."""
    numa = seen.numa_node if seen.numa_node is not None else getattr(from_matrix, "numa_node", None)
    return Gpu(
        index=seen.index,
        name=seen.name,
        memory_bytes=seen.memory_bytes,
        pci_bus_id=seen.pci_bus_id,
        numa_node=numa,
        cpu_affinity=getattr(from_matrix, "cpu_affinity", None),
        pcie_generation=seen.pcie_generation,
        pcie_width=seen.pcie_width,
        nearest_nics=getattr(from_matrix, "nearest_nics", ()),
        nearest_nic_code=getattr(from_matrix, "nearest_nic_code", None),
    )


def _parse_matrix(smi_text: str | None) -> Topology | None:
    """The nvidia-smi matrix as a Topology, or None when absent or unparseable."""
    if smi_text is None:
        return None
    try:
        return parse_nvidia_smi(smi_text, NVIDIA_SMI_RAW)
    except UserError:
        return None


def nvidia_topology(
    snapshot: NvmlSnapshot | None, smi_text: str | None, host_numa: Sequence[NumaNode] = ()
) -> Topology | None:
    """Combine NVML's answers and ``nvidia-smi topo -m`` text into one Topology.

    Without NVML answers this is the matrix alone. With them, links come from NVML when it
    reported every pair's PCIe path, else from the matrix, and ``host_numa`` (the OS's NUMA
    nodes), when given, replaces the NUMA nodes the matrix implies.
    """
    matrix = _parse_matrix(smi_text)
    if snapshot is None or not snapshot.gpus:
        return matrix
    seen = {g.index: g for g in matrix.gpus} if matrix else {}
    gpus = [_merge_gpu(g, seen.get(g.index)) for g in snapshot.gpus]
    links, links_from = _choose_links(snapshot, matrix)
    switched = len(gpus) > 1 and all(g.switch_nvlinks > 0 for g in snapshot.gpus)
    notes = ["NVML reports every GPU's NVLinks ending at NVSwitch chips"] if switched else []
    if links_from == "none" and len(gpus) > 1:
        notes.append("neither NVML nor nvidia-smi reported the paths between GPUs; links are unknown")
    if smi_text is not None and matrix is None:
        notes.append("the output of nvidia-smi topo -m (kept in raw/) could not be read as a matrix and was not used")
    return Topology(
        gpus=gpus,
        links=links,
        numa_nodes=list(host_numa) or (matrix.numa_nodes if matrix else []),
        nics=matrix.nics if matrix else [],
        source={"method": "nvml", "links_from": links_from, "driver_version": snapshot.driver_version},
        accelerator="nvidia",
        notes=notes,
        fabric_override="nvswitch" if switched else None,
    )


def _choose_links(snapshot: NvmlSnapshot, matrix: Topology | None) -> tuple[list[Link], str]:
    """NVML's links when complete, else the matrix's, with the name of their source."""
    if snapshot.pcie_paths is not None:
        return _nvml_links(snapshot, snapshot.pcie_paths), "nvml"
    if matrix is not None:
        return matrix.links, "nvidia-smi"
    return [], "none"


def _import_pynvml() -> Any:
    """The ``pynvml`` module, or None when nvidia-ml-py is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def probe_nvidia() -> ProbeResult | None:
    """Probe NVIDIA GPUs through NVML and ``nvidia-smi topo -m``; None when neither sees one."""
    nvml = _import_pynvml()
    snapshot = read_nvml(nvml) if nvml is not None else None
    smi_text = run_tool(["nvidia-smi", "topo", "-m"])
    topology = nvidia_topology(snapshot, smi_text, probe_numa_nodes() if snapshot else ())
    if topology is None:
        return None
    raw = {NVIDIA_SMI_RAW: smi_text} if smi_text else {}
    if snapshot is not None:
        raw[NVML_RAW] = dump_json(dataclasses.asdict(snapshot))
    return topology, raw


def probe_amd() -> ProbeResult | None:
    """Probe AMD GPUs through ``rocm-smi --showtopo`` (NUMA nodes from the OS); None without GPUs."""
    text = run_tool(["rocm-smi", "--showtopo"])
    if text is None:
        return None
    try:
        topology = parse_rocm_smi(text, ROCM_SMI_RAW)
    except UserError:
        return None
    topology.numa_nodes = probe_numa_nodes() or topology.numa_nodes
    return topology, {ROCM_SMI_RAW: text}


#: The probes :func:`shardscope.topology.detect.detect` tries, in order.
PROBES: list[Callable[[], ProbeResult | None]] = [probe_nvidia, probe_amd]
