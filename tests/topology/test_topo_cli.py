"""`shardscope topology show|parse|detect` run as a user runs them: output, raw/ provenance, one-line errors."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from shardscope.topology.parse import parse_file
from shardscope.topology.show import render_text, summarize

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "topo"
NVL_PAIRS = DATA / "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt"
H200 = DATA / "01-hgx-h200-nvswitch-nv18-12nics.txt"


def shardscope(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardscope", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)


def assert_user_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardscope: error: "), proc.stderr
    assert proc.stdout == ""
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_show_help() -> None:
    proc = shardscope("topology", "show", "--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: shardscope topology show")


def test_show_text_of_probe_text_and_of_its_topology_json(tmp_path: Path) -> None:
    proc = shardscope("topology", "show", NVL_PAIRS)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == render_text(summarize(parse_file(NVL_PAIRS).to_dict()))
    assert "fabric:     nvlink_islands" in proc.stdout
    topo = tmp_path / "topology.json"
    assert shardscope("topology", "parse", NVL_PAIRS, "--out", topo).returncode == 0
    again = shardscope("topology", "show", topo)
    assert again.returncode == 0
    assert again.stdout.splitlines()[1:] == proc.stdout.splitlines()[1:]  # same summary, source line aside


def test_show_json() -> None:
    proc = shardscope("topology", "show", H200, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["fabric"] == "nvswitch"
    assert [n["gpus"] for n in summary["numa_nodes"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert summary["gpus"][7]["nearest_nics"] == [{"name": "NIC11", "device": "mlx5_11"}]


def test_show_this_machine() -> None:
    proc = shardscope("topology", "show")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("source:") and "fabric:" in proc.stdout and "NUMA nodes:" in proc.stdout


def test_parse_out_keeps_the_parsed_file_in_raw(tmp_path: Path) -> None:
    out = tmp_path / "topo" / "topology.json"
    proc = shardscope("topology", "parse", H200, "--out", out)
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    doc = json.loads(out.read_text())
    assert doc["source"]["raw_files"] == [f"raw/{H200.name}"]
    assert (out.parent / "raw" / H200.name).read_bytes() == H200.read_bytes()


def test_parse_to_stdout_writes_no_raw(tmp_path: Path) -> None:
    proc = shardscope("topology", "parse", NVL_PAIRS)
    assert proc.returncode == 0
    assert "raw_files" not in json.loads(proc.stdout)["source"]


@pytest.mark.parametrize(
    ("damage", "fragment"),
    [
        (lambda t: t[: len(t) // 2], "truncated"),
        (lambda t: t.replace("GPU4    SYS", "GPU3    SYS", 1), "row GPU3 appears twice"),
        (lambda t: t.replace("GPU2    NODE    NODE     X ", "GPU2    NODE    NODE    NV12", 1), "diagonal"),
        (lambda t: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
                   "the latest NVIDIA driver is installed and running.\n", "error message"),
        (lambda t: "", "empty"),
    ],
    ids=["cut", "label-twice", "diagonal", "smi-error", "empty"],
)
@pytest.mark.parametrize("command", ["parse", "show"])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, damage, fragment: str, command: str) -> None:
    bad = tmp_path / "topo.txt"
    bad.write_text(damage(NVL_PAIRS.read_text()))
    out = tmp_path / "out" / "topology.json"
    args = ["topology", command, bad] + (["--out", out] if command == "parse" else [])
    assert_user_error(shardscope(*args), str(bad), fragment)
    assert not out.parent.exists()  # neither topology.json nor raw/


def test_binary_file(tmp_path: Path) -> None:
    bad = tmp_path / "screenshot.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(random.Random(0).randrange(256) for _ in range(512)))
    assert_user_error(shardscope("topology", "parse", bad), str(bad), "binary")
