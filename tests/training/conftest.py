"""Real 2-rank CPU runs of every strategy, made once per test session and shared by the tests here.

Each strategy trains the tiny model through ``shardscope train`` (torchrun, gloo, the real
DeepSpeed engine and FSDP2) for 1 warmup and 2 timed steps from the same seed: about 35 s for
all seven on 2 cores. ``zero0`` runs without ``--comm-profile`` so that a run which was not
profiled is covered too (its ``comm_time_share`` must be null).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ALL_STRATEGIES = ("ddp", "fsdp", "fsdp_grad_op", "zero0", "zero1", "zero2", "zero3")
NOT_PROFILED = "zero0"


def clean_env() -> dict[str, str]:
    """This environment without a surrounding torchrun's variables, one thread per rank."""
    env = dict(os.environ, SHARDSCOPE_THREADS_PER_RANK="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def run_train(tmp: Path, strategy: str, model: str, name: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """``shardscope train`` on 2 CPU ranks, 1 warmup + 2 timed steps; returns the process, output and log."""
    out, log = tmp / f"{name}.json", tmp / "logs" / f"{name}.log"
    cmd = [sys.executable, "-m", "shardscope", "train", "--strategy", strategy, "--model", model, "--nproc", "2",
           "--warmup", "1", "--steps", "2", "--cpu", "--out", str(out), "--log", str(log), *extra]
    proc = subprocess.run(cmd, cwd=tmp, env=clean_env(), capture_output=True, text=True, timeout=600, check=False)
    return proc, out, log


@pytest.fixture(scope="session")
def strategy_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every strategy's result document (and its folder and log), same seed, same data."""
    results = {}
    for strategy in ALL_STRATEGIES:
        tmp = tmp_path_factory.mktemp(strategy)
        extra = () if strategy == NOT_PROFILED else ("--comm-profile",)
        proc, out, log = run_train(tmp, strategy, "tiny", strategy, "--seed", "7", *extra)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[strategy] = {"doc": json.loads(out.read_text()), "dir": tmp, "log": log, "out": out}
    return results


@pytest.fixture(scope="module")
def one_rank_group() -> Any:
    """A 1-process gloo group in this process: real collectives, DDP and FSDP2, in milliseconds."""
    import torch.distributed as dist

    if dist.is_initialized():
        yield
        return
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29500 + os.getpid() % 2000))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()
