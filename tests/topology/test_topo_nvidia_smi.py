"""nvidia-smi matrix parsing beyond the fixtures: header splitting, layout variants, -mp, errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from shardscope.errors import UserError
from shardscope.topology.nvidia_smi import PCIE_ONLY_NOTE, parse_nvidia_smi, split_header

DATA = Path(__file__).resolve().parents[1] / "data" / "topo"
H200 = (DATA / "01-hgx-h200-nvswitch-nv18-12nics.txt").read_text()

# `nvidia-smi topo -mp` as printed by a 2020s driver: no NV# line in the legend.
TOPO_MP = """\
        GPU0    GPU1    GPU2    CPU Affinity    NUMA Affinity
GPU0     X      SYS     SYS     0-13    0
GPU1    SYS      X      NODE    14-27   1
GPU2    SYS     NODE     X      14-27   1

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
"""


@pytest.mark.parametrize(
    "line",
    [
        "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID",
        "        GPU0    GPU1    NIC0    CPU Affinity     NUMA Affinity   GPU NUMA ID",
        "GPU0 GPU1 NIC0 CPU Affinity NUMA Affinity GPU NUMA ID",
        "GPU0\tGPU1 NIC0  CPU Affinity NUMA Affinity\tGPU NUMA ID  ",
    ],
)
def test_split_header_keeps_multi_word_columns(line: str) -> None:
    assert split_header(line) == ["GPU0", "GPU1", "NIC0", "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]


def test_split_header_keeps_unknown_multi_word_columns_together() -> None:
    assert split_header("GPU0  mlx5_0  Some New Column  CPU Affinity") == [
        "GPU0",
        "mlx5_0",
        "Some New Column",
        "CPU Affinity",
    ]


def _summary(text: str) -> tuple[object, ...]:
    topology = parse_nvidia_smi(text, "t.txt")
    return (
        topology.fabric,
        topology.islands,
        [(g.index, g.numa_node, g.cpu_affinity) for g in topology.gpus],
        [(link.a, link.b, link.code) for link in topology.links],
        [(n.name, n.device, n.nearest_gpus, n.nearest_code) for n in topology.nics],
        [(n.id, n.cpus, n.cores) for n in topology.numa_nodes],
    )


@pytest.mark.parametrize(
    "variant",
    [
        lambda t: t.expandtabs(8),
        lambda t: t.replace("\n", "\r\n"),
        lambda t: "NVIDIA Topology:\n" + t,
        lambda t: "GPU Topology:\n" + t.lstrip("\t"),
        lambda t: "# cmd: nvidia-smi topo -m\nGPU models and configuration: GPU 0: NVIDIA H200\n\n" + t,
        lambda t: t.replace("\tGPU0", "\t\x1b[4mGPU0", 1).replace("GPU NUMA ID", "GPU NUMA ID\x1b[0m", 1),
        lambda t: t.replace("\tGPU0", "\t[4mGPU0", 1).replace("GPU NUMA ID", "GPU NUMA ID[0m", 1),
    ],
    ids=["spaces", "crlf", "nvidia-topology", "gpu-topology-unindented", "cmd-and-env", "ansi", "ansi-no-esc"],
)
def test_layout_variants_parse_the_same(variant: Callable[[str], str]) -> None:
    assert _summary(variant(H200)) == _summary(H200)


def test_topo_mp_is_flagged_as_pcie_only_view() -> None:
    topology = parse_nvidia_smi(TOPO_MP, "mp.txt")
    assert topology.pcie_only_view
    assert PCIE_ONLY_NOTE in topology.notes
    assert topology.fabric == "pcie"
    assert [g.numa_node for g in topology.gpus] == [0, 1, 1]


def test_topo_mp_is_flagged_from_the_command_line_without_legend() -> None:
    matrix_only = TOPO_MP.split("\n\nLegend")[0]
    assert not parse_nvidia_smi(matrix_only, "m.txt").pcie_only_view
    assert parse_nvidia_smi("$ nvidia-smi topo -mp\n" + matrix_only, "m.txt").pcie_only_view


def test_full_matrix_with_nvlinks_is_not_pcie_only_view() -> None:
    assert not parse_nvidia_smi(H200, "h.txt").pcie_only_view


def test_unknown_extra_column_does_not_shift_known_ones() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV2\t0-7\t0\nGPU1\tNV2\t X \t8-15\t1\n"
    topology = parse_nvidia_smi(text, "t.txt")
    assert [(g.cpu_affinity, g.numa_node) for g in topology.gpus] == [("0-7", 0), ("8-15", 1)]
    assert topology.fabric == "nvlink_mesh"
    assert any("cannot tell direct links from a switch" in note for note in topology.notes)


def test_no_cpu_affinity_gives_no_numa_nodes() -> None:
    topology = parse_nvidia_smi("\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tPHB\t X \n", "t.txt")
    assert topology.numa_nodes == []
    assert [g.numa_node for g in topology.gpus] == [None, None]


def test_text_without_matrix_is_a_user_error_naming_the_file() -> None:
    with pytest.raises(UserError, match=r"^saved/topo\.txt: no GPU topology matrix found"):
        parse_nvidia_smi("GPU 0: NVIDIA H100 80GB HBM3\n", "saved/topo.txt")


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("No devices were found\n", "No devices were found"),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.\n",
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
        ),
        ("Failed to run topology matrix\n", "Failed to run topology matrix"),
    ],
)
def test_nvidia_smi_error_message_is_quoted(text: str, quoted: str) -> None:
    with pytest.raises(UserError) as info:
        parse_nvidia_smi(text, "saved/topo.txt")
    message = str(info.value)
    assert message.startswith("saved/topo.txt: holds an error message instead of a topology matrix")
    assert quoted in message and "Make sure" not in message  # one sentence, not the whole message


def test_legend_alone_is_not_a_matrix() -> None:
    legend_only = H200[H200.index("Legend:") :]
    with pytest.raises(UserError):
        parse_nvidia_smi(legend_only, "legend.txt")
