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
                       memory_bytes: int | None = None, label: str = "synthetic") -> dict[str, Any]:
    """A topology.json document: ``layout`` ``switch`` (every pair NV{nvlinks}), ``pairs`` (GPUs 2k, 2k+1
    bridged with NV{nvlinks}) or ``pcie`` (no NVLink); GPUs split evenly over ``sockets``, joined
    by ``pcie_code`` inside a socket and ``SYS`` across; ``rail_nics`` NICs spread over the GPUs."""
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
    return {
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


#: Name -> (description, keyword arguments of :func:`synthetic_topology`).
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "hgx-h100": ("8x H100 SXM on NVSwitch (18 NVLink4 each), 8x 400G NICs",
                 {"gpu_name": "NVIDIA H100 80GB HBM3", "nvlinks": 18, "rail_nics": 8, "cpu_model": "Intel(R) Xeon(R) Platinum 8480C"}),
    "hgx-h200": ("8x H200 on NVSwitch (18 NVLink4 each), 8x 400G NICs",
                 {"gpu_name": "NVIDIA H200", "nvlinks": 18, "rail_nics": 8, "cpu_model": "Intel(R) Xeon(R) Platinum 8480C"}),
    "hgx-h800": ("8x H800 on NVSwitch (8 NVLink4 each)", {"gpu_name": "NVIDIA H800", "nvlinks": 8, "rail_nics": 8}),
    "dgx-a100": ("8x A100 SXM on NVSwitch (12 NVLink3 each), 8x 200G NICs",
                 {"gpu_name": "NVIDIA A100-SXM4-80GB", "nvlinks": 12, "rail_nics": 8, "cpu_model": "AMD EPYC 7742 64-Core Processor"}),
    "hgx-b200": ("8x B200 on NVSwitch (18 NVLink5 each), 8x 400G NICs", {"gpu_name": "NVIDIA B200", "nvlinks": 18, "rail_nics": 8}),
    "h100-nvl-pairs": ("8x H100 NVL in bridged pairs (NV12), two sockets",
                       {"gpu_name": "NVIDIA H100 NVL", "nvlinks": 12, "layout": "pairs", "cpu_model": "Intel(R) Xeon(R) Platinum 8480C"}),
    "pcie-l40s": ("8x L40S on PCIe Gen4, four per socket", {"gpu_name": "NVIDIA L40S", "layout": "pcie", "cpu_model": "AMD EPYC 9654 96-Core Processor"}),
}


def preset(name: str) -> dict[str, Any]:
    """The topology.json document of a named preset; UserError lists the names when it is unknown."""
    if name not in PRESETS:
        raise UserError(f"unknown machine preset {name!r}; expected one of {', '.join(PRESETS)}")
    description, kwargs = PRESETS[name]
    return synthetic_topology(label=f"preset:{name} ({description})", **kwargs)
