"""What one GPU, one link and one CPU can move: the constants of the cost model, with their sources.

Every bandwidth here is *effective* (what NCCL's Simple protocol reaches on the wire, per
direction, in GB/s = 1e9 B/s) next to the *raw* line rate it comes from. The effective values
are NCCL's own model of the hardware (``src/graph/topo.h`` of github.com/NVIDIA/nccl): NCCL
uses them to build its rings, and its maintainers describe them as line rate minus protocol
overhead ("Each NVLink has a line rate of 25GB/s ... which converts to ~20GB/s effective
bandwidth with a 128B payload", NVIDIA/nccl-tests#149). Nothing here is fitted to a published
benchmark; tests/data/published/ holds the measurements the model is checked against.

A GPU the topology does not name is recognised by its NVLink signature (``NV18`` on a switch is
a Hopper HGX board, ``NV12`` on a switch an A100 one, ``NV1``/``NV2`` a DGX-1 …); the guess is
recorded in :attr:`GpuSpec.note` and every output that depends on it says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: Effective NVLink bandwidth per link and direction, GB/s: NCCL ``SM60/70/80/86/90/100_NVLINK_BW``
#: (src/graph/topo.h, NCCL 2.2x); Turing (sm_75) gets the SM70 value, as NCCL's ``ncclTopoGetNvbw``
#: picks it for every compute capability from 7.0 below 8.0. Raw line rates: NVLink1 20, NVLink2/3/4
#: 25 (Turing bridges too), GA10x bridge 14.0625 (``nvidia-smi nvlink -s`` on an RTX A6000,
#: siboehm/bench gpu/nvlink/README.md), NVLink5 50.
NVLINK_EFFECTIVE_GBPS: dict[str, float] = {
    "pascal": 18.0, "volta": 20.0, "turing": 20.0, "ampere": 20.0, "ga10x": 12.0, "hopper": 20.6, "blackwell": 40.1,
}
NVLINK_RAW_GBPS: dict[str, float] = {
    "pascal": 20.0, "volta": 25.0, "turing": 25.0, "ampere": 25.0, "ga10x": 14.0625, "hopper": 25.0, "blackwell": 50.0,
}

#: AMD Infinity Fabric (XGMI) links of MI200/MI300: 64 GB/s raw per direction per link (AMD
#: CDNA 3 white paper: 128 GB/s bidirectional per link). RCCL publishes no effective constant;
#: the NVLink protocol ratio (20/25 = 0.8) is assumed, so 51.2 GB/s.
XGMI_RAW_GBPS = 64.0
XGMI_EFFECTIVE_GBPS = XGMI_RAW_GBPS * 0.8

#: NVLink SHARP (NVLS) efficiency: NCCL ``nvlsEfficiency`` (src/tuning/nvls.cc): Hopper 0.85,
#: Blackwell 0.74 of the effective NVLink bandwidth. Earlier GPUs have no NVLS.
NVLS_EFFICIENCY: dict[str, float] = {"hopper": 0.85, "blackwell": 0.74}


def pcie_effective_gbps(generation: int, width: int = 16) -> float:
    """Effective PCIe bandwidth per direction, GB/s: NCCL's ``width * rate / 80`` (src/graph/topo.cc).

    NCCL's per-lane rates (``kvDictPciGen``, x100 Mb/s) are 60/120/240/480 for Gen3/4/5/6, so a
    x16 link is 12/24/48/96 GB/s: about 76% of the raw 15.75/31.5/63/126 GB/s after encoding,
    TLP headers and flow control.
    """
    rate = {1: 15, 2: 30, 3: 60, 4: 120, 5: 240, 6: 480}.get(generation, 60)
    return max(width, 1) * rate / 80.0


#: NCCL's model of GPU traffic across CPU sockets, GB/s (src/graph/topo.h): Broadwell QPI 6,
#: Skylake..Ice Lake UPI 10, Sapphire Rapids 22, Emerald Rapids 40, AMD Zen1/2 16, Zen3/4 24, Zen5 32.
INTER_SOCKET_GBPS: dict[str, float] = {
    "intel_bdw": 6.0, "intel_skl": 10.0, "intel_spr": 22.0, "intel_emr": 40.0,
    "amd_zen12": 16.0, "amd_zen34": 24.0, "amd_zen5": 32.0,
}

#: Intel root complexes split GPU peer traffic into 64 B TLPs: NCCL charges it 6/5 of the
#: bandwidth (``INTEL_P2P_OVERHEAD``), so a path through an Intel CPU carries 5/6 of the link.
INTEL_P2P_FACTOR = 5.0 / 6.0

#: Network: NCCL models a 100 Gb/s NIC as 12 GB/s (``NET_BW``), 96% of the 12.5 GB/s line rate.
NET_EFFICIENCY = 12.0 / 12.5

#: Share of the NIC line rate a collective reaches, per NIC class. InfiniBand and RoCE: NCCL's
#: ``NET_BW`` ratio above. AWS EFA (libfabric through aws-ofi-nccl): 0.56, derived from a
#: measurement that is NOT in the validation set: one 100 Gb/s EFA per p3dn.24xlarge "gets
#: 80Gb/s (10GB/s) on 2 nodes, but performance drops to 50-60Gb/s (6-8 GB/s) when using 8 to 32
#: nodes" (sjeaugey, NVIDIA/nccl#235); the midpoint 7 GB/s of the 12.5 GB/s line rate is 0.56.
#: TCP Ethernet (NCCL's socket transport, no GPUDirect RDMA): 0.42, the best all-reduce bus bandwidth on 2 nodes of a
#: 100 Gb/s TCP network, 5.21 GB/s of the 12.5 GB/s line rate with NCCL_MIN_NCHANNELS=4 NCCL_SOCKET_NTHREADS=2
#: (NVIDIA/nccl#450); a TCP network rarely does better (NVIDIA/nccl#209: 2-4 GB/s on cloud TCP before tuning).
NIC_EFFICIENCY: dict[str, float] = {"ib": NET_EFFICIENCY, "roce": NET_EFFICIENCY, "efa": 7.0 / 12.5, "tcp": 5.21 / 12.5}


#: Device-memory bandwidth per GPU family, GB/s (1e9 B/s): the datasheet figure of each (NVIDIA's product pages
#: and data sheets for A100 80GB SXM 2039 / 40GB 1555, H100 SXM 3350, H100 PCIe 2000, H100 NVL 3900, H200 4800,
#: H800 3350, H20 4000, GH200 4000 (96 GB HBM3), B200/GB200 8000, B300/GB300 8000, V100 900, P100 732, T4 320,
#: L40S/L40/L20 864, L4 300, A10/A10G 600, A30 933, A40 696, RTX A6000/A5000 768, RTX 6000 Ada 960, RTX PRO 6000
#: 1792, Quadro RTX 8000/6000 672; GeForce spec pages: RTX 2080 Ti 616, TITAN RTX 672, RTX 3080 (10 GB) 760, RTX 3090
#: 936, RTX 4080 717, RTX 4090 1008, RTX 5090 1792, GTX 1080 320; AMD Instinct data sheets: MI300X/MI300A 5300, MI325X
#: 6000, MI250X/MI250 1638 per GCD (3277 per OAM: ROCm and torch enumerate each of its two GCDs as one GPU), MI210
#: 1638, MI100 1229). The step model's roofline
#: (:func:`shardscope.costmodel.step.achieved_mfu`) reads it; a family not listed gets None (the curve's own ratio).
MEMORY_BANDWIDTH_GBPS: dict[str, float] = {
    "A100": 2039.0, "A800": 2039.0, "H100 SXM": 3350.0, "H100 PCIe": 2000.0, "H100 NVL": 3900.0, "H200": 4800.0,
    "H800": 3350.0, "H20": 4000.0, "GH200": 4000.0, "B200": 8000.0, "GB200": 8000.0, "B300": 8000.0, "GB300": 8000.0,
    "V100": 900.0, "P100": 732.0, "T4": 320.0, "L40S": 864.0, "L40": 864.0, "L20": 864.0, "L4": 300.0, "A10": 600.0,
    "A10G": 600.0, "A30": 933.0, "A40": 696.0, "RTX A6000": 768.0, "RTX A5000": 768.0, "RTX 6000 Ada": 960.0,
    "RTX PRO 6000 Blackwell": 1792.0, "Quadro RTX 8000": 672.0, "Quadro RTX 6000": 672.0, "RTX 2080 Ti": 616.0,
    "TITAN RTX": 672.0, "RTX 3080": 760.0, "RTX 3090": 936.0, "RTX 4080": 716.8, "RTX 4090": 1008.0, "RTX 5090": 1792.0,
    "MI100": 1228.8,
    "GeForce 10 series": 320.0, "MI300X": 5300.0, "MI300A": 5300.0, "MI325X": 6000.0, "MI250X": 1638.0,
    "MI250": 1638.0, "MI210": 1638.0, "Hopper HGX (H100/H200 class)": 3350.0, "A100 HGX": 2039.0,
    "V100 (DGX-1 class)": 900.0, "P100 (DGX-1 class)": 732.0,
}


#: GPU families with no PCIe peer-to-peer under NVIDIA's driver: GeForce boards of the Turing, Ampere and Ada
#: generations. ``cudaDeviceCanAccessPeer`` is false between them over PCIe ("the 2080ti has never supported p2p",
#: NVIDIA/nccl-tests#117; "Device=0 CANNOT Access Peer Device=1" on 8 x RTX 3090, NVIDIA/nccl#1127; the RTX 4090's
#: stock driver has none, tinygrad's open-gpu-kernel-modules patch adds it), so NCCL stages their PCIe traffic
#: through host memory (its SHM transport) as ``NCCL_P2P_DISABLE=1`` would; an NVLink bridge (2080 Ti, 3090) still
#: carries peer traffic. The RTX 3080 and 4080 share their generation's GeForce driver policy (assumed); the TITAN
#: RTX and RTX 5090 are left out (no public record either way here).
NO_PCIE_PEER_ACCESS = frozenset({"RTX 2080 Ti", "RTX 3080", "RTX 3090", "RTX 4080", "RTX 4090"})


@dataclass(frozen=True)
class GpuSpec:
    """What the cost model needs to know about one GPU model."""

    family: str
    """A readable name: the GPU's own name, or what its NVLink signature suggests."""
    arch: str
    """``pascal``, ``volta``, ``turing``, ``ampere``, ``ga10x``, ``hopper``, ``blackwell``, ``ada``, ``cdna`` or ``unknown``."""
    pcie_generation: int
    """PCIe generation of its host link (x16 assumed)."""
    memory_bytes: int | None
    """Device memory, or None when not known."""
    reference_name: str | None
    """A device name :func:`shardscope.contracts.peak_flops.peak_flops` knows, for the peak FLOP/s."""
    nic_gbps: float
    """Line rate of the NIC a node of this generation usually has per GPU (Gb/s), for multi-node jobs."""
    note: str | None = None
    """How the spec was obtained when it is a guess (from the NVLink signature, or a default)."""

    def __post_init__(self) -> None:
        if self.arch not in (*NVLINK_EFFECTIVE_GBPS, "ada", "cdna", "unknown"):
            raise ValueError(f"unknown GPU architecture {self.arch!r}")
        if self.pcie_generation not in (1, 2, 3, 4, 5, 6):
            raise ValueError(f"PCIe generation must be 1..6, got {self.pcie_generation!r}")
        if self.memory_bytes is not None and self.memory_bytes <= 0:
            raise ValueError(f"GPU memory must be positive, got {self.memory_bytes!r}")
        if self.nic_gbps <= 0:
            raise ValueError(f"NIC line rate must be positive, got {self.nic_gbps!r}")

    @property
    def is_cpu(self) -> bool:
        """Whether this spec stands for CPU processes over gloo (a machine without GPUs), not a GPU."""
        return self.family.startswith("CPU")

    @property
    def pcie_peer_access(self) -> bool:
        """Whether two of these GPUs can reach each other's memory over PCIe (:data:`NO_PCIE_PEER_ACCESS`)."""
        return self.family not in NO_PCIE_PEER_ACCESS

    @property
    def nvlink_gbps(self) -> float:
        """Effective bandwidth of one NVLink (or XGMI link) of this GPU, per direction."""
        if self.arch == "cdna":
            return XGMI_EFFECTIVE_GBPS
        return NVLINK_EFFECTIVE_GBPS.get(self.arch, NVLINK_EFFECTIVE_GBPS["ampere"])

    @property
    def nvlink_raw_gbps(self) -> float:
        """Line rate of one NVLink (or XGMI link), per direction."""
        if self.arch == "cdna":
            return XGMI_RAW_GBPS
        return NVLINK_RAW_GBPS.get(self.arch, NVLINK_RAW_GBPS["ampere"])

    @property
    def nvls_efficiency(self) -> float:
        """NVLink SHARP efficiency on an NVSwitch, 0 where the GPU has no NVLS."""
        return NVLS_EFFICIENCY.get(self.arch, 0.0)

    @property
    def memory_bandwidth_gbps(self) -> float | None:
        """Device-memory bandwidth (datasheet, GB/s) of this family, None where the table has none."""
        a100_40 = self.family == "A100" and self.memory_bytes is not None and self.memory_bytes <= 40 * _GIB
        return 1555.0 if a100_40 else MEMORY_BANDWIDTH_GBPS.get(self.family)

    def to_dict(self) -> dict[str, Any]:
        """Plain dictionary for JSON output."""
        return {"family": self.family, "arch": self.arch, "pcie_generation": self.pcie_generation,
                "memory_bytes": self.memory_bytes, "nvlink_gbps": self.nvlink_gbps, "note": self.note}


_GIB = 2**30
_GB = 10**9

# (pattern on the device name, family, arch, PCIe gen, memory bytes, peak-table name, NIC Gb/s).
# Memory is the datasheet capacity; names that carry a size ("40GB", "80GB") override it.
# NIC rates: the NVIDIA reference node of each generation (DGX-1 EDR 100, DGX A100 HDR 200,
# DGX H100 NDR 400, DGX B200 XDR 400 per GPU) — used only for multi-node jobs without --nic-gbps.
_TABLE: tuple[tuple[str, str, str, int, int | None, str | None, float], ...] = (
    (r"GB300", "GB300", "blackwell", 6, 288 * _GB, "GB300", 800.0),
    (r"B300", "B300", "blackwell", 6, 288 * _GB, "B300", 800.0),
    (r"GB200", "GB200", "blackwell", 5, 186 * _GB, "GB200", 400.0),
    (r"B200", "B200", "blackwell", 5, 180 * _GB, "B200", 400.0),
    (r"GH200", "GH200", "hopper", 5, 96 * _GB, "GH200", 400.0),
    (r"H200", "H200", "hopper", 5, 141 * _GB, "H200", 400.0),
    (r"H100 NVL", "H100 NVL", "hopper", 5, 94 * _GB, "H100 NVL", 400.0),
    (r"H100 PCIe", "H100 PCIe", "hopper", 5, 80 * _GB, "H100 PCIe", 400.0),
    (r"H100", "H100 SXM", "hopper", 5, 80 * _GB, "H100", 400.0),
    (r"H800", "H800", "hopper", 5, 80 * _GB, "H800", 400.0),
    (r"\bH20\b", "H20", "hopper", 5, 96 * _GB, "H20", 400.0),
    (r"A800", "A800", "ampere", 4, 80 * _GB, "A800", 200.0),
    (r"A100", "A100", "ampere", 4, 80 * _GB, "A100", 200.0),
    (r"V100", "V100", "volta", 3, 32 * _GB, "V100", 100.0),
    (r"P100", "P100", "pascal", 3, 16 * _GB, "P100", 100.0),
    (r"\bT4\b", "T4", "turing", 3, 16 * _GB, "T4", 100.0),
    (r"RTX 2080 Ti", "RTX 2080 Ti", "turing", 3, 11 * _GB, "RTX 2080 Ti", 100.0),
    (r"TITAN RTX", "TITAN RTX", "turing", 3, 24 * _GB, "TITAN RTX", 100.0),
    (r"Quadro RTX 8000", "Quadro RTX 8000", "turing", 3, 48 * _GB, "Quadro RTX 8000", 100.0),
    (r"Quadro RTX 6000", "Quadro RTX 6000", "turing", 3, 24 * _GB, "Quadro RTX 6000", 100.0),
    (r"\bA30\b", "A30", "ampere", 4, 24 * _GB, "A30", 200.0),
    (r"RTX 4080", "RTX 4080", "ada", 4, 16 * _GB, "RTX 4080", 100.0),
    (r"RTX 3080", "RTX 3080", "ga10x", 4, 10 * _GB, "RTX 3080", 100.0),
    (r"MI100", "MI100", "cdna", 4, 32 * _GB, "MI100", 200.0),
    (r"RTX PRO 6000", "RTX PRO 6000 Blackwell", "blackwell", 5, 96 * _GB, "RTX PRO 6000", 400.0),
    (r"RTX 6000 Ada", "RTX 6000 Ada", "ada", 4, 48 * _GB, "RTX 6000 Ada", 200.0),
    (r"L40S", "L40S", "ada", 4, 48 * _GB, "L40S", 200.0),
    (r"L40\b", "L40", "ada", 4, 48 * _GB, "L40", 200.0),
    (r"\bL20\b", "L20", "ada", 4, 48 * _GB, "L20", 200.0),
    (r"RTX 4090", "RTX 4090", "ada", 4, 24 * _GB, "RTX 4090", 100.0),
    (r"RTX 5090", "RTX 5090", "blackwell", 5, 32 * _GB, "RTX 5090", 100.0),
    (r"\bL4\b", "L4", "ada", 4, 24 * _GB, "L4", 100.0),
    (r"A6000", "RTX A6000", "ga10x", 4, 48 * _GB, "A6000", 100.0),
    (r"\bA40\b", "A40", "ga10x", 4, 48 * _GB, "A40", 100.0),
    (r"A5000", "RTX A5000", "ga10x", 4, 24 * _GB, "A5000", 100.0),
    (r"3090", "RTX 3090", "ga10x", 4, 24 * _GB, "RTX 3090", 100.0),
    (r"A10G", "A10G", "ga10x", 4, 24 * _GB, "A10G", 100.0),
    (r"\bA10\b", "A10", "ga10x", 4, 24 * _GB, "A10", 100.0),
    (r"1080|1070|TITAN X", "GeForce 10 series", "pascal", 3, 11 * _GB, "GTX 1080", 100.0),
    (r"MI325X", "MI325X", "cdna", 5, 256 * _GB, "MI325X", 400.0),
    (r"MI300X", "MI300X", "cdna", 5, 192 * _GB, "MI300X", 400.0),
    (r"MI300A", "MI300A", "cdna", 5, 128 * _GB, "MI300A", 200.0),
    # per GCD, the device ROCm and torch enumerate: an MI250/MI250X OAM is two GCDs of 64 GB each (AMD Instinct
    # system-acceptance guide, MI250: "each GCD ... enumerated as an independent GPU by ROCm tools", 128 GB per OAM)
    (r"MI250X", "MI250X", "cdna", 4, 64 * _GB, "MI250X", 200.0),
    (r"MI250", "MI250", "cdna", 4, 64 * _GB, "MI250", 200.0),
    (r"MI210", "MI210", "cdna", 4, 64 * _GB, "MI210", 200.0),
)


def known_gpu_names() -> list[str]:
    """The GPU families the table knows (for messages that list close matches)."""
    return [row[1] for row in _TABLE]


_SIZE_IN_NAME = re.compile(r"(\d{2,3})\s?GB", re.IGNORECASE)
#: Families whose device name carries the superchip's memory, not the GPU's: nvidia-smi names the GH200 with 96 GB
#: of HBM3 "NVIDIA GH200 480GB" (its Grace CPU's 480 GB of LPDDR5X) and the one with 144 GB of HBM3e "NVIDIA GH200
#: 144G HBM3e" (NVIDIA GH200 Grace Hopper Superchip data sheet: 96 GB HBM3 or 144 GB HBM3e beside 480 GB LPDDR5X).
_GPU_MEMORY_FROM_NAME: dict[str, tuple[tuple[str, int], ...]] = {"GH200": ((r"144\s?G|624\s?GB", 144 * _GB),)}


def spec_for_name(name: str | None) -> GpuSpec | None:
    """The spec of a GPU from its device name (``NVIDIA H100 80GB HBM3``), or None when unknown."""
    if not name:
        return None
    for pattern, family, arch, gen, memory, ref, nic in _TABLE:
        if re.search(pattern, name):
            size = _SIZE_IN_NAME.search(name)
            if family in _GPU_MEMORY_FROM_NAME:
                memory = next((m for p, m in _GPU_MEMORY_FROM_NAME[family] if re.search(p, name)), memory)
            elif size and 8 <= int(size.group(1)) <= 512:
                memory = int(size.group(1)) * _GB
            memory = datasheet_capacity_bytes(memory)
            # No NVLink on GeForce 10 boards joined by PCIe: the arch still sets the link rate if bridged.
            return GpuSpec(family=family, arch=arch, pcie_generation=gen, memory_bytes=memory,
                           reference_name=ref, nic_gbps=nic)
    return None


#: Share of a GPU's binary gigabytes that CUDA never gives a process: the total PyTorch reports (its OOM message's
#: "total capacity", ``torch.cuda.get_device_properties().total_memory``) is below the datasheet's ``n x 2^30``.
#: Published totals over the datasheet's: A100 80GB 79.25 GiB (levihsu/OOTDiffusion#235), A100 40GB 39.50
#: (TianheWu/CoSeR#10), V100 32GB 31.74 (haotian-liu/LLaVA#812), V100 16GB 15.78 (16160 MiB, transformers'
#: perf_train_gpu_one page), TITAN RTX 23.65 (huggingface.co/blog/pytorch-fsdp), RTX 3090 23.70
#: (huggingface.co/blog/zero-deepspeed-fairscale): 0.81-1.46% less, the median 1.25%.
DRIVER_RESERVED_FRACTION = 0.0125


def datasheet_capacity_bytes(memory: int | None) -> int | None:
    """A datasheet's "80 GB" as the bytes a process can have of it: binary gigabytes (an 80 GB A100 reports 81920 MiB
    total, a 24 GB RTX 4090 24564 MiB, a 141 GB H200 143771 MiB in nvidia-smi), ``n x 10^9`` read as ``n x 2^30``, less
    what CUDA keeps (:data:`DRIVER_RESERVED_FRACTION`): the total PyTorch's out-of-memory message states."""
    return None if memory is None else int(memory // _GB * _GIB * (1 - DRIVER_RESERVED_FRACTION))


def _signature_spec(family: str, arch: str, gen: int, memory: int | None, ref: str | None, nic: float, why: str) -> GpuSpec:
    memory = datasheet_capacity_bytes(memory)
    return GpuSpec(family=family, arch=arch, pcie_generation=gen, memory_bytes=memory, reference_name=ref,
                   nic_gbps=nic, note=f"GPU model not named in the topology; {why}")


def infer_spec(doc: dict[str, Any]) -> GpuSpec:
    """The GPU spec of a topology.json document: from a GPU name, else from the NVLink signature.

    Signatures (what the NV# counts of ``nvidia-smi topo -m`` can only mean):
    all pairs ``NV18`` → Hopper HGX (H100/H200, 18 NVLink4); all pairs ``NV8`` on a switch →
    H800/A800 (8 links, NVLink4 rate assumed); all pairs ``NV12`` → A100 HGX; ``NV1``/``NV2``
    not all pairs → DGX-1 (V100 when some pair has 2 links, P100 otherwise); ``NV12`` pairs →
    H100 NVL or A100 PCIe bridges (Ampere assumed: the lower PCIe generation); ``NV4`` pairs →
    GA102 bridges (A6000/A40/3090); ``XGMI`` → AMD Instinct; no NVLink → a PCIe GPU of unknown
    model (PCIe Gen4 assumed).
    """
    for gpu in doc.get("gpus", []):
        spec = spec_for_name(gpu.get("name"))
        if spec is not None:
            return spec
    links = doc.get("links", [])
    counts = sorted({int(link.get("nvlinks") or 0) for link in links if (link.get("nvlinks") or 0) > 0})
    codes = {str(link.get("code", "")) for link in links}
    fabric = doc.get("fabric")
    if any(code == "XGMI" for code in codes):
        return _signature_spec("AMD Instinct (XGMI)", "cdna", 5, None, None, 200.0, "XGMI links: AMD Instinct assumed")
    if not counts:
        return _signature_spec("PCIe GPU", "unknown", 4, None, None, 100.0, "no NVLink: a PCIe Gen4 GPU assumed")
    top = counts[-1]
    if fabric == "nvswitch" or (fabric == "nvlink_mesh" and top >= 12):
        if top >= 18:
            return _signature_spec("Hopper HGX (H100/H200 class)", "hopper", 5, 80 * _GB, "H100", 400.0, "NV18 on a switch: Hopper assumed")
        if top >= 12:
            return _signature_spec("A100 HGX", "ampere", 4, 80 * _GB, "A100", 200.0, "NV12 on a switch: A100 assumed")
        return _signature_spec(f"{top}-link NVSwitch board (H800/A800 class)", "ampere", 4, 80 * _GB, "A100", 200.0,
                               f"NV{top} on a switch: an export-limited board assumed, NVLink3 rate")
    if fabric == "nvlink_mesh" and top == 4:
        return _signature_spec("A100 4-GPU board", "ampere", 4, 80 * _GB, "A100", 200.0, "NV4 full mesh of 4: A100 HGX-4 assumed")
    if top <= 2 and fabric in ("nvlink_partial", "nvlink_mesh"):
        if top == 2:
            return _signature_spec("V100 (DGX-1 class)", "volta", 3, 32 * _GB, "V100", 100.0, "NV1/NV2 hybrid mesh: V100 assumed")
        return _signature_spec("P100 (DGX-1 class)", "pascal", 3, 16 * _GB, None, 100.0, "NV1 hybrid mesh: P100 assumed")
    if top >= 12:
        return _signature_spec("NVLink-bridged pairs (H100 NVL / A100 PCIe class)", "ampere", 4, 80 * _GB, "A100", 200.0,
                               "NV12 bridges: A100 PCIe assumed (NVLink3 rate, PCIe Gen4)")
    if top == 4 and fabric == "nvlink_islands":
        return _signature_spec("GA102 (A6000/A40/3090 class)", "ga10x", 4, 48 * _GB, None, 100.0, "NV4 bridges: GA102 assumed")
    return _signature_spec(f"NVLink GPU ({top} links)", "unknown", 4, None, None, 100.0, f"NV{top}: NVLink3 rate assumed")


def cpu_inter_socket(cpu: dict[str, Any], pcie_generation: int) -> tuple[float, bool, str]:
    """(inter-socket GB/s, whether the CPU is Intel, how it was chosen) for GPU traffic across sockets.

    From the CPU model name when the topology has one; otherwise the CPU contemporary with the
    GPU's PCIe generation is assumed (Gen3: Skylake, Gen4: AMD Zen2, Gen5+: Sapphire Rapids).
    """
    model = str(cpu.get("model") or "")
    if "EPYC" in model or "AMD" in model:
        digits = re.search(r"\b([79])\d{2}(\d)\b", model)
        gen = int(digits.group(2)) if digits else 2
        key = "amd_zen12" if gen <= 2 else "amd_zen34" if gen <= 4 else "amd_zen5"
        return INTER_SOCKET_GBPS[key], False, f"{key} ({model})"
    if "Xeon" in model or "Intel" in model:
        number = re.search(r"\b[PGS]?\s?(\d)(\d)\d{2}", model)
        series = int(number.group(2)) if number and number.group(1) in "3456789" else 1
        key = {4: "intel_spr", 5: "intel_emr", 6: "intel_emr"}.get(series, "intel_skl")
        if re.search(r"v[234]\b", model):
            key = "intel_bdw"
        return INTER_SOCKET_GBPS[key], True, f"{key} ({model})"
    if pcie_generation <= 3:
        return INTER_SOCKET_GBPS["intel_skl"], True, "CPU not named: Skylake assumed (PCIe Gen3 era)"
    if pcie_generation == 4:
        return INTER_SOCKET_GBPS["amd_zen12"], False, "CPU not named: AMD Zen2 assumed (PCIe Gen4 era)"
    return INTER_SOCKET_GBPS["intel_spr"], True, "CPU not named: Sapphire Rapids assumed (PCIe Gen5 era)"
