"""Gradient accumulation: one global batch trained at different micro-batches gives the same losses and weights.

In-process on a 1-rank gloo group (milliseconds): DDP and FSDP2 at micro-batch 4 and at 2 x 2
accumulated step the optimizer with the same gradients. On 2 real ranks: FSDP2 at micro-batch 1
accumulating 2 against the session's DDP run at micro-batch 2 (tests/training/conftest.py, same
seed and data): the same per-step losses at the same global batch, and the result records it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from shardscope.training.accumulation import accumulating, check_grad_accum
from training.conftest import run_train


def test_grad_accum_must_be_a_positive_integer() -> None:
    assert check_grad_accum(3) == 3
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="--grad-accum"):
            check_grad_accum(bad)



@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_accumulated_step_equals_one_big_micro_batch(one_rank_group: Any, strategy: str) -> None:
    from shardscope.contracts.models import PRESETS
    from shardscope.device import DistContext
    from shardscope.training.model import synthetic_batch
    from shardscope.training.strategies import prepare

    ctx = DistContext(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"), backend="gloo")
    cfg = PRESETS["tiny"]
    tokens = synthetic_batch(cfg, 4, 16, 0, 0, ctx.device)
    grads, losses = {}, {}

    def full(t: torch.Tensor) -> torch.Tensor:
        return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().flatten().clone()

    for accum in (1, 2):
        prepared = accumulating(prepare(strategy, cfg, ctx, torch.float32, 4 // accum, seed=3, grad_accum=accum), accum)
        assert prepared.settings["grad_accum"] == accum
        params = list(prepared.model.parameters())
        # what the optimizer steps with (Adam's first step is sign-like, so compare its input, not the weights)
        prepared.optimizer.step = lambda *a, accum=accum, params=params, **k: grads.__setitem__(
            accum, torch.cat([full(p.grad) for p in params]))
        losses[accum] = float(prepared.forward_backward(tokens))
        prepared.step()
    assert losses[2] == pytest.approx(losses[1], rel=1e-5)
    assert torch.allclose(grads[1], grads[2], rtol=1e-4, atol=1e-7)
    with pytest.raises(ValueError, match="equal micro-batches"):
        prepared.forward_backward(tokens[:3])


def test_two_ranks_at_equal_global_batch_agree_across_strategies(strategy_runs: dict[str, dict[str, Any]]) -> None:
    tmp = strategy_runs["fsdp"]["dir"]
    proc, out, _ = run_train(tmp, "fsdp", "tiny", "fsdp-mb1x2", "--seed", "7", "--micro-batch", "1", "--grad-accum", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    ddp = strategy_runs["ddp"]["doc"]
    assert (doc["job"]["micro_batch"], doc["job"]["grad_accum"], doc["job"]["global_batch"]) == (1, 2, 4)
    assert ddp["job"]["global_batch"] == 4 and doc["summary"]["tokens_per_step"] == ddp["summary"]["tokens_per_step"]
    assert "reduce-scattered after every micro-batch" in doc["settings"]["accumulation"]
    ours, theirs = [s["loss"] for s in doc["steps"]], [s["loss"] for s in ddp["steps"]]
    assert len(ours) == len(theirs) == 2 and ours == pytest.approx(theirs, rel=1e-4)
    comm = doc["summary"]["comm_bytes"]  # both of FSDP's terms move after each of the 2 micro-batches
    assert comm["modeled"]["grad_accum"] == 2 and comm["measured_over_modeled"] == pytest.approx(1.0, rel=0.10), comm
