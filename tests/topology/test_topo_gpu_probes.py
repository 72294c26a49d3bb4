"""GPU probes fed recorded NVML answers and command output (this machine has no GPU)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from shardscope.topology import detect, gpu_probes
from shardscope.topology.gpu_probes import (
    NVIDIA_SMI_RAW,
    NVML_RAW,
    ROCM_SMI_RAW,
    nvidia_topology,
    probe_amd,
    probe_nvidia,
    read_nvml,
    run_tool,
)
from shardscope.topology.cpu import CPUINFO_RAW, LSCPU_RAW, NODES_RAW
from shardscope.topology.model import NumaNode, Topology

DATA = Path(__file__).resolve().parents[1] / "data" / "topo"
H200_TEXT = (DATA / "01-hgx-h200-nvswitch-nv18-12nics.txt").read_text()
A6000_TEXT = (DATA / "11-3x-rtx-a6000-nv4-pair-plus-pcie-ansi-header.txt").read_text()
MI300A_TEXT = (DATA / "22-amd-rocm-smi-showtopo-4x-mi300a.txt").read_text()
SWITCH = "switch"


class FakeNVMLError(Exception):
    """Stands in for pynvml.NVMLError."""


def _bus(index: int) -> str:
    return f"00000000:{0x18 + index:02X}:00.0"


class FakeNvml:
    """The slice of pynvml the probe calls, answering from recorded values.

    ``nvlinks[g]`` lists where each active link of GPU ``g`` ends: a peer index or SWITCH.
    ``ancestor(a, b)`` returns an nvmlGpuTopologyLevel_t value, or None to fail like NVML.
    """

    NVML_NVLINK_MAX_LINKS = 18
    NVMLError = FakeNVMLError

    def __init__(
        self,
        names: list[str],
        nvlinks: dict[int, list[int | str]] | None = None,
        ancestor: Callable[[int, int], int | None] = lambda a, b: 40,
        numa: list[int] | None = None,
        init_fails: bool = False,
    ) -> None:
        self.names = names
        self.nvlinks = nvlinks or {}
        self.ancestor = ancestor
        self.numa = numa
        self.init_fails = init_fails
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        if self.init_fails:
            raise FakeNVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return self.names[handle].encode()  # old bindings return bytes

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(total=80 * 2**30)

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(busId=_bus(handle))

    def nvmlDeviceGetNumaNodeId(self, handle: int) -> int:
        if self.numa is None:
            raise FakeNVMLError("Not Supported")
        return self.numa[handle]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: int) -> int:
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: int) -> int:
        return 16

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        if link >= len(self.nvlinks.get(handle, [])):
            raise FakeNVMLError("Not Supported")
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: int, link: int) -> SimpleNamespace:
        remote = self.nvlinks[handle][link]
        return SimpleNamespace(busId="00000000:A5:00.0" if remote == SWITCH else _bus(int(remote)))

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: int, link: int) -> int:
        return 2 if self.nvlinks[handle][link] == SWITCH else 0

    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
        level = self.ancestor(a, b)
        if level is None:
            raise FakeNVMLError("Unknown Error")
        return level


def _hgx_h200() -> FakeNvml:
    return FakeNvml(
        ["NVIDIA H200"] * 8,
        nvlinks={g: [SWITCH] * 18 for g in range(8)},
        ancestor=lambda a, b: 40 if (a < 4) == (b < 4) else 50,
        numa=[0, 0, 0, 0, 1, 1, 1, 1],
    )


def test_nvml_hgx_sees_switches() -> None:
    nvml = _hgx_h200()
    snapshot = read_nvml(nvml)
    assert snapshot is not None and nvml.shutdowns == 1
    assert [g.switch_nvlinks for g in snapshot.gpus] == [18] * 8
    topology = nvidia_topology(snapshot, None)
    assert topology is not None
    assert topology.fabric == "nvswitch"
    assert {link.code for link in topology.links} == {"NV18"}
    assert topology.islands == [list(range(8))]
    assert any("NVSwitch" in note for note in topology.notes)
    gpu = topology.gpus[5]
    assert (gpu.name, gpu.memory_bytes, gpu.pci_bus_id, gpu.numa_node) == ("NVIDIA H200", 80 * 2**30, _bus(5), 1)
    assert (gpu.pcie_generation, gpu.pcie_width) == (5, 16)
    assert topology.source["links_from"] == "nvml"


def test_nvml_two_gpus_on_a_switch_are_still_nvswitch() -> None:
    nvml = FakeNvml(["NVIDIA H100 80GB HBM3"] * 2, nvlinks={0: [SWITCH] * 18, 1: [SWITCH] * 18})
    topology = nvidia_topology(read_nvml(nvml), None)
    assert topology is not None and topology.fabric == "nvswitch"


def test_nvml_direct_bridge_and_pcie_codes() -> None:
    nvml = FakeNvml(["NVIDIA RTX A6000"] * 3, nvlinks={0: [1] * 4, 1: [0] * 4}, numa=[0, 0, 0])
    topology = nvidia_topology(read_nvml(nvml), A6000_TEXT)
    assert topology is not None
    assert [(link.a, link.b, link.code, link.nvlinks) for link in topology.links] == [
        (0, 1, "NV4", 4),
        (0, 2, "NODE", 0),
        (1, 2, "NODE", 0),
    ]
    assert topology.fabric == "nvlink_islands"
    assert topology.gpus[2].cpu_affinity == "0-31,64-95"  # from the nvidia-smi matrix


def test_links_fall_back_to_nvidia_smi_when_nvml_cannot_tell_paths() -> None:
    nvml = FakeNvml(["NVIDIA H200"] * 8, ancestor=lambda a, b: None)
    host = [NumaNode(0, "0-111", 112), NumaNode(1, "112-223", 112)]
    topology = nvidia_topology(read_nvml(nvml), H200_TEXT, host)
    assert topology is not None
    assert topology.source["links_from"] == "nvidia-smi"
    assert topology.fabric == "nvswitch"
    assert [g.numa_node for g in topology.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]  # matrix fills NVML's gap
    assert topology.numa_nodes == host
    assert len(topology.nics) == 12


def test_no_link_information_is_noted() -> None:
    topology = nvidia_topology(read_nvml(FakeNvml(["GPU"] * 2, ancestor=lambda a, b: None)), None)
    assert topology is not None and topology.links == []
    assert any("links are unknown" in note for note in topology.notes)


def test_numa_from_sysfs_when_nvml_lacks_it(tmp_path: Path) -> None:
    device = tmp_path / "sys/bus/pci/devices/0000:19:00.0"
    device.mkdir(parents=True)
    (device / "numa_node").write_text("3\n")
    snapshot = read_nvml(FakeNvml(["GPU"] * 2), sysfs_root=tmp_path)
    assert snapshot is not None
    assert [g.numa_node for g in snapshot.gpus] == [None, 3]


def test_nvml_absent_or_without_gpus() -> None:
    assert read_nvml(FakeNvml([], init_fails=True)) is None
    assert read_nvml(FakeNvml([])) is None
    assert nvidia_topology(None, None) is None


def test_matrix_alone_without_nvml() -> None:
    topology = nvidia_topology(None, A6000_TEXT)
    assert topology is not None
    assert topology.source == {"method": "nvidia-smi", "file": NVIDIA_SMI_RAW}


def _fake_tools(monkeypatch: pytest.MonkeyPatch, outputs: dict[str, tuple[int, str]]) -> list[list[str]]:
    """Put fake commands on PATH: ``outputs[name] = (returncode, stdout)``."""
    calls: list[list[str]] = []

    def which(name: str) -> str | None:
        return f"/usr/bin/{name}" if name in outputs else None

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        code, out = outputs[argv[0]]
        return subprocess.CompletedProcess(argv, code, stdout=out, stderr="")

    monkeypatch.setattr(shutil, "which", which)
    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(gpu_probes, "probe_numa_nodes", lambda: [NumaNode(0, "0-223", 224)])
    return calls


def test_run_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tools(monkeypatch, {"ok": (0, "text\n"), "fails": (6, "No devices were found\n")})
    assert run_tool(["ok"]) == "text\n"
    assert run_tool(["fails"]) is None
    assert run_tool(["absent"]) is None


def test_run_tool_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    def hang(argv: list[str], **kwargs: Any) -> None:
        raise subprocess.TimeoutExpired(argv, kwargs["timeout"])

    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(subprocess, "run", hang)
    assert run_tool(["nvidia-smi", "topo", "-m"], timeout_s=1) is None


def test_probe_nvidia_with_nvml_and_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_tools(monkeypatch, {"nvidia-smi": (0, H200_TEXT)})
    monkeypatch.setitem(sys.modules, "pynvml", _hgx_h200())
    found = probe_nvidia()
    assert found is not None
    topology, raw = found
    assert calls == [["nvidia-smi", "topo", "-m"]]
    assert raw[NVIDIA_SMI_RAW] == H200_TEXT
    assert json.loads(raw[NVML_RAW])["driver_version"] == "550.54.15"
    assert topology.fabric == "nvswitch"
    assert topology.gpus[0].cpu_affinity == "0-55,112-167"
    assert (topology.gpus[1].nearest_nics, topology.gpus[1].nearest_nic_code) == (("NIC3",), "PXB")  # from the matrix
    assert topology.numa_nodes == [NumaNode(0, "0-223", 224)]


def test_probe_nvidia_with_nvidia_smi_only(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tools(monkeypatch, {"nvidia-smi": (0, A6000_TEXT)})
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    found = probe_nvidia()
    assert found is not None
    assert found[0].islands == [[0, 1], [2]]
    assert set(found[1]) == {NVIDIA_SMI_RAW}


def test_probes_return_none_without_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tools(monkeypatch, {})
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([], init_fails=True))
    assert probe_nvidia() is None
    assert probe_amd() is None
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert probe_nvidia() is None


def test_probe_amd(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_tools(monkeypatch, {"rocm-smi": (0, MI300A_TEXT)})
    found = probe_amd()
    assert found is not None
    topology, raw = found
    assert calls == [["rocm-smi", "--showtopo"]]
    assert raw == {ROCM_SMI_RAW: MI300A_TEXT}
    assert topology.accelerator == "amd" and topology.islands == [[0, 1, 2, 3]]
    assert topology.numa_nodes == [NumaNode(0, "0-223", 224)]


def test_probe_amd_without_gpu_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tools(monkeypatch, {"rocm-smi": (0, "WARNING: No AMD GPUs specified\n")})
    assert probe_amd() is None


def test_detect_uses_the_first_probe_that_finds_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    found = nvidia_topology(None, A6000_TEXT)
    assert found is not None
    probes = [lambda: None, lambda: (found, {NVIDIA_SMI_RAW: A6000_TEXT})]
    monkeypatch.setattr(gpu_probes, "PROBES", probes)
    detection = detect.detect()
    assert isinstance(detection.topology, Topology)
    assert detection.topology.fabric == "nvlink_islands"
    assert detection.topology.source["method"] == "nvidia-smi"
    assert "host" in detection.topology.source
    assert detection.raw[NVIDIA_SMI_RAW] == A6000_TEXT
    assert NODES_RAW in detection.raw  # the host's CPU/NUMA probe text is kept on GPU nodes too
    assert set(detection.raw) - {NVIDIA_SMI_RAW} <= {NODES_RAW, CPUINFO_RAW, LSCPU_RAW}


def test_unreadable_matrix_beside_nvml_is_noted_not_used() -> None:
    cut = H200_TEXT[: len(H200_TEXT) // 3]  # a truncated matrix must not feed links, NICs or affinity
    topology = nvidia_topology(read_nvml(_hgx_h200()), cut)
    assert topology is not None
    assert topology.nics == [] and topology.gpus[0].cpu_affinity is None
    assert any("could not be read as a matrix" in note for note in topology.notes)
    assert topology.fabric == "nvswitch"  # NVML alone still knows
