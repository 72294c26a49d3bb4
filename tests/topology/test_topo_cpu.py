"""The CPU-only probe: sockets, NUMA nodes and cores from a recorded /proc and /sys tree, raw text kept."""

from __future__ import annotations

from pathlib import Path

from shardscope.topology.cpu import (
    CPUINFO_RAW,
    LSCPU_RAW,
    NODES_RAW,
    cpu_raw_text,
    parse_cpu_list,
    probe_cpu,
    probe_numa_nodes,
)
from shardscope.topology.detect import detect_cpu_only
from shardscope.topology.document import validate_topology


def _cpuinfo(sockets: int, cores: int, threads: int) -> str:
    """/proc/cpuinfo of a machine with this many sockets, cores per socket and threads per core."""
    blocks = []
    processor = 0
    for thread in range(threads):
        for socket in range(sockets):
            for core in range(cores):
                blocks.append(
                    f"processor\t: {processor}\nmodel name\t: Test CPU 9000\nphysical id\t: {socket}\n"
                    f"core id\t\t: {core}\n"
                )
                processor += 1
    return "\n".join(blocks) + "\n"


def _machine(root: Path, nodes: dict[int, str], cpuinfo: str) -> Path:
    for node, cpulist in nodes.items():
        folder = root / f"sys/devices/system/node/node{node}"
        folder.mkdir(parents=True)
        (folder / "cpulist").write_text(cpulist + "\n")
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc/cpuinfo").write_text(cpuinfo)
    return root


def test_parse_cpu_list() -> None:
    assert parse_cpu_list("0-3,8-9,12") == [0, 1, 2, 3, 8, 9, 12]
    assert parse_cpu_list("") == []


def test_two_socket_machine(tmp_path: Path) -> None:
    root = _machine(tmp_path, {0: "0-7,16-23", 1: "8-15,24-31"}, _cpuinfo(sockets=2, cores=8, threads=2))
    nodes = probe_numa_nodes(root)
    assert [(n.id, n.cpus, n.cores) for n in nodes] == [(0, "0-7,16-23", 16), (1, "8-15,24-31", 16)]
    cpu = probe_cpu(root)
    assert (cpu["sockets"], cpu["physical_cores"], cpu["logical_cpus"], cpu["model"]) == (2, 16, 32, "Test CPU 9000")


def test_detect_cpu_only_keeps_what_it_read(tmp_path: Path) -> None:
    cpuinfo = _cpuinfo(sockets=2, cores=4, threads=1)
    root = _machine(tmp_path, {0: "0-3", 1: "4-7"}, cpuinfo)
    detection = detect_cpu_only(str(root))
    doc = validate_topology(detection.topology.to_dict(), "cpu")
    assert doc["fabric"] == "cpu" and doc["gpu_count"] == 0 and doc["islands"] == []
    assert doc["cpu"]["sockets"] == 2 and [n["cores"] for n in doc["numa_nodes"]] == [4, 4]
    assert detection.raw[NODES_RAW] == "node0: 0-3\nnode1: 4-7\n"
    assert detection.raw[CPUINFO_RAW] == cpuinfo
    assert LSCPU_RAW not in detection.raw  # lscpu describes the running machine, not a recorded tree


def test_machine_without_numa_in_sysfs(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    raw = cpu_raw_text(tmp_path)
    assert raw[NODES_RAW].startswith("no NUMA nodes under")
    assert CPUINFO_RAW not in raw
    nodes = probe_numa_nodes(tmp_path)
    assert len(nodes) == 1 and nodes[0].cores is not None and nodes[0].cores >= 1


def test_this_machine_keeps_raw_text() -> None:
    raw = detect_cpu_only().raw
    assert raw[NODES_RAW].strip()
    assert CPUINFO_RAW in raw or not Path("/proc/cpuinfo").exists()
