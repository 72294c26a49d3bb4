"""topology.json documents of well-known machines, for predictions on machines you do not have.

``--topology preset:NAME`` uses one. Each is built from the vendor's published layout (GPUs,
NVLinks per GPU, sockets, NICs per GPU), not from a probe; the document says so in ``source``.
"""

from __future__ import annotations

import itertools
from typing import Any

from shardscope.errors import UserError


def synthetic_topology(gpu_name: str, gpus: int = 8, nvlinks: int = 0, layout: str = "switch", sockets: int = 2,
                       pcie_code: str = "NODE", rail_nics: int = 0, cpu_model: str | None = None,
                       memory_bytes: int | None = None, label: str = "synthetic", nic_gbps: float | None = None,
                       nic_kind: str | None = None) -> dict[str, Any]:
    """A topology.json document: ``layout`` ``switch`` (every pair NV{nvlinks}), ``pairs`` (GPUs 2k, 2k+1
    bridged with NV{nvlinks}) or ``pcie`` (no NVLink); GPUs split evenly over ``sockets``, joined
    by ``pcie_code`` inside a socket and ``SYS`` across; ``rail_nics`` NICs spread over the GPUs,
    of line rate ``nic_gbps`` (Gb/s) and class ``nic_kind`` (``ib``, ``roce``, ``efa``, ``tcp``) when given
    (a ``network`` block the cost model reads; without them the GPU generation's usual rate)."""
    if gpus < 1 or sockets < 1 or layout not in ("switch", "pairs", "pcie"):
        raise ValueError(f"bad synthetic machine: gpus={gpus}, sockets={sockets}, layout={layout!r}")
    per_socket = max(1, -(-gpus // sockets))
    socket_of = {g: g // per_socket for g in range(gpus)}
    links = []
    for a, b in itertools.combinations(range(gpus), 2):
        linked = nvlinks > 0 and (layout == "switch" or (layout == "pairs" and a // 2 == b // 2))
        code = f"NV{nvlinks}" if linked else (pcie_code if socket_of[a] == socket_of[b] else "SYS")
        links.append({"a": a, "b": b, "code": code, "nvlinks": nvlinks if linked else 0})
    nics = [{"name": f"NIC{i}", "device": f"mlx5_{i}", "nearest_gpus": [i * gpus // rail_nics], "nearest_code": "PXB"}
            for i in range(rail_nics)] if rail_nics else []
    network = {"nics": rail_nics, "gbps": nic_gbps, "kind": nic_kind or "ib"} if rail_nics and nic_gbps else None
    doc: dict[str, Any] = {
        "schema": "shardscope.topology/1",
        "gpu_count": gpus,
        "gpus": [{"index": g, "name": gpu_name, "memory_bytes": memory_bytes, "numa_node": socket_of[g]} for g in range(gpus)],
        "links": links,
        "numa_nodes": [{"id": s} for s in range(min(sockets, gpus))],
        "nics": nics,
        "cpu": {"model": cpu_model} if cpu_model else {},
        "source": {"method": "preset", "label": label},
        "notes": [f"synthetic topology ({label}): built from the published layout, not probed"],
    }
    if network:
        doc["network"] = network
    return doc


_SPR = "Intel(R) Xeon(R) Platinum 8480C"

#: Name -> (description with its source, keyword arguments of :func:`synthetic_topology`).
#: NIC counts and rates are the vendors' published figures (pages named in each description);
#: where a cloud gives several NICs per GPU (AWS p5: 32 x 100 Gb/s EFA for 8 GPUs) they are
#: modeled as one NIC per GPU of the summed rate (4 x 100 = 400 Gb/s), the traffic NCCL gives each GPU.
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "hgx-h100": ("8x H100 SXM on NVSwitch (18 NVLink4 each), 8x 400G NICs",
                 {"gpu_name": "NVIDIA H100 80GB HBM3", "nvlinks": 18, "rail_nics": 8, "cpu_model": _SPR,
                  "nic_gbps": 400.0}),
    "hgx-h200": ("8x H200 on NVSwitch (18 NVLink4 each), 8x 400G NICs",
                 {"gpu_name": "NVIDIA H200", "nvlinks": 18, "rail_nics": 8, "cpu_model": _SPR, "nic_gbps": 400.0}),
    "hgx-h800": ("8x H800 on NVSwitch (8 NVLink4 each)", {"gpu_name": "NVIDIA H800", "nvlinks": 8, "rail_nics": 8}),
    "dgx-a100": ("NVIDIA DGX A100: 8x A100 SXM 80GB on NVSwitch (12 NVLink3 each), 8x 200 Gb/s HDR InfiniBand "
                 "(DGX A100 datasheet)",
                 {"gpu_name": "NVIDIA A100-SXM4-80GB", "nvlinks": 12, "rail_nics": 8, "cpu_model": "AMD EPYC 7742 64-Core Processor",
                  "nic_gbps": 200.0, "nic_kind": "ib"}),
    "dgx-h100": ("NVIDIA DGX H100: 8x H100 SXM on NVSwitch (18 NVLink4), 8x 400 Gb/s ConnectX-7 NDR (DGX H100 datasheet)",
                 {"gpu_name": "NVIDIA H100 80GB HBM3", "nvlinks": 18, "rail_nics": 8, "cpu_model": _SPR,
                  "nic_gbps": 400.0, "nic_kind": "ib"}),
    "dgx-b200": ("NVIDIA DGX B200: 8x B200 on NVSwitch (18 NVLink5), 8x 400 Gb/s ConnectX-7 (DGX B200 datasheet)",
                 {"gpu_name": "NVIDIA B200", "nvlinks": 18, "rail_nics": 8, "nic_gbps": 400.0, "nic_kind": "ib"}),
    "hgx-b200": ("8x B200 on NVSwitch (18 NVLink5 each), 8x 400G NICs",
                 {"gpu_name": "NVIDIA B200", "nvlinks": 18, "rail_nics": 8, "nic_gbps": 400.0}),
    "gb200-nvl72-tray": ("one GB200 NVL72 compute tray: 4x GB200 (186 GB HBM3e each) on the rack's NVLink5 switch "
                         "(18 links each), 4x 400 Gb/s ConnectX-7 (NVIDIA GB200 NVL72 page)",
                         {"gpu_name": "NVIDIA GB200", "gpus": 4, "nvlinks": 18, "sockets": 2, "rail_nics": 4,
                          "nic_gbps": 400.0, "nic_kind": "ib"}),
    "aws-p4d": ("AWS p4d.24xlarge: 8x A100 40GB on NVSwitch, 4x 100 Gb/s EFA (400 Gbps; aws.amazon.com/ec2/instance-types/p4/)",
                {"gpu_name": "NVIDIA A100-SXM4-40GB", "nvlinks": 12, "rail_nics": 4, "cpu_model": "Intel(R) Xeon(R) Platinum 8275CL",
                 "nic_gbps": 100.0, "nic_kind": "efa"}),
    "aws-p4de": ("AWS p4de.24xlarge: 8x A100 80GB on NVSwitch, 4x 100 Gb/s EFA (aws.amazon.com/ec2/instance-types/p4/)",
                 {"gpu_name": "NVIDIA A100-SXM4-80GB", "nvlinks": 12, "rail_nics": 4, "cpu_model": "Intel(R) Xeon(R) Platinum 8275CL",
                  "nic_gbps": 100.0, "nic_kind": "efa"}),
    "aws-p5": ("AWS p5.48xlarge: 8x H100 on NVSwitch, 32x 100 Gb/s EFA = 3200 Gbps (aws.amazon.com/ec2/instance-types/p5/), "
               "modeled as 400 Gb/s per GPU",
               {"gpu_name": "NVIDIA H100 80GB HBM3", "nvlinks": 18, "rail_nics": 8, "cpu_model": "AMD EPYC 7R13 Processor",
                "nic_gbps": 400.0, "nic_kind": "efa"}),
    "aws-p5e": ("AWS p5e.48xlarge: 8x H200 on NVSwitch, 32x 100 Gb/s EFA = 3200 Gbps (aws.amazon.com/ec2/instance-types/p5/), "
                "modeled as 400 Gb/s per GPU",
                {"gpu_name": "NVIDIA H200", "nvlinks": 18, "rail_nics": 8, "cpu_model": "AMD EPYC 7R13 Processor",
                 "nic_gbps": 400.0, "nic_kind": "efa"}),
    "azure-nd-a100-v4": ("Azure ND96asr A100 v4: 8x A100 40GB on NVSwitch, 8x 200 Gb/s HDR InfiniBand "
                         "(learn.microsoft.com/azure/virtual-machines/nda100-v4-series)",
                         {"gpu_name": "NVIDIA A100-SXM4-40GB", "nvlinks": 12, "rail_nics": 8, "cpu_model": "AMD EPYC 7V12 64-Core Processor",
                          "nic_gbps": 200.0, "nic_kind": "ib"}),
    "azure-nd-h100-v5": ("Azure ND H100 v5: 8x H100 on NVSwitch, 8x 400 Gb/s NDR InfiniBand "
                         "(learn.microsoft.com/azure/virtual-machines/nd-h100-v5-series)",
                         {"gpu_name": "NVIDIA H100 80GB HBM3", "nvlinks": 18, "rail_nics": 8, "cpu_model": _SPR,
                          "nic_gbps": 400.0, "nic_kind": "ib"}),
    "azure-nd-h200-v5": ("Azure ND H200 v5: 8x H200 on NVSwitch, 8x 400 Gb/s NDR InfiniBand "
                         "(learn.microsoft.com/azure/virtual-machines/nd-h200-v5-series)",
                         {"gpu_name": "NVIDIA H200", "nvlinks": 18, "rail_nics": 8, "cpu_model": _SPR,
                          "nic_gbps": 400.0, "nic_kind": "ib"}),
    "gcp-a3": ("GCP a3-highgpu-8g: 8x H100 on NVSwitch, 4x 200 Gb/s GPU NICs (GPUDirect-TCPX; "
               "cloud.google.com/compute/docs/gpus#a3-series)",
               {"gpu_name": "NVIDIA H100 80GB HBM3", "nvlinks": 18, "rail_nics": 4, "cpu_model": _SPR,
                "nic_gbps": 200.0, "nic_kind": "roce"}),
    "gcp-a3-mega": ("GCP a3-megagpu-8g: 8x H100 on NVSwitch, 8x 200 Gb/s GPU NICs (GPUDirect-TCPXO; "
                    "cloud.google.com/compute/docs/gpus#a3-series)",
                    {"gpu_name": "NVIDIA H100 80GB HBM3", "nvlinks": 18, "rail_nics": 8, "cpu_model": _SPR,
                     "nic_gbps": 200.0, "nic_kind": "roce"}),
    "h100-nvl-pairs": ("8x H100 NVL in bridged pairs (NV12), two sockets",
                       {"gpu_name": "NVIDIA H100 NVL", "nvlinks": 12, "layout": "pairs", "cpu_model": _SPR}),
    "pcie-l40s": ("8x L40S on PCIe Gen4, four per socket", {"gpu_name": "NVIDIA L40S", "layout": "pcie", "cpu_model": "AMD EPYC 9654 96-Core Processor"}),
}


def preset(name: str) -> dict[str, Any]:
    """The topology.json document of a named preset; UserError lists the close matches when it is unknown."""
    if name not in PRESETS:
        import difflib

        close = difflib.get_close_matches(name, list(PRESETS), n=3, cutoff=0.4)
        hint = f"close matches: {', '.join(close)}" if close else f"known: {', '.join(PRESETS)}"
        raise UserError(f"unknown machine preset {name!r} ({hint})")
    description, kwargs = PRESETS[name]
    return synthetic_topology(label=f"preset:{name} ({description})", **kwargs)
