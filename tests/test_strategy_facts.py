"""contracts.strategies: one table of what each strategy does, read by the models and the worker (issue 34)."""

from __future__ import annotations

from shardscope.contracts import comm_volume, fairness, optimizers, strategies
from shardscope.contracts.names import STRATEGIES
from shardscope.costmodel import memory_model, step


def test_one_row_per_strategy_in_the_vocabulary_order() -> None:
    assert tuple(strategies.STRATEGY_FACTS) == STRATEGIES


def test_the_zero_paper_stages_and_volumes() -> None:
    """ZeRO paper: stage 1 shards the optimizer state, 2 also gradients, 3 also parameters; DDP 2Ψ, ZeRO-3 3Ψ."""
    sharded = {s: f.sharded for s, f in strategies.STRATEGY_FACTS.items()}
    assert sharded["ddp"] == sharded["zero0"] == (False, False, False)
    assert sharded["zero1"] == (False, False, True) and sharded["zero2"] == (False, True, True)
    assert sharded["zero3"] == sharded["fsdp"] == (True, True, True)
    assert {s: sum(t) for s, t in strategies.PAPER_TERMS.items()} == {
        "ddp": 2, "fsdp": 3, "fsdp_grad_op": 2, "zero0": 2, "zero1": 2, "zero2": 2, "zero3": 3, "zero3_hpz": 3}
    assert strategies.IMPLEMENTATION_TERMS["zero1"] == strategies.IMPLEMENTATION_TERMS["zero2"] == (2, 1)


def test_every_reader_takes_the_facts_from_the_table() -> None:
    """The constants once defined twice (fairness vs step, comm_volume vs memory_peak) are the table's."""
    assert memory_model.SHARDED is strategies.SHARDED
    assert comm_volume.PAPER_TERMS is strategies.PAPER_TERMS and comm_volume.PER_MICRO_BATCH is strategies.PER_MICRO_BATCH
    assert fairness.DDP_BUCKET_BYTES == step.DDP_BUCKET_BYTES == 25 * 2**20
    assert fairness.DEEPSPEED_BUCKET_ELEMENTS == step.DEEPSPEED_BUCKET_ELEMENTS == 500_000_000
    assert strategies.BF16_STATE_STRATEGIES == ("zero1", "zero2", "zero3")
    optimizers.check_optimizer("adamw_bf16_states", "zero2", "bfloat16")
