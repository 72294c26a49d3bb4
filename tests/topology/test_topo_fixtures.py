"""Every real probe output in tests/data/topo reads as tests/data/topo/SOURCES.md says it should."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from shardscope.topology.model import Topology, from_dict
from shardscope.topology.parse import parse_file

DATA = Path(__file__).resolve().parents[1] / "data" / "topo"


@dataclass(frozen=True)
class Expected:
    """What SOURCES.md says a classifier should conclude about one file."""

    gpus: int
    fabric: str
    islands: list[list[int]]
    numa: list[int | None]
    numa_ids: list[int]
    accelerator: str = "nvidia"
    codes: set[str] = field(default_factory=set)
    nics: dict[str, tuple[tuple[int, ...], str]] = field(default_factory=dict)


EXPECTED = {
    "01-hgx-h200-nvswitch-nv18-12nics.txt": Expected(
        gpus=8,
        fabric="nvswitch",
        islands=[list(range(8))],
        numa=[0, 0, 0, 0, 1, 1, 1, 1],
        numa_ids=[0, 1],
        codes={"NV18"},
        nics={
            "NIC0": ((0,), "PXB"),
            "NIC3": ((1,), "PXB"),
            "NIC4": ((2,), "PXB"),
            "NIC5": ((3,), "PXB"),
            "NIC6": ((4,), "PXB"),
            "NIC9": ((5,), "PXB"),
            "NIC10": ((6,), "PXB"),
            "NIC11": ((7,), "PXB"),
            # PIX pairs with no GPU attached: the nearest GPUs are a whole socket away.
            "NIC1": ((0, 1, 2, 3), "NODE"),
            "NIC2": ((0, 1, 2, 3), "NODE"),
            "NIC7": ((4, 5, 6, 7), "NODE"),
            "NIC8": ((4, 5, 6, 7), "NODE"),
        },
    ),
    "05-dgx-a100-nv12-mlx5-columns-old-format.txt": Expected(
        gpus=8,
        fabric="nvswitch",
        islands=[list(range(8))],
        numa=[3, 3, 1, 1, 7, 7, 5, 5],
        numa_ids=[1, 3, 5, 7],
        codes={"NV12"},
        nics={
            "mlx5_0": ((0, 1), "PXB"),
            "mlx5_1": ((0, 1), "PXB"),
            "mlx5_2": ((2, 3), "PXB"),
            "mlx5_3": ((2, 3), "PXB"),
            "mlx5_6": ((4, 5), "PXB"),
            "mlx5_7": ((4, 5), "PXB"),
            "mlx5_8": ((6, 7), "PXB"),
            "mlx5_9": ((6, 7), "PXB"),
        },
    ),
    "08-dgx1-v100-hybrid-cube-mesh-nv1-nv2.txt": Expected(
        gpus=8,
        fabric="nvlink_partial",
        islands=[list(range(8))],
        numa=[0, 0, 0, 0, 1, 1, 1, 1],  # inferred from the two CPU affinity groups
        numa_ids=[0, 1],
        codes={"NV1", "NV2", "SYS"},
        nics={"mlx5_0": ((2, 3), "PIX")},
    ),
    "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt": Expected(
        gpus=8,
        fabric="nvlink_islands",
        islands=[[0, 1], [2, 3], [4, 5], [6, 7]],
        numa=[0, 0, 0, 0, 1, 1, 1, 1],
        numa_ids=[0, 1],
        codes={"NV12", "NODE", "SYS"},
        nics={"NIC0": ((1,), "PHB"), "NIC1": ((1,), "PHB")},
    ),
    "11-3x-rtx-a6000-nv4-pair-plus-pcie-ansi-header.txt": Expected(
        gpus=3,
        fabric="nvlink_islands",
        islands=[[0, 1], [2]],
        numa=[0, 0, 0],
        numa_ids=[0],
        codes={"NV4", "NODE"},
    ),
    "13-8x-pcie-pix-pxb-sys-numa-na.txt": Expected(
        gpus=8,
        fabric="pcie",
        islands=[[i] for i in range(8)],
        numa=[None] * 8,  # NUMA Affinity N/A and one shared CPU affinity: unknown per GPU
        numa_ids=[0],
        codes={"PIX", "PXB", "SYS"},
    ),
    "16-2x-gtx1080ti-phb-consumer.txt": Expected(
        gpus=2,
        fabric="pcie",
        islands=[[0], [1]],
        numa=[None, None],
        numa_ids=[0],
        codes={"PHB"},
    ),
    "18-single-gpu-h100-k8s-pod.txt": Expected(
        gpus=1,
        fabric="single",
        islands=[[0]],
        numa=[0],
        numa_ids=[0],
    ),
    "19-7x-gtx10xx-soc-old-driver-ansi.txt": Expected(
        gpus=7,
        fabric="pcie",
        islands=[[i] for i in range(7)],
        numa=[0, 0, 0, 0, 1, 1, 1],  # inferred from the two CPU affinity groups
        numa_ids=[0, 1],
        codes={"PHB", "SYS"},
    ),
    "22-amd-rocm-smi-showtopo-4x-mi300a.txt": Expected(
        gpus=4,
        fabric="nvlink_mesh",
        islands=[[0, 1, 2, 3]],
        numa=[0, 1, 2, 3],
        numa_ids=[0, 1, 2, 3],
        accelerator="amd",
        codes={"XGMI"},
    ),
}


def _parse(name: str) -> Topology:
    return parse_file(DATA / name)


def test_every_fixture_has_expectations() -> None:
    assert {p.name for p in DATA.glob("*.txt")} == set(EXPECTED)


def test_sources_md_lists_every_fixture() -> None:
    sources = (DATA / "SOURCES.md").read_text()
    assert all(name in sources for name in EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_gpus_fabric_islands(name: str) -> None:
    topology, expected = _parse(name), EXPECTED[name]
    doc = topology.to_dict()
    assert doc["gpu_count"] == expected.gpus
    assert [g["index"] for g in doc["gpus"]] == list(range(expected.gpus))
    assert doc["fabric"] == expected.fabric
    assert doc["islands"] == expected.islands
    assert doc["accelerator"] == expected.accelerator


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_links_cover_every_pair_with_expected_codes(name: str) -> None:
    topology, expected = _parse(name), EXPECTED[name]
    n = expected.gpus
    assert {(link.a, link.b) for link in topology.links} == {(a, b) for a in range(n) for b in range(a + 1, n)}
    assert {link.code for link in topology.links} == expected.codes


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_numa_per_gpu(name: str) -> None:
    topology, expected = _parse(name), EXPECTED[name]
    assert [g.numa_node for g in topology.gpus] == expected.numa
    assert [n.id for n in topology.numa_nodes] == expected.numa_ids


@pytest.mark.parametrize("name", sorted(n for n, e in EXPECTED.items() if e.nics))
def test_nic_nearest_gpus(name: str) -> None:
    nics = {nic.name: nic for nic in _parse(name).nics}
    for nic_name, (gpus, code) in EXPECTED[name].nics.items():
        assert (nics[nic_name].nearest_gpus, nics[nic_name].nearest_code) == (gpus, code), nic_name


def test_hgx_h200_details() -> None:
    topology = _parse("01-hgx-h200-nvswitch-nv18-12nics.txt")
    assert all(link.nvlinks == 18 for link in topology.links)
    assert [nic.device for nic in topology.nics] == [f"mlx5_{i}" for i in range(12)]
    assert topology.numa_nodes[0].cpus == "0-55,112-167"
    assert topology.numa_nodes[0].cores == 112
    assert topology.gpus[4].cpu_affinity == "56-111,168-223"
    assert topology.source == {"method": "nvidia-smi", "file": str(DATA / "01-hgx-h200-nvswitch-nv18-12nics.txt")}
    assert not topology.pcie_only_view


def test_dgx_a100_mlx5_columns_are_their_own_devices() -> None:
    nics = _parse("05-dgx-a100-nv12-mlx5-columns-old-format.txt").nics
    assert len(nics) == 12
    assert all(nic.device == nic.name for nic in nics)


def test_dgx1_hybrid_cube_mesh_has_four_nvlink_neighbours_each() -> None:
    topology = _parse("08-dgx1-v100-hybrid-cube-mesh-nv1-nv2.txt")
    neighbours = {g: 0 for g in range(8)}
    for link in topology.links:
        if link.nvlinks:
            neighbours[link.a] += 1
            neighbours[link.b] += 1
    assert set(neighbours.values()) == {4}
    assert [n.cpus for n in topology.numa_nodes] == ["0-11,24-35", "12-23,36-47"]
    assert any("inferred from distinct CPU affinity" in note for note in topology.notes)


def test_h100_nvl_pairs_node_within_socket_sys_across() -> None:
    codes = {(link.a, link.b): link.code for link in _parse("10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt").links}
    assert codes[(0, 1)] == "NV12"
    assert codes[(0, 2)] == "NODE"
    assert codes[(3, 4)] == "SYS"


def test_pcie_quads() -> None:
    topology = _parse("13-8x-pcie-pix-pxb-sys-numa-na.txt")
    codes = {(link.a, link.b): link.code for link in topology.links}
    assert codes[(0, 1)] == codes[(4, 5)] == "PIX"
    assert codes[(0, 2)] == codes[(5, 7)] == "PXB"
    assert codes[(3, 4)] == "SYS"
    assert topology.numa_nodes[0].cpus == "0-95"
    assert any("different CPU sockets" in note for note in topology.notes)


def test_old_driver_soc_is_sys_and_kept_in_notes() -> None:
    topology = _parse("19-7x-gtx10xx-soc-old-driver-ansi.txt")
    assert {(link.a, link.b): link.code for link in topology.links}[(0, 4)] == "SYS"
    assert any("SOC" in note for note in topology.notes)
    assert [n.cpus for n in topology.numa_nodes] == ["0-9,20-29", "10-19,30-39"]


def test_single_gpu_has_no_links() -> None:
    topology = _parse("18-single-gpu-h100-k8s-pod.txt")
    assert topology.links == []
    assert topology.numa_nodes[0].cpus == "0-51,104-155"


def test_amd_xgmi_is_noted() -> None:
    topology = _parse("22-amd-rocm-smi-showtopo-4x-mi300a.txt")
    assert all(link.nvlinks == 1 for link in topology.links)
    assert any("XGMI" in note for note in topology.notes)
    assert topology.source["method"] == "rocm-smi"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_topology_json_round_trips(name: str) -> None:
    doc = _parse(name).to_dict()
    assert from_dict(doc).to_dict() == doc


# Each GPU's nearest NICs (ties kept) and the path to them, as the matrices in SOURCES.md show.
GPU_NICS = {
    "01-hgx-h200-nvswitch-nv18-12nics.txt": {
        g: ((nic,), "PXB") for g, nic in enumerate(["NIC0", "NIC3", "NIC4", "NIC5", "NIC6", "NIC9", "NIC10", "NIC11"])
    },
    "05-dgx-a100-nv12-mlx5-columns-old-format.txt": {
        g: ((f"mlx5_{a}", f"mlx5_{a + 1}"), "PXB") for g, a in enumerate([0, 0, 2, 2, 6, 6, 8, 8])
    },
    "08-dgx1-v100-hybrid-cube-mesh-nv1-nv2.txt": {
        0: (("mlx5_0",), "NODE"), 2: (("mlx5_0",), "PIX"), 4: (("mlx5_0",), "SYS"),
    },
    "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt": {
        0: (("NIC0", "NIC1"), "NODE"), 1: (("NIC0", "NIC1"), "PHB"), 7: (("NIC0", "NIC1"), "SYS"),
    },
    "13-8x-pcie-pix-pxb-sys-numa-na.txt": {g: ((), None) for g in range(8)},
}


@pytest.mark.parametrize("name", sorted(GPU_NICS))
def test_gpu_nearest_nics(name: str) -> None:
    gpus = _parse(name).gpus
    for index, (nics, code) in GPU_NICS[name].items():
        assert (gpus[index].nearest_nics, gpus[index].nearest_nic_code) == (nics, code), index
