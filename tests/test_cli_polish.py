"""Issue 32, item 7: the plan summary lists every job group and names only real flags, `nccl-log` prints a table,
`reference` writes only into its own folders."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from factories import REPO, default_config_path

TOPO = REPO / "tests" / "data" / "topo"
LOGS = REPO / "tests" / "data" / "diagnose" / "nccl-log"


def shardscope(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardscope", *map(str, args)], capture_output=True, text=True,
                          timeout=600, check=False)


def test_plan_summary_lists_every_training_group_of_the_h200_plan():
    proc = shardscope("plan", "--topology", TOPO / "01-hgx-h200-nvswitch-nv18-12nics.txt",
                      "--config", default_config_path())
    assert proc.returncode == 0, proc.stderr
    groups = [line for line in proc.stdout.splitlines() if line.strip().startswith("model ")]
    assert any("model gpt2-small" in line for line in groups) and any("model mistral-7b" in line for line in groups)
    listed = sum(int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("  training"))
    assert f"; {listed + 30} single-node jobs" in proc.stdout.splitlines()[0]  # 30 collectives: every job in a group


def test_plan_hint_names_no_flag_plan_lacks():
    proc = shardscope("plan", "--topology", TOPO / "13-8x-pcie-pix-pxb-sys-numa-na.txt",
                      "--config", default_config_path())
    assert proc.returncode == 0, proc.stderr
    plan_help = shardscope("plan", "--help").stdout
    assert "--gpu" not in plan_help
    text = proc.stdout + proc.stderr
    assert "name the GPU with --gpu" not in text and "--peak-tflops" not in text
    assert "shardscope advise --topology FILE --gpu NAME" in text


def test_nccl_log_prints_a_table_without_python_values():
    for log in ("nccl-1232-net-socket-and-shm.txt", "nccl-428-socket-p2p-level-loc.txt"):
        proc = shardscope("nccl-log", LOGS / log)
        assert proc.returncode == 0, proc.stderr
        assert not any(mark in proc.stdout for mark in ("{", "}", "None", "True", "False")), proc.stdout
    assert "transports (connections)               NET/Socket 8, SHM 2" in shardscope(
        "nccl-log", LOGS / "nccl-1232-net-socket-and-shm.txt").stdout


def test_reference_writes_only_the_database_and_its_documents_folder(tmp_path: Path):
    proc = shardscope("reference", "--db", tmp_path / "ref.duckdb")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ref.documents", "ref.duckdb"]
    assert len(list((tmp_path / "ref.documents").glob("*.json"))) >= 20
