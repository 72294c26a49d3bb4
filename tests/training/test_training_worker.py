"""`shardscope train` end to end: torchrun, 2 CPU ranks, the tiny model, 1 warmup + 2 steps.

The runs come from the session's ``strategy_runs`` (tests/training/conftest.py): every
strategy once, shared with the proof test. Bad input stops in the launcher, before torchrun,
with one sentence and exit status 2; a job that fails inside torchrun is a result with
outcome ``failed``, not a crash.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shardscope.training.model import PRESETS

STRATEGIES = ("ddp", "zero3")
PSI = PRESETS["tiny"].param_count()


@pytest.fixture(scope="module")
def runs(strategy_runs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return strategy_runs


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
    assert "torch.distributed.run" in log and f'"strategy": "{strategy}"' in log  # the command and the spec it ran


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
            # two ranks: about half of DDP's (DeepSpeed may pad partitions a little); the optimizer
            # state also holds DeepSpeed's fp32 master partition, 3/4 of DDP's moments-only state
            limit = 0.8 if key == "optim_bytes" else 0.6
            assert rank[key] <= limit * ddp[rank["rank"]][key], key
    assert runs["zero3"]["doc"]["job"]["deepspeed_config"]["zero_optimization"]["stage"] == 3


BAD_DIMS = json.dumps({"n_layers": 2, "d_model": 30, "n_heads": 4, "n_kv_heads": 4, "d_ff": 64, "vocab_size": 100})


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--model", "gpt3"], "gpt3"),
        (["--model", json.dumps({"preset": "nope", "n_layers": 2})], "nope"),
        (["--model", BAD_DIMS], "d_model"),
        (["--model", "tiny", "--micro-batch", "0"], "--micro-batch"),
        (["--model", "tiny", "--seq-len", "129"], "max_seq_len"),
        (["--model", "tiny", "--strategy", "zero4"], "zero4"),
        (["--model", "tiny", "--nproc", "0"], "--nproc"),
        (["--model", "tiny", "--warmup", "0"], "--warmup"),
        (["--model", "{not json"], "JSON"),
    ],
    ids=["unknown-preset", "unknown-preset-in-dict", "heads-do-not-divide", "micro-batch-0", "seq-too-long",
         "unknown-strategy", "no-ranks", "no-warmup", "bad-json"],
)
def test_bad_input_stops_before_torchrun(tmp_path: Path, flags: list[str], fragment: str) -> None:
    out, log = tmp_path / "r.json", tmp_path / "logs" / "r.log"
    args = {"--strategy": "ddp", "--nproc": "2"}
    for key, value in zip(flags[::2], flags[1::2]):
        args[key] = value
    cmd = [sys.executable, "-m", "shardscope", "train", *[x for kv in args.items() for x in kv], "--cpu",
           "--out", str(out), "--log", str(log)]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardscope: error:") and fragment in lines[0], proc.stderr
    assert not out.exists() and not log.exists()  # nothing launched, nothing written


def test_failure_inside_the_job_becomes_a_failed_result(tmp_path: Path) -> None:
    """The spec's own checks are bypassed here (a field changed after they ran), so the worker meets the bad model
    when it reads the spec inside torchrun."""
    from shardscope.cli import build_parser
    from shardscope.training.commands import training_spec
    from shardscope.training.launch import launch

    out, log = tmp_path / "bad.json", tmp_path / "logs" / "bad.log"
    # stale files of an earlier attempt must not leak into this result
    out.write_text(json.dumps({"outcome": "ok"}))
    (tmp_path / "bad.json.rank7.error.json").write_text(json.dumps({"rank": 7, "oom": True, "error": "stale"}))

    job = training_spec(build_parser().parse_args(["train", "--strategy", "ddp", "--model", "tiny", "--nproc", "2",
                                                   "--warmup", "1", "--steps", "1", "--out", "o", "--log", "l"]))
    object.__setattr__(job, "model_spec", json.loads(BAD_DIMS))  # past the checks: only the worker can refuse it
    assert launch(job, str(out), str(log), cpu=True) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == "shardscope.training/1"
    assert doc["outcome"] == "failed"
    assert "d_model" in doc["error"] and "stale" not in doc["error"]
    assert doc["job"]["strategy"] == "ddp" and doc["job"]["world_size"] == 2
    assert doc["steps"] == [] and doc["ranks"] == []
    assert not list(tmp_path.glob("*.error.json"))
    assert "torch.distributed.run" in log.read_text()
