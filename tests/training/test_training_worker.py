"""`shardscope train` end to end: torchrun, 2 CPU ranks, the tiny model, 1 warmup + 2 steps.

DDP and ZeRO-3 run once each for the whole module (about 5 s and 10 s; the first ZeRO run
on a fresh machine also builds DeepSpeed's CPU comm op). A model that cannot be built is a
result with outcome ``failed``, not a crash.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shardscope.training.model import PRESETS

STRATEGIES = ("ddp", "zero3")
PSI = PRESETS["tiny"].param_count()


def _env() -> dict[str, str]:
    env = dict(os.environ, SHARDSCOPE_THREADS_PER_RANK="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def train(tmp: Path, strategy: str, model: str, name: str) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    out, log = tmp / f"{name}.json", tmp / "logs" / f"{name}.log"
    cmd = [sys.executable, "-m", "shardscope", "train", "--strategy", strategy, "--model", model, "--nproc", "2",
           "--warmup", "1", "--steps", "2", "--cpu", "--out", str(out), "--log", str(log)]
    proc = subprocess.run(cmd, cwd=tmp, env=_env(), capture_output=True, text=True, timeout=600, check=False)
    return proc, out, log


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    results = {}
    for strategy in STRATEGIES:
        tmp = tmp_path_factory.mktemp(strategy)
        proc, out, log = train(tmp, strategy, "tiny", strategy)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[strategy] = {"doc": json.loads(out.read_text()), "dir": tmp, "log": log, "out": out}
    return results


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_run_is_ok_with_two_steps_on_two_ranks(runs: dict[str, dict[str, Any]], strategy: str) -> None:
    doc = runs[strategy]["doc"]
    assert doc["schema"] == "shardscope.training/1" and doc["kind"] == "training"
    assert doc["outcome"] == "ok", doc.get("error")
    assert doc["error"] is None

    job = doc["job"]
    assert (job["strategy"], job["model"], job["world_size"], job["steps"], job["warmup"]) == (strategy, "tiny", 2, 2, 1)
    assert job["param_count"] == PSI
    assert job["job_id"] == f"{strategy}-tiny-ws2-local"

    assert [s["step"] for s in doc["steps"]] == [0, 1]
    for step in doc["steps"]:
        assert step["step_time_s"] > 0 and math.isfinite(step["loss"])
        assert abs(step["loss"] - math.log(PRESETS["tiny"].vocab_size)) < 1.0  # random init on random tokens

    assert sorted(r["rank"] for r in doc["ranks"]) == [0, 1]
    summary = doc["summary"]
    assert summary["tokens_per_step"] == 2 * 64 * 2  # micro_batch x seq_len x ranks
    assert summary["tokens_per_s"] == pytest.approx(summary["tokens_per_step"] / summary["median_step_time_s"])
    assert summary["peak_memory_method"] == "rss_peak"
    assert summary["peak_memory_bytes"] == max(r["peak_memory_bytes"] for r in doc["ranks"]) > 0
    assert summary["mfu"] is None  # no known peak on CPU

    assert doc["env"]["backend"] == "gloo" and doc["env"]["world_size"] == 2


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_no_error_files_and_a_log_with_the_command(runs: dict[str, dict[str, Any]], strategy: str) -> None:
    run = runs[strategy]
    assert not list(run["dir"].glob("*.error.json"))
    log = run["log"].read_text()
    assert "torch.distributed.run" in log and f"--strategy {strategy}" in log


def test_ddp_holds_a_full_fp32_replica_per_rank(runs: dict[str, dict[str, Any]]) -> None:
    for rank in runs["ddp"]["doc"]["ranks"]:
        assert rank["param_bytes"] == 4 * PSI
        assert rank["grad_bytes"] == 4 * PSI
        assert 8 * PSI <= rank["optim_bytes"] <= 8 * PSI + 1024
    assert runs["ddp"]["doc"]["job"]["deepspeed_config"] is None


def test_zero3_shards_parameters_gradients_and_optimizer_state(runs: dict[str, dict[str, Any]]) -> None:
    ddp = {r["rank"]: r for r in runs["ddp"]["doc"]["ranks"]}
    for rank in runs["zero3"]["doc"]["ranks"]:
        for key in ("param_bytes", "grad_bytes", "optim_bytes"):
            assert 0 < rank[key] < ddp[rank["rank"]][key], key
            # two ranks: about half of DDP's (DeepSpeed may pad partitions a little)
            assert rank[key] <= 0.6 * ddp[rank["rank"]][key], key
    assert runs["zero3"]["doc"]["job"]["deepspeed_config"]["zero_optimization"]["stage"] == 3


def test_unbuildable_model_becomes_a_failed_result(tmp_path: Path) -> None:
    bad = json.dumps({"n_layers": 2, "d_model": 30, "n_heads": 4, "n_kv_heads": 4, "d_ff": 64, "vocab_size": 100})
    out = tmp_path / "bad.json"
    # stale files of an earlier attempt must not leak into this result
    out.write_text(json.dumps({"outcome": "ok"}))
    (tmp_path / "bad.json.rank7.error.json").write_text(json.dumps({"rank": 7, "oom": True, "error": "stale"}))

    proc, out, _ = train(tmp_path, "ddp", bad, "bad")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["schema"] == "shardscope.training/1"
    assert doc["outcome"] == "failed"
    assert "d_model" in doc["error"] and "stale" not in doc["error"]
    assert doc["job"]["strategy"] == "ddp" and doc["job"]["world_size"] == 2
    assert doc["steps"] == [] and doc["ranks"] == []
    assert not list(tmp_path.glob("*.error.json"))
    assert "outcome failed" in proc.stderr
