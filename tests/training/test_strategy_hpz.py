"""ZeRO-3 with hpZ (ZeRO++'s secondary parameter partition) on 4 real CPU ranks, partition 2 (two groups of two),
beside plain ZeRO-3 at the same seed and global batch; and the partition sizes the worker refuses.

On 2 ranks the only hpZ partition other than DeepSpeed's "off" (1) is the world size, which DeepSpeed accepts but
which is degenerate (measured: the secondary shard duplicates the primary one, param bytes double, losses equal to
ZeRO-3's), so the real run uses 4 ranks: about 15-20 s per job on 2 loaded cores.
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
from factories import worker_spec

from shardscope.costmodel.memory_check import compare_job
from shardscope.costmodel.modeled import modeled_for_document
from shardscope.training.model import PRESETS

PSI = PRESETS["tiny"].param_count()


def run_zero3(tmp: Path, strategy: str) -> dict[str, Any]:
    """The worker under torchrun on 4 CPU ranks, tiny model, fp32, 1 warmup + 2 steps, seed 7, --shard-size 2."""
    out = tmp / f"{strategy}.json"
    spec = worker_spec(tmp, "--strategy", strategy, "--model", "tiny", "--nproc", "4", "--warmup", "1", "--steps", "2",
                       "--seed", "7", *(["--shard-size", "2"] if strategy == "zero3_hpz" else []))
    spec = spec.rename(tmp / f"{strategy}.spec.json")  # the two runs share the folder
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4", "-m", "shardscope.training",
           "--spec", str(spec), "--cpu", "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env = dict(env, SHARDSCOPE_THREADS_PER_RANK="1", DS_ACCELERATOR="cpu")
    proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("hpz")
    return {s: run_zero3(tmp, s) for s in ("zero3", "zero3_hpz")}


def test_hpz_records_its_partition_and_trains_as_zero3_does(runs: dict[str, dict[str, Any]]) -> None:
    hpz, zero3 = runs["zero3_hpz"], runs["zero3"]
    assert hpz["outcome"] == "ok" and hpz["job"]["strategy"] == "zero3_hpz" and hpz["job"]["shard_size"] == 2
    assert hpz["settings"]["strategy"] == "zero3_hpz" and hpz["settings"]["hpz_partition_size"] == 2  # read back from DeepSpeed
    assert hpz["job"]["deepspeed_config"]["zero_optimization"]["zero_hpz_partition_size"] == 2
    assert "zero_hpz_partition_size" not in zero3["job"]["deepspeed_config"]["zero_optimization"]
    assert zero3["job"]["shard_size"] is None and "hpz_partition_size" not in zero3["settings"]
    losses = [s["loss"] for s in hpz["steps"]]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses) and losses[1] != losses[0]
    # the same weights, the same global batch: hpZ changes where backward gathers from, not what it computes
    assert losses == pytest.approx([s["loss"] for s in zero3["steps"]], rel=1e-5)


def test_the_secondary_partition_is_held_and_modeled(runs: dict[str, dict[str, Any]]) -> None:
    hpz, zero3 = runs["zero3_hpz"], runs["zero3"]
    for a, b in zip(hpz["ranks"], zero3["ranks"]):  # fp32 parameters over the 2 ranks of a group, beside ZeRO-3's quarter
        assert a["param_bytes"] - b["param_bytes"] == pytest.approx(4 * PSI / 2, rel=0.01)
        assert (a["grad_bytes"], a["optim_bytes"]) == (b["grad_bytes"], b["optim_bytes"])
    ratios = modeled_for_document(hpz)["implementation"]["measured_over_modeled"]
    assert ratios["param_bytes"] == pytest.approx(1.0, rel=0.01) and ratios["total_bytes"] == pytest.approx(1.0, rel=0.01)
    paper = modeled_for_document(hpz)["zero_paper"]
    assert paper["param_bytes"] == int(4 * PSI / 4) + int(4 * PSI / 2)  # fp32: 4Ψ/N + 4Ψ/p
    # the whole peak model against the tensor tracker, category by category, within 10% (as every strategy)
    for name, cell in compare_job(hpz)["categories"].items():
        assert cell["ratio"] == pytest.approx(1.0, abs=0.10), name
    # a small model is not gathered again in backward (reuse distance), from the secondary partition either
    assert hpz["summary"]["comm_bytes"]["measured"]["volume_bytes"] == zero3["summary"]["comm_bytes"]["measured"]["volume_bytes"]


def test_degenerate_partitions_are_refused() -> None:
    from shardscope.training.strategies import hpz_partition_size

    assert hpz_partition_size(8, 2) == 2 and hpz_partition_size(4, 2) == 2 and hpz_partition_size(16, 8) == 8
    for world, size in ((2, 2), (4, 1), (4, 3), (2, None)):  # the world size, DeepSpeed's "off", no divisor
        with pytest.raises(ValueError, match="two or more groups of two or more ranks"):
            hpz_partition_size(world, size)


def test_the_deepspeed_config_of_hpz() -> None:
    import torch

    from shardscope.training.strategies import OptimConfig, deepspeed_config

    zero = deepspeed_config(3, 2, torch.bfloat16, OptimConfig(), hpz_partition=4)["zero_optimization"]
    assert zero["stage"] == 3 and zero["zero_hpz_partition_size"] == 4
    with pytest.raises(ValueError, match="ZeRO-3's, not stage 2's"):
        deepspeed_config(2, 2, torch.bfloat16, OptimConfig(), hpz_partition=4)
