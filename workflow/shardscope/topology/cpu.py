"""Probe a machine without GPUs: sockets, NUMA nodes and cores from the OS.

Linux exposes NUMA nodes under ``/sys/devices/system/node`` and sockets through
``/proc/cpuinfo``; both are read from a root directory so tests can point at recorded trees.
:func:`cpu_raw_text` returns what was read (and ``lscpu``'s view) for provenance.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from shardscope.topology.model import NumaNode


def parse_cpu_list(text: str) -> list[int]:
    """Expand a kernel CPU list such as ``0-3,8-11`` into CPU numbers."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def probe_numa_nodes(root: str | Path = "/") -> list[NumaNode]:
    """NUMA nodes with their CPU lists; one node holding every CPU where sysfs has none."""
    node_dir = Path(root) / "sys/devices/system/node"
    nodes: list[NumaNode] = []
    if node_dir.is_dir():
        for entry in sorted(node_dir.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
            cpulist = (entry / "cpulist").read_text().strip() if (entry / "cpulist").exists() else ""
            cpus = parse_cpu_list(cpulist)
            if cpus:
                nodes.append(NumaNode(id=int(entry.name[4:]), cpus=cpulist, cores=len(cpus)))
    if not nodes:
        count = os.cpu_count() or 1
        nodes.append(NumaNode(id=0, cpus=f"0-{count - 1}", cores=count))
    return nodes


def probe_cpu(root: str | Path = "/") -> dict[str, object]:
    """Sockets, physical cores, logical CPUs and the model name of this machine's CPUs."""
    cpuinfo = Path(root) / "proc/cpuinfo"
    sockets: set[str] = set()
    cores: set[tuple[str, str]] = set()
    logical = 0
    model = platform.processor() or None
    if cpuinfo.exists():
        physical_id = "0"
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = (s.strip() for s in line.partition(":"))
            if key == "processor":
                logical += 1
            elif key == "physical id":
                physical_id = value
                sockets.add(value)
            elif key == "core id":
                cores.add((physical_id, value))
            elif key == "model name" and value:
                model = value
    logical = logical or (os.cpu_count() or 1)
    return {
        "model": model,
        "sockets": max(len(sockets), 1),
        "physical_cores": len(cores) or logical,
        "logical_cpus": logical,
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else logical,
    }


def cpu_count_from_list(text: str | None) -> int:
    """Number of CPUs in an affinity string such as ``0-63,128-191`` (0 when unknown)."""
    if not text or not re.fullmatch(r"[0-9,\-\s]+", text):
        return 0
    return len(parse_cpu_list(text.replace(" ", "")))


#: Names of the raw files the CPU probe keeps beside topology.json.
CPUINFO_RAW = "proc-cpuinfo.txt"
NODES_RAW = "sys-node-cpulists.txt"
LSCPU_RAW = "lscpu.txt"
LSCPU_TIMEOUT_S = 20


def node_cpulists_text(root: str | Path = "/") -> str:
    """``nodeN: <cpulist>`` per NUMA node in sysfs, as read, or a line saying sysfs has none."""
    node_dir = Path(root) / "sys/devices/system/node"
    entries = sorted(node_dir.glob("node[0-9]*"), key=lambda p: int(p.name[4:])) if node_dir.is_dir() else []
    lines = []
    for entry in entries:
        try:
            lines.append(f"{entry.name}: {(entry / 'cpulist').read_text().strip()}")
        except OSError:
            lines.append(f"{entry.name}: (no cpulist)")
    return "\n".join(lines) + "\n" if lines else f"no NUMA nodes under {node_dir}\n"


def _lscpu() -> str | None:
    """``lscpu`` output when the command exists and succeeds."""
    if shutil.which("lscpu") is None:
        return None
    try:
        done = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=LSCPU_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 and done.stdout.strip() else None


def cpu_raw_text(root: str | Path = "/") -> dict[str, str]:
    """The text the CPU probe read (sysfs node CPU lists, /proc/cpuinfo) and ``lscpu``, by file name.

    ``lscpu`` describes the running machine, so it is only run when ``root`` is ``/``.
    """
    raw = {NODES_RAW: node_cpulists_text(root)}
    cpuinfo = Path(root) / "proc/cpuinfo"
    if cpuinfo.is_file():
        raw[CPUINFO_RAW] = cpuinfo.read_text(errors="replace")
    lscpu = _lscpu() if Path(root).resolve() == Path("/") else None
    if lscpu is not None:
        raw[LSCPU_RAW] = lscpu
    return raw
