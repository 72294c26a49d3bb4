"""``shardscope topology detect``: probe this machine and build its :class:`Topology`.

Order of probes: NVIDIA (NVML, with ``nvidia-smi topo -m`` kept verbatim for provenance),
then AMD (``rocm-smi --showtopo``), then the OS alone (fabric ``cpu``). Raw probe text is
returned beside the topology so the caller can store it next to ``topology.json``; the OS's
CPU and NUMA text (``/proc/cpuinfo``, sysfs node CPU lists, ``lscpu``) is always among it.
"""

from __future__ import annotations

import datetime as _dt
import socket
from dataclasses import dataclass

from shardscope.topology.cpu import cpu_raw_text, probe_cpu, probe_numa_nodes
from shardscope.topology.model import Topology


@dataclass
class Detection:
    """A probed topology and the raw text of each probe that contributed to it."""

    topology: Topology
    raw: dict[str, str]


def _source(method: str) -> dict[str, str]:
    """How and where the topology was obtained: probe method, host name, UTC time."""
    return {
        "method": method,
        "host": socket.gethostname(),
        "probed_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def detect_cpu_only(root: str = "/") -> Detection:
    """Topology of a machine without accelerators: fabric ``cpu``, with NUMA nodes and cores."""
    topology = Topology(
        gpus=[],
        links=[],
        numa_nodes=probe_numa_nodes(root),
        source=_source("os"),
        cpu=probe_cpu(root),
        accelerator="none",
    )
    return Detection(topology=topology, raw=cpu_raw_text(root))


def detect() -> Detection:
    """Probe this machine, trying each accelerator probe before falling back to the OS."""
    from shardscope.topology import gpu_probes

    for probe in gpu_probes.PROBES:
        found = probe()
        if found is not None:
            topology, raw = found
            topology.source = {**_source(topology.source.get("method", "gpu")), **topology.source}
            topology.cpu = topology.cpu or probe_cpu()
            return Detection(topology=topology, raw={**cpu_raw_text(), **raw})
    return detect_cpu_only()
