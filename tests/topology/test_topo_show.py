"""`shardscope topology show`: the summary of real fixtures, as data and as text."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardscope.topology.detect import detect_cpu_only
from shardscope.topology.nvidia_smi import PCIE_ONLY_NOTE, parse_nvidia_smi
from shardscope.topology.parse import parse_file
from shardscope.topology.show import NO_NAMES_NOTE, ranges, render_text, summarize

DATA = Path(__file__).resolve().parents[1] / "data" / "topo"


def _summary(name: str) -> dict:
    return summarize(parse_file(DATA / name).to_dict())


@pytest.mark.parametrize(
    ("indices", "text"),
    [([], ""), ([3], "3"), ([0, 1, 2, 3], "0-3"), ([0, 1, 2, 3, 6], "0-3,6"), ([7, 5, 4], "4-5,7")],
)
def test_ranges(indices: list[int], text: str) -> None:
    assert ranges(indices) == text


def test_hgx_h200_nearest_nic_per_gpu() -> None:
    summary = _summary("01-hgx-h200-nvswitch-nv18-12nics.txt")
    nearest = {g["index"]: ([n["name"] for n in g["nearest_nics"]], g["nearest_nic_code"]) for g in summary["gpus"]}
    # SOURCES.md: GPU0->NIC0, GPU1->NIC3, GPU2->NIC4, GPU3->NIC5, GPU4->NIC6, GPU5->NIC9, GPU6->NIC10, GPU7->NIC11
    expected = dict(enumerate(["NIC0", "NIC3", "NIC4", "NIC5", "NIC6", "NIC9", "NIC10", "NIC11"]))
    assert nearest == {g: ([nic], "PXB") for g, nic in expected.items()}
    assert summary["gpus"][1]["nearest_nics"] == [{"name": "NIC3", "device": "mlx5_3"}]
    text = render_text(summary)
    assert "nearest NIC NIC3 (mlx5_3) via PXB" in text
    assert "fabric:     nvswitch" in text


def test_nvl_pairs_islands_and_numa_nodes() -> None:
    summary = _summary("10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt")
    assert summary["fabric"] == "nvlink_islands"
    assert summary["islands"] == [{"gpus": [2 * i, 2 * i + 1], "codes": ["NV12"]} for i in range(4)]
    assert [(n["id"], n["gpus"]) for n in summary["numa_nodes"]] == [(0, [0, 1, 2, 3]), (1, [4, 5, 6, 7])]
    assert summary["gpus"][1]["nearest_nic_code"] == "PHB"
    assert summary["gpus"][4]["nearest_nic_code"] == "SYS"
    text = render_text(summary)
    assert "islands:    4 of 2 GPU(s): [0-1] NV12  [2-3] NV12  [4-5] NV12  [6-7] NV12" in text
    assert "node 0:  GPU 0-3  CPUs 0-63,128-191 (128)" in text
    assert NO_NAMES_NOTE in text


def test_dgx_a100_two_nics_per_gpu_pair() -> None:
    gpus = _summary("05-dgx-a100-nv12-mlx5-columns-old-format.txt")["gpus"]
    assert [n["name"] for n in gpus[6]["nearest_nics"]] == ["mlx5_8", "mlx5_9"]


def test_mesh_note_says_switch_cannot_be_told() -> None:
    summary = _summary("22-amd-rocm-smi-showtopo-4x-mi300a.txt")
    assert any("cannot tell direct links from a switch" in note for note in summary["notes"])
    assert "islands:    1 of 4 GPU(s): [0-3] XGMI" in render_text(summary)


def test_pcie_machine_has_no_islands_and_says_where_sockets_split() -> None:
    summary = _summary("13-8x-pcie-pix-pxb-sys-numa-na.txt")
    text = render_text(summary)
    assert "islands:    none (no NVLink" in text
    assert "island 0" not in text
    assert any("[0-3] and [4-7] on different CPU sockets" in note for note in summary["notes"])


def test_pcie_only_view_is_flagged() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tSYS\t0-13\t0\nGPU1\tSYS\t X \t14-27\t1\n"
    topology = parse_nvidia_smi("$ nvidia-smi topo -mp\n" + text, "mp.txt")
    assert PCIE_ONLY_NOTE in render_text(summarize(topology.to_dict()))


def test_cpu_machine() -> None:
    summary = summarize(detect_cpu_only().topology.to_dict())
    assert summary["gpus"] == [] and summary["fabric"] == "cpu"
    text = render_text(summary)
    assert text.startswith("source:     os")
    assert "fabric:     cpu (no GPU" in text
    assert "socket(s)" in text and "NUMA nodes:" in text


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.txt")))
def test_every_fixture_summarises(name: str) -> None:
    summary = _summary(name)
    text = render_text(summary)
    assert len(summary["gpus"]) == text.count("\n  GPU")
    assert f"fabric:     {summary['fabric']}" in text


def test_names_and_memory_when_the_probe_has_them() -> None:
    from shardscope.topology.model import Gpu, Link, NumaNode, Topology

    topology = Topology(
        gpus=[Gpu(i, name="NVIDIA H200", memory_bytes=141 * 2**30, numa_node=0) for i in range(2)],
        links=[Link(0, 1, "NV18", 18)], numa_nodes=[NumaNode(0, "0-7", 8)], source={"method": "nvml", "host": "n1"},
        accelerator="nvidia", fabric_override="nvswitch",
    )
    summary = summarize(topology.to_dict())
    assert NO_NAMES_NOTE not in summary["notes"]
    text = render_text(summary)
    assert "  GPU1  NVIDIA H200  141.0 GiB  NUMA 0  island 0" in text
    assert text.startswith("source:     nvml on n1\n")
