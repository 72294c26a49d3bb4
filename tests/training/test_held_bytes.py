"""Bytes held in parameters, gradients and optimizer state, counted from the tensors themselves.

Runs in this process on a gloo process group of world size 1 (file rendezvous in tmp_path).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from shardscope.training.held_bytes import (
    HeldBytes,
    count_storages,
    innermost_optimizer,
    local_tensor,
    measure_held_bytes,
)
from shardscope.training.model import GPT, ModelConfig, synthetic_batch

SMALL = ModelConfig(n_layers=1, d_model=32, n_heads=4, n_kv_heads=2, d_ff=64, vocab_size=64)
TIED = ModelConfig(n_layers=1, d_model=32, n_heads=4, n_kv_heads=4, d_ff=48, vocab_size=80, tie_embeddings=True)


@pytest.fixture
def gloo_group(tmp_path: Path) -> Iterator[None]:
    assert not dist.is_initialized()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _train_step_then_backward(module: torch.nn.Module, cfg: ModelConfig, opt: torch.optim.Optimizer) -> None:
    tokens = synthetic_batch(cfg, 2, 8, step=0, rank=0, device=torch.device("cpu"))
    module(tokens).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    module(tokens).backward()


@pytest.mark.parametrize("wrap", ["plain", "ddp_bucket_views"])
def test_adamw_holds_4_4_8_bytes_per_parameter(gloo_group: None, wrap: str) -> None:
    torch.manual_seed(0)
    model = GPT(SMALL)
    psi = SMALL.param_count()
    n_tensors = len(list(model.parameters()))
    module = DDP(model, gradient_as_bucket_view=True) if wrap == "ddp_bucket_views" else model
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3)
    _train_step_then_backward(module, SMALL, opt)

    if wrap == "ddp_bucket_views":  # the gradients really are views into fewer flat buckets
        assert len(count_storages(p.grad for p in model.parameters())[1]) < n_tensors

    held = measure_held_bytes(module, opt)
    assert isinstance(held, HeldBytes)
    assert held.param_bytes == 4 * psi
    assert held.grad_bytes == 4 * psi  # DDP's bucket views count as their buckets, once
    # exp_avg + exp_avg_sq (8 psi) plus one small 'step' tensor per parameter tensor
    assert 8 * psi <= held.optim_bytes <= 8 * psi + 8 * n_tensors
    assert held.to_dict() == {"param_bytes": held.param_bytes, "grad_bytes": held.grad_bytes,
                              "optim_bytes": held.optim_bytes}


def test_nothing_but_parameters_before_the_first_step(gloo_group: None) -> None:
    model = GPT(SMALL)
    opt = torch.optim.AdamW(model.parameters())
    assert measure_held_bytes(model, opt) == HeldBytes(4 * SMALL.param_count(), 0, 0)


def test_tied_weights_count_once(gloo_group: None) -> None:
    model = GPT(TIED)
    opt = torch.optim.AdamW(model.parameters())
    _train_step_then_backward(model, TIED, opt)
    held = measure_held_bytes(model, opt)
    assert held.param_bytes == 4 * TIED.param_count()
    assert held.grad_bytes == 4 * TIED.param_count()


def test_bf16_parameters_are_counted_at_two_bytes(gloo_group: None) -> None:
    model = GPT(SMALL).to(torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # no state
    held = measure_held_bytes(model, opt)
    assert held == HeldBytes(2 * SMALL.param_count(), 0, 0)


def test_optimizer_inside_wrappers_is_found() -> None:
    param = torch.nn.Parameter(torch.zeros(4))
    inner = torch.optim.AdamW([param])

    class Wrapper:
        def __init__(self, optimizer: object) -> None:
            self.optimizer = optimizer

    assert innermost_optimizer(Wrapper(Wrapper(inner))) is inner
    assert innermost_optimizer(inner) is inner
    with pytest.raises(TypeError, match="no torch optimizer"):
        innermost_optimizer(object())


def test_count_storages_dedupes_views_of_one_flat_buffer() -> None:
    flat = torch.zeros(100)  # 400 bytes
    views = [flat[:10], flat[10:60], flat[60:].view(8, 5), flat]
    total, keys = count_storages(views)
    assert total == 400 and len(keys) == 1


def test_count_storages_counts_separate_tensors_and_whole_storages() -> None:
    a, b = torch.zeros(10), torch.zeros(5, dtype=torch.float64)
    total, keys = count_storages([a, b, a])
    assert total == 40 + 40 and len(keys) == 2
    # a small view counts its whole storage: padding/flattening by a strategy is included
    big = torch.zeros(256)
    assert count_storages([big[:1]])[0] == 1024


def test_count_storages_excludes_and_skips_empty() -> None:
    a, b = torch.zeros(10), torch.zeros(20)
    _, a_keys = count_storages([a])
    total, keys = count_storages([a, b, torch.empty(0)], exclude=a_keys)
    assert total == 80 and len(keys) == 1


def test_local_tensor_of_a_plain_tensor_is_itself() -> None:
    t = torch.zeros(3)
    assert local_tensor(t) is t


def test_master_partition_outside_param_groups_is_optimizer_state() -> None:
    """ZeRO-3 empties the torch optimizer's param_groups between steps; its fp32 master still counts."""
    param = torch.nn.Parameter(torch.zeros(10))
    inner = torch.optim.AdamW([param])
    inner.param_groups[0]["params"] = []  # as DeepSpeed's stage 3 leaves it outside step()

    class Stage3Like:
        def __init__(self) -> None:
            self.optimizer = inner
            self.fp32_partitioned_groups_flat = [torch.zeros(100)]

    model = torch.nn.Linear(2, 2, bias=False)
    held = measure_held_bytes(model, Stage3Like())
    assert held == HeldBytes(param_bytes=4 * 4, grad_bytes=0, optim_bytes=400)
