"""rocm-smi parsing beyond the fixture, and parse_file's sniffing, decoding and errors."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from shardscope.errors import UserError
from shardscope.topology.parse import parse_file, parse_text, sniff_format
from shardscope.topology.rocm_smi import parse_numa, parse_rocm_smi

DATA = Path(__file__).resolve().parents[1] / "data" / "topo"
MI300A = DATA / "22-amd-rocm-smi-showtopo-4x-mi300a.txt"
A6000 = DATA / "11-3x-rtx-a6000-nv4-pair-plus-pcie-ansi-header.txt"

# Two PCIe-attached AMD GPUs without XGMI, with NUMA given only as affinity.
ROCM_PCIE = """\
================================= Link Type between two GPUs =================================
       GPU0         GPU1
GPU0   0            PCIE
GPU1   PCIE         0
======================================= Numa Nodes =======================================
GPU[0]\t\t: (Topology) Numa Affinity: 0
GPU[1]\t\t: (Topology) Numa Affinity: 1
================================== End of ROCm SMI Log ===================================
"""


def test_rocm_pcie_only() -> None:
    topology = parse_rocm_smi(ROCM_PCIE, "amd.txt")
    assert topology.fabric == "pcie"
    assert [(link.code, link.nvlinks) for link in topology.links] == [("PCIE", 0)]
    assert [g.numa_node for g in topology.gpus] == [0, 1]
    assert not any("XGMI" in note for note in topology.notes)


def test_rocm_numa_node_preferred_and_minus_one_ignored() -> None:
    lines = [
        "GPU[0]\t\t: (Topology) Numa Node: 1",
        "GPU[0]\t\t: (Topology) Numa Affinity: 0",
        "GPU[1]\t\t: (Topology) Numa Node: -1",
        "GPU[1]\t\t: (Topology) Numa Affinity: -1",
    ]
    assert parse_numa(lines) == {0: 1}


def test_rocm_without_link_table_is_a_user_error() -> None:
    with pytest.raises(UserError, match=r"^amd\.txt: no 'Link Type between two GPUs' table"):
        parse_rocm_smi("=== ROCm System Management Interface ===\nERROR: no GPUs\n", "amd.txt")


@pytest.mark.parametrize(
    ("path", "kind"),
    [(MI300A, "rocm-smi"), (A6000, "nvidia-smi")],
)
def test_sniff_format(path: Path, kind: str) -> None:
    assert sniff_format(path.read_text()) == kind


def test_parse_file_reads_topology_json(tmp_path: Path) -> None:
    doc = parse_file(A6000).to_dict()
    saved = tmp_path / "topology.json"
    saved.write_text(json.dumps(doc))
    assert parse_file(saved).to_dict() == doc


def test_parse_file_decodes_utf16_with_bom(tmp_path: Path) -> None:
    saved = tmp_path / "topo-powershell.txt"
    saved.write_bytes(A6000.read_text().encode("utf-16"))
    assert parse_file(saved).islands == [[0, 1], [2]]


def test_parse_text_names_the_source() -> None:
    assert parse_text(A6000.read_text(), "from-stdin").source["file"] == "from-stdin"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="file not found"):
        parse_file(tmp_path / "nope.txt")


def test_directory_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot be read"):
        parse_file(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files regardless of permissions")
def test_unreadable_file(tmp_path: Path) -> None:
    saved = tmp_path / "secret.txt"
    shutil.copy(A6000, saved)
    saved.chmod(0)
    with pytest.raises(UserError, match="cannot be read"):
        parse_file(saved)


def test_file_without_matrix(tmp_path: Path) -> None:
    saved = tmp_path / "notes.txt"
    saved.write_text("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)\n")
    with pytest.raises(UserError, match=r"notes\.txt: no GPU topology matrix found"):
        parse_file(saved)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"fabric": "pcie"}', "expected a topology.json object"),
        ('[{"gpus": []}]', "expected a topology.json object, found a JSON list"),
        ('{"schema": "shardscope.topology/1", "gpus": [{"idx": 0}]}', "not a valid topology.json"),
    ],
)
def test_bad_topology_json(tmp_path: Path, content: str, message: str) -> None:
    saved = tmp_path / "topology.json"
    saved.write_text(content)
    with pytest.raises(UserError, match=message):
        parse_file(saved)
