"""``python -m shardscope.diagnose doctor|verdict|nccl-log`` on this machine (until ``diagnose`` is a CLI stage)."""

from __future__ import annotations

import json

from diagnose.fixtures import LOGS, NCCL_TESTS, RUN_293_GDR, TOPO_293
from shardscope.diagnose.__main__ import main


def test_doctor_runs_here_and_skips_gpu_checks_with_a_reason(capsys):
    assert main(["doctor", "--json", "--no-peer-check"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_check = {f["check"]: f for f in doc["findings"]}
    assert set(by_check) == {"pcie_acs", "iommu", "pcie_link", "peer_check", "nccl_env", "numa_binding", "virtualization"}
    if doc["topology"]["gpu_count"] == 0:
        for check in ("pcie_acs", "pcie_link", "peer_check"):
            assert by_check[check]["status"] == "skipped" and by_check[check]["concluded"]
        assert "NVML" in by_check["pcie_link"]["read"]
    for check in ("nccl_env", "numa_binding", "virtualization"):
        assert by_check[check]["status"] != "skipped" and by_check[check]["read"]


def test_verdict_command(capsys):
    assert main(["verdict", str(RUN_293_GDR), "--topology", str(TOPO_293), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "shardscope.verdicts/1" and doc["sweeps"][0]["verdict"] == "low"
    assert main(["verdict", str(RUN_293_GDR), "--topology", str(TOPO_293)]) == 0
    assert capsys.readouterr().out.startswith("LOW: all_reduce on 2 ranks / 2 nodes")


def test_nccl_log_command_flags_a_pcie_forced_job(capsys):
    topo = NCCL_TESTS.parent / "topo" / "01-hgx-h200-nvswitch-nv18-12nics.txt"
    assert main(["nccl-log", str(LOGS / "nccl-1538-p2p-cumem.txt"), "--transport", "pcie", "--topology", str(topo)]) == 0
    out = capsys.readouterr().out
    assert "P2P/CUMEM 11" in out and "FLAG: labelled PCIe-forced" in out


def test_user_errors_are_one_line_with_status_2(capsys, tmp_path):
    assert main(["verdict", str(tmp_path / "missing.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("shardscope: error: ") and err.count("\n") == 1


def test_pair_check_runs_the_real_worker_with_check(tmp_path):
    # The GPU path needs two GPUs; the same command with --cpu exercises the worker, its --check and the reading.
    from shardscope.diagnose.doctor import (
        check_peer_pairs,
        pair_check_command,
        run_pair_check,
    )

    assert "--check" in pair_check_command(tmp_path / "x.json", "j", 29600)
    entry = run_pair_check((0, 1), tmp_path, 29683, peer_access=True, cpu=True, timeout_s=200)
    assert entry == {"pair": [0, 1], "peer_access": True, "check_ok": True, "wrong": 0}
    assert check_peer_pairs([entry]).status == "ok"
