"""The real collective worker under torchrun: 2 CPU ranks (gloo), a tiny sweep, every op.

Each run takes a few seconds. The worker is forced onto CPU (``--cpu``) so the test means
the same thing on a GPU node.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from shardscope.contracts.names import OPS

# nccl-tests doc/PERFORMANCE.md factors for n = 2, written out
FACTOR_N2 = {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "all_to_all": 0.5,
             "broadcast": 1.0, "reduce": 1.0, "sendrecv": 1.0}
PLANNED_SIZES = [1024, 8192, 65536]  # -b 1024 -e 65536 -f 8


def _env() -> dict[str, str]:
    env = dict(os.environ, SHARDSCOPE_THREADS_PER_RANK="1", OMP_NUM_THREADS="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def run_worker(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "shardscope.collectives", "--cpu", *flags]
    return subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.parametrize("op", OPS)
def test_worker_writes_a_complete_checked_document(tmp_path: Path, op: str) -> None:
    out_dir = tmp_path / "out"
    out = out_dir / f"{op}.json"
    proc = run_worker(tmp_path, "--op", op, "--check", "-b", "1024", "-e", "65536", "-f", "8", "-w", "1", "-n", "2",
                      "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert sorted(os.listdir(out_dir)) == [out.name]  # no temporary files left beside it
    doc = json.loads(out.read_text())

    assert doc["schema"] == "shardscope.collectives/1"
    assert doc["kind"] == "collectives"
    job = doc["job"]
    assert job == {
        "job_id": f"{op}-ws2-local-default", "op": op, "world_size": 2, "placement": "local", "transport": "default",
        "dtype": "float32", "min_bytes": 1024, "max_bytes": 65536, "factor": 8, "warmup": 1, "iters": 2,
        "check": True,
    }

    env = doc["env"]
    assert env["torch"] == torch.__version__
    assert env["backend"] == "gloo"
    assert env["device_type"] == "cpu"
    assert "gloo" in env["comm_library"]
    assert isinstance(env["devices"], list) and env["devices"] and all(isinstance(d, str) and d for d in env["devices"])
    assert env["world_size"] == 2 and env["local_world_size"] == 2
    assert env["threads_per_rank"] == 1
    assert env["timing"] == "perf_counter"
    assert env["nccl_env"] is None and env["gpu_driver"] is None and env["device_pci_bus_ids"] is None  # gloo on CPU

    rows = doc["rows"]
    assert [r["size_bytes"] for r in rows] == PLANNED_SIZES
    for row in rows:
        assert row["op"] == op and row["world_size"] == 2 and row["dtype"] == "float32"
        assert row["iters"] == 2 and row["warmup"] == 1
        assert row["count"] * 4 == row["size_bytes"]
        assert row["check_ok"] is True and row["wrong"] == 0
        assert row["in_place"] is (op in ("all_reduce", "broadcast", "reduce"))
        t, t_max = row["time_s"], row["time_max_s"]
        assert math.isfinite(t) and t > 0
        assert t_max >= t
        assert row["algbw_gbps"] == pytest.approx(row["size_bytes"] / t / 1e9, rel=1e-9)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * FACTOR_N2[op], rel=1e-9)


def test_job_labels_are_passed_through(tmp_path: Path) -> None:
    out = tmp_path / "labelled.json"
    proc = run_worker(tmp_path, "--op", "all_reduce", "-b", "4096", "-e", "4096", "-f", "2", "-w", "1", "-n", "1",
                      "--placement", "one_island", "--transport", "pcie", "--job-id", "my-job", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert (doc["job"]["job_id"], doc["job"]["placement"], doc["job"]["transport"]) == ("my-job", "one_island", "pcie")
    assert [r["size_bytes"] for r in doc["rows"]] == [4096]
    assert doc["rows"][0]["check_ok"] is None  # no --check: not verified, not claimed ok
    assert doc["rows"][0]["wrong"] is None
    assert doc["job"]["check"] is False


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter"])
def test_bfloat16_path_is_checked_on_gloo(tmp_path: Path, op: str) -> None:
    # The ops the default config runs, in the dtype the GPU profile trains in; sums of rank ids
    # are exact in bfloat16, so --check must pass with 0 wrong elements.
    out = tmp_path / f"{op}-bf16.json"
    proc = run_worker(tmp_path, "--op", op, "--dtype", "bfloat16", "--check", "-b", "1024", "-e", "65536", "-f", "8",
                      "-w", "1", "-n", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc["job"]["dtype"] == "bfloat16"
    assert [r["size_bytes"] for r in doc["rows"]] == PLANNED_SIZES
    for row in doc["rows"]:
        assert row["dtype"] == "bfloat16"
        assert row["count"] * 2 == row["size_bytes"]  # 2 bytes per element
        assert row["check_ok"] is True and row["wrong"] == 0
        assert row["time_s"] > 0
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * FACTOR_N2[op], rel=1e-9)


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param(["-b", "0"], id="min-bytes-0"),
        pytest.param(["--dtype", "int8"], id="invalid-dtype"),
    ],
)
def test_failing_run_leaves_no_output_file(tmp_path: Path, flags: list[str]) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "all_reduce.json"
    proc = run_worker(tmp_path, "--op", "all_reduce", "--check", "-w", "1", "-n", "1", *flags, "--out", str(out))
    assert proc.returncode != 0
    assert not out.exists()
    assert os.listdir(out_dir) == []  # not even a temporary file
