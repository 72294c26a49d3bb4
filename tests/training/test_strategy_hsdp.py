"""HSDP (FSDP2 on a 2-D mesh) on 2 real CPU ranks, mesh 1 x 2 (one run, to keep within the CI budget), and the
2 x 1 mesh (replicate across groups of one rank) checked as the mesh shape and the plan that cuts it from the groups."""

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

from shardscope.contracts.groups import hsdp_shard_size
from shardscope.costmodel.modeled import modeled_for_document
from shardscope.plan.conditions import emulated_groups
from shardscope.training.model import PRESETS
from shardscope.training.strategies import hsdp_mesh_shape

PSI = PRESETS["tiny"].param_count()


def run_hsdp(tmp: Path, shard_size: int) -> dict[str, Any]:
    """The worker under torchrun on 2 CPU ranks, tiny model, fp32, 1 warmup + 2 steps, seed 7."""
    out = tmp / f"hsdp-{shard_size}.json"
    spec = worker_spec(tmp, "--strategy", "hsdp", "--shard-size", str(shard_size), "--model", "tiny", "--nproc", "2",
                       "--warmup", "1", "--steps", "2", "--seed", "7")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "shardscope.training",
           "--spec", str(spec), "--cpu", "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    proc = subprocess.run(cmd, cwd=tmp, env=dict(env, SHARDSCOPE_THREADS_PER_RANK="1"), capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_hsdp(tmp_path_factory.mktemp("hsdp"), 2)


def test_mesh_1x2_shards_its_state_and_trains(sharded: dict[str, Any]) -> None:
    assert sharded["outcome"] == "ok" and sharded["settings"]["strategy"] == "hsdp"
    assert sharded["settings"]["mesh"] == {"replicate": 1, "shard": 2} and sharded["job"]["shard_size"] == 2
    for rank in sharded["ranks"]:  # fp32 shards of one half (FSDP2 pads dim 0 to a multiple of 2)
        assert rank["param_bytes"] == pytest.approx(4 * PSI / 2, rel=0.02)
        assert rank["grad_bytes"] == pytest.approx(4 * PSI / 2, rel=0.02)
    modeled = modeled_for_document(sharded)  # modeled as FSDP over one shard group: measured / modeled near 1
    assert modeled["implementation"]["measured_over_modeled"]["total_bytes"] == pytest.approx(1.0, rel=0.02)
    assert "shard group of 2 ranks" in modeled["modeled_as"]
    losses = [s["loss"] for s in sharded["steps"]]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses) and losses[1] != losses[0]


def test_the_plan_cuts_shard_groups_from_islands_and_switches() -> None:
    assert hsdp_shard_size([0, 0, 1, 1, 2, 2, 3, 3]) == 2  # 8 GPUs in NVL pairs: shard in a pair, replicate 4x
    assert hsdp_shard_size([0] * 8) == 8  # one NVSwitch island: HSDP is FSDP on the node
    assert hsdp_shard_size([0, 1]) == 1  # two ranks in two groups: mesh 2 x 1
    assert hsdp_shard_size([0, 1, 0, 1]) == 1  # interleaved groups: no consecutive block shares one
    definition = {"links": [{"a": "h0", "b": "s0"}, {"a": "h1", "b": "s0"}, {"a": "h2", "b": "s1"}, {"a": "h3", "b": "s1"},
                            {"a": "s0", "b": "s1"}], "placements": {"across_groups": ["h0", "h2"], "in_group": ["h0", "h1"]}}
    assert emulated_groups(definition, "across_groups") == [0, 1] and emulated_groups(definition, "in_group") == [0, 0]


def test_mesh_shape_of_a_shard_size() -> None:
    assert hsdp_mesh_shape(8, 2) == (4, 2) and hsdp_mesh_shape(2, 1) == (2, 1) and hsdp_mesh_shape(4, None) == (1, 4)
    with pytest.raises(ValueError, match="--shard-size 3 must divide the world size 4"):
        hsdp_mesh_shape(4, 3)
