"""Warnings about what a topology view may hide: the PCIe-only matrix, a flattened VM view, a slice.

A topology is only as complete as the view it was read from. Three views are common and
look like real, simpler machines; each gets a warning in ``topology.json`` (``warnings``),
printed by ``topology parse``/``show`` and by the commands that model or advise on it:

- ``nvidia-smi topo -mp`` prints PCIe paths only: NVLinks, if any, are hidden;
- a VM or container that flattens the host's PCIe tree shows every GPU pair as ``SYS`` with one
  CPU affinity shared by all GPUs: NVLinks and PCIe switches may be hidden behind it;
- a slice of a bigger NVSwitch node (a VM, a Kubernetes pod, ``CUDA_VISIBLE_DEVICES``): fewer
  GPUs than an NVSwitch baseboard holds, each linked to the others through the switch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shardscope.topology.model import Gpu, Link

#: GPUs on an HGX/DGX NVSwitch baseboard; fewer with every pair switched means a slice.
NVSWITCH_BOARD_GPUS = 8
#: Names of GPUs whose nodes hold fewer than 8 GPUs on NVSwitch by design (GB200/GB300 trays hold 4).
_SMALL_NVSWITCH_NODES = re.compile(r"GB[23]00")

PCIE_ONLY_WARNING = (
    "read from `nvidia-smi topo -mp` (PCIe paths only): NVLinks, if any, are hidden, so this machine may be "
    "modeled as PCIe-only although it is not; save `nvidia-smi topo -m` (without -p) for the full view"
)
FLATTENED_WARNING = (
    "every GPU pair is SYS and all GPUs share one CPU affinity, which is how a VM or container that hides the "
    "host's PCIe tree shows a machine: NVLinks and PCIe switches may be hidden; check `nvidia-smi nvlink --status` "
    "and save `nvidia-smi topo -m` on the host for the full view"
)


def slice_warning(count: int) -> str:
    """The warning for ``count`` GPUs joined through NVSwitch: fewer than a baseboard holds."""
    return (f"{count} GPU(s) joined through NVSwitch, fewer than the {NVSWITCH_BOARD_GPUS} of an NVSwitch baseboard: "
            "this is likely a slice of a bigger node (a VM, a Kubernetes pod or CUDA_VISIBLE_DEVICES), and the "
            "other GPUs and their traffic are not seen")


def visible_devices_warning(value: str) -> str:
    """The warning for a probe run with ``CUDA_VISIBLE_DEVICES`` set: the topology is that slice."""
    return (f"probed with CUDA_VISIBLE_DEVICES={value}: the topology is that slice of the node; "
            "unset it to probe every GPU")


def view_warnings(gpus: Sequence[Gpu], links: Sequence[Link], fabric: str, pcie_only_view: bool) -> list[str]:
    """The warnings this view calls for (see the module docstring), in a fixed order."""
    warnings = []
    if pcie_only_view:
        warnings.append(PCIE_ONLY_WARNING)
    if _flattened(gpus, links):
        warnings.append(FLATTENED_WARNING)
    names = " ".join(g.name or "" for g in gpus)
    if fabric == "nvswitch" and 1 < len(gpus) < NVSWITCH_BOARD_GPUS and not _SMALL_NVSWITCH_NODES.search(names):
        warnings.append(slice_warning(len(gpus)))
    return warnings


def _flattened(gpus: Sequence[Gpu], links: Sequence[Link]) -> bool:
    """Every GPU pair ``SYS`` and one CPU affinity (or none) shared by all GPUs, on two or more GPUs."""
    pairs = len(gpus) * (len(gpus) - 1) // 2
    if len(gpus) < 2 or len(links) != pairs or any(link.code != "SYS" for link in links):
        return False
    affinities = {g.cpu_affinity for g in gpus}
    numa = {g.numa_node for g in gpus}
    return len(affinities) == 1 and len(numa) == 1
