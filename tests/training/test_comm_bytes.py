"""Bytes per collective per step: the ZeRO paper's volumes, the counter, and the measured runs against them.

The measured part reuses the session's 2-rank runs (tests/training/conftest.py): DDP and FSDP
must move the paper's 2Ψ and 3Ψ within 10%; DeepSpeed ZeRO-2 at its default multi-rank bucket
all-reduce moves 3Ψ, its implementation's volume, which is 1.5x the paper's 2Ψ.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist

from shardscope.training.comm_bytes import CollectiveCounter, tensor_bytes
from shardscope.contracts.comm_volume import comm_block, implementation_volume, paper_volume, volume_bytes

PSI = 787_072  # the tiny preset's parameters


def test_paper_volumes_per_strategy() -> None:
    assert paper_volume("ddp", 100, "float32", None)["volume_bytes"] == 2 * 100 * 4
    assert paper_volume("ddp", 100, "bfloat16", None)["volume_bytes"] == 2 * 100 * 2  # bf16 reduction halves DDP's bytes
    assert paper_volume("zero2", 100, "float32", "float32")["psi_factor"] == 2
    fsdp = paper_volume("fsdp", 100, "float32", "bfloat16")
    assert (fsdp["psi_factor"], fsdp["volume_bytes"]) == (3, 100 * 4 + 2 * 100 * 2)
    assert paper_volume("fsdp_grad_op", 100, "float32", "float32")["psi_factor"] == 2
    assert implementation_volume("zero2", 100, "float32", "float32")["psi_factor"] == 3
    assert implementation_volume("zero3", 100, "float32", "float32")["psi_factor"] == 2  # kept for reuse
    assert implementation_volume("zero3", 10**9, "float32", "float32") is None  # beyond the reuse distance: not modeled
    assert volume_bytes("all_reduce", 10) == 20 and volume_bytes("all_gather", 10) == 10


def test_volumes_per_accumulated_step() -> None:
    """DDP's no_sync reduces once per optimizer step; FSDP moves both terms after every micro-batch; ZeRO-2 its gradients."""
    assert comm_block("ddp", 100, "float32", None, None, grad_accum=4)["modeled"]["volume_bytes"] == 2 * 100 * 4
    fsdp = comm_block("fsdp", 100, "float32", "float32", None, grad_accum=4)["modeled"]
    assert fsdp["volume_bytes"] == 4 * 3 * 100 * 4 and fsdp["grad_accum"] == 4 and "moved after each" in fsdp["formula"]
    zero2 = comm_block("zero2", 100, "float32", "float32", None, grad_accum=3)
    assert zero2["modeled"]["volume_bytes"] == (3 * 1 + 1) * 100 * 4  # reduce-scatter per micro-batch, one all-gather
    assert zero2["implementation"]["volume_bytes"] == (3 * 2 + 1) * 100 * 4
    assert comm_block("zero1", 100, "float32", "float32", None, grad_accum=1) == comm_block("zero1", 100, "float32", "float32", None)


def test_comm_block_ratios_and_unmeasured() -> None:
    rows = [{"op": "all_reduce", "dtype": "float32", "calls": 1, "size_bytes": 400, "volume_bytes": 800}]
    block = comm_block("ddp", 100, "float32", None, rows)
    assert block["measured"]["volume_bytes"] == 800 and block["measured_over_modeled"] == 1.0
    assert comm_block("ddp", 100, "float32", None, None)["measured"] is None


def test_tensor_bytes_of_nested_lists() -> None:
    assert tensor_bytes(torch.zeros(3, dtype=torch.bfloat16)) == (6, "bfloat16")
    assert tensor_bytes([torch.zeros(2), [torch.zeros(1)]]) == (12, "float32")
    assert tensor_bytes(None) == (0, None)



def test_counter_counts_each_collective_once_and_restores(one_rank_group: Any) -> None:
    original = dist.all_reduce
    with CollectiveCounter() as counter:
        dist.all_reduce(torch.ones(10))
        dist.all_gather_into_tensor(torch.zeros(8), torch.ones(8))  # deprecated alias of all_gather_single: nested, counted once
        dist.reduce_scatter_tensor(torch.zeros(4), torch.ones(4))
    assert dist.all_reduce is original
    rows = {(r["op"], r["dtype"]): r for r in counter.rows()}
    assert rows[("all_reduce", "float32")] == {"op": "all_reduce", "dtype": "float32", "calls": 1, "size_bytes": 40, "volume_bytes": 80}
    assert rows[("all_gather", "float32")]["calls"] == 1 and rows[("all_gather", "float32")]["size_bytes"] == 32
    assert rows[("reduce_scatter", "float32")]["size_bytes"] == 16
    dist.all_reduce(torch.ones(2))  # after the block: not counted
    assert sum(r["calls"] for r in counter.rows()) == 3


def test_ddp_bf16_reduction_moves_half_the_bytes(one_rank_group: Any) -> None:
    from shardscope.device import DistContext
    from shardscope.training.comm_bytes import count_step_collectives
    from shardscope.contracts.fairness import FairSettings
    from shardscope.training.model import synthetic_batch
    from shardscope.training.strategies import OptimConfig, prepare_ddp
    from shardscope.contracts.models import PRESETS

    ctx = DistContext(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"), backend="gloo")
    cfg = PRESETS["tiny"]
    volumes = {}
    for reduce_dtype in ("float32", "bfloat16"):
        prepared = prepare_ddp(cfg, ctx, torch.float32, OptimConfig(), fair=FairSettings(reduce_dtype=reduce_dtype))
        rows = count_step_collectives(prepared, synthetic_batch(cfg, 1, 16, 0, 0, ctx.device), lambda: None)
        assert prepared.settings["reduce_dtype"] == reduce_dtype
        assert prepared.settings["comm_hook"] == ("bf16_wire_hook" if reduce_dtype == "bfloat16" else "allreduce_hook")
        assert {r["dtype"] for r in rows} == {reduce_dtype}
        volumes[reduce_dtype] = sum(r["volume_bytes"] for r in rows)
    assert volumes["float32"] == paper_volume("ddp", PSI, "float32", None)["volume_bytes"]
    assert volumes["bfloat16"] == volumes["float32"] // 2


def _comm(runs: dict[str, dict[str, Any]], strategy: str) -> dict[str, Any]:
    return runs[strategy]["doc"]["summary"]["comm_bytes"]


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "fsdp_grad_op"])
def test_measured_bytes_match_the_zero_paper(strategy_runs: dict[str, dict[str, Any]], strategy: str) -> None:
    comm = _comm(strategy_runs, strategy)
    print(f"\n{strategy}: measured {comm['measured']['volume_bytes']} B, paper {comm['modeled']['volume_bytes']} B, "
          f"ratio {comm['measured_over_modeled']:.4f}")
    assert comm["measured"]["volume_bytes"] > 0
    assert comm["measured_over_modeled"] == pytest.approx(1.0, rel=0.10), comm
    assert comm["modeled"]["psi_factor"] == {"ddp": 2, "fsdp": 3, "fsdp_grad_op": 2}[strategy]


def test_zero2_moves_its_implementations_volume(strategy_runs: dict[str, dict[str, Any]]) -> None:
    comm = _comm(strategy_runs, "zero2")
    print(f"\nzero2: measured {comm['measured']['volume_bytes']} B, implementation {comm['implementation']['volume_bytes']} B "
          f"(ratio {comm['measured_over_implementation']:.4f}), paper {comm['modeled']['volume_bytes']} B "
          f"(ratio {comm['measured_over_modeled']:.4f}); per op {comm['measured']['per_op']}")
    assert comm["measured_over_implementation"] == pytest.approx(1.0, rel=0.10), comm
    assert comm["measured_over_modeled"] == pytest.approx(1.5, rel=0.10)  # gradient buckets all-reduced, not reduce-scattered
    ops = {r["op"] for r in comm["measured"]["per_op"]}
    assert {"all_reduce", "all_gather"} <= ops


def test_zero3_runs_with_overlap_and_prefetch_and_counts_its_bytes(strategy_runs: dict[str, dict[str, Any]]) -> None:
    doc = strategy_runs["zero3"]["doc"]
    settings = doc["settings"]
    assert settings["overlap_comm"] is True and "stage3_prefetch_bucket_size=50000000" in settings["prefetch"]
    assert "overlap_comm" not in doc["job"]["deepspeed_config"]["zero_optimization"]  # DeepSpeed's own default chose it
    comm = _comm(strategy_runs, "zero3")
    assert {r["op"] for r in comm["measured"]["per_op"]} >= {"all_gather", "reduce_scatter"}
    assert comm["measured_over_implementation"] == pytest.approx(1.0, rel=0.10), comm
    for strategy in ("zero0", "zero1", "zero2"):  # DeepSpeed leaves overlap off below stage 3
        assert strategy_runs[strategy]["doc"]["settings"]["overlap_comm"] is False


def test_every_strategy_states_one_precision_policy(strategy_runs: dict[str, dict[str, Any]]) -> None:
    for strategy, run in strategy_runs.items():
        settings = run["doc"]["settings"]
        assert (settings["master_dtype"], settings["optimizer_state_dtype"]) == ("float32", "float32"), strategy
        assert settings["reduce_dtype"] == "float32" and settings["bucket_policy"] == "framework_default", strategy
