"""Each data-parallel strategy behind one small interface: forward+backward, then step.

``ddp`` (torch DDP), ``fsdp`` (FSDP2 ``fully_shard``, full shard), ``fsdp_grad_op`` (FSDP2
without resharding after forward, ZeRO-2-like) and ``zero0``..``zero3`` (the DeepSpeed
engine). Mixed precision is bf16 compute with fp32 master weights where the dtype is bf16.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from shardscope.device import DistContext
from shardscope.contracts.names import STRATEGIES
from shardscope.training.model import GPT, ModelConfig

__all__ = ["STRATEGIES", "OptimConfig", "Prepared", "prepare", "seeded_model"]


@dataclass(frozen=True)
class OptimConfig:
    """AdamW hyper-parameters shared by every strategy."""

    lr: float = 3e-4
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1


@dataclass
class Prepared:
    """A model wrapped for one strategy, with its optimizer and the two calls of a step."""

    strategy: str
    model: nn.Module
    optimizer: Any
    forward_backward: Callable[[torch.Tensor], torch.Tensor]
    step: Callable[[], None]
    deepspeed_config: dict[str, Any] | None = None


def _autocast(ctx: DistContext, dtype: torch.dtype) -> contextlib.AbstractContextManager[Any]:
    if dtype == torch.bfloat16:
        return torch.autocast(device_type=ctx.device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def seeded_model(cfg: ModelConfig, seed: int, device: torch.device | None = None) -> GPT:
    """Build :class:`GPT` from ``seed`` so every rank and every strategy starts from the same weights.

    Why: losses of different strategies are comparable step by step only from identical
    initial weights; DDP broadcasts rank 0's weights, but FSDP shards and ZeRO-3's
    ``zero.Init`` partition whatever each rank built. With ``device`` the weights are created
    there directly (a 7 B model is not first built in host memory), drawn from that device's
    generator, which ``manual_seed`` seeds too.
    """
    torch.manual_seed(seed)
    if device is None:
        return GPT(cfg)
    with torch.device(device):
        return GPT(cfg)


def _adamw(params: Any, optim: OptimConfig) -> torch.optim.AdamW:
    return torch.optim.AdamW(params, lr=optim.lr, betas=optim.betas, eps=optim.eps, weight_decay=optim.weight_decay)


def prepare_ddp(cfg: ModelConfig, ctx: DistContext, dtype: torch.dtype, optim: OptimConfig, seed: int = 0) -> Prepared:
    """torch DDP: full fp32 replica per rank, one bucketed gradient all-reduce per step."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = seeded_model(cfg, seed, ctx.device)
    ddp = DDP(model, device_ids=[ctx.device] if ctx.is_cuda else None, gradient_as_bucket_view=True)
    opt = _adamw(ddp.parameters(), optim)

    def forward_backward(tokens: torch.Tensor) -> torch.Tensor:
        with _autocast(ctx, dtype):
            loss = ddp(tokens)
        loss.backward()
        return loss.detach()

    def step() -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Prepared("ddp", ddp, opt, forward_backward, step)


def prepare_fsdp(cfg: ModelConfig, ctx: DistContext, dtype: torch.dtype, optim: OptimConfig, reshard_after_forward: bool,
                 seed: int = 0) -> Prepared:
    """FSDP2: every block and the root ``fully_shard``-ed over a 1-D mesh of all ranks."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32) if dtype == torch.bfloat16 else MixedPrecisionPolicy()
    model = seeded_model(cfg, seed, ctx.device)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp)
    opt = _adamw(model.parameters(), optim)

    def forward_backward(tokens: torch.Tensor) -> torch.Tensor:
        loss = model(tokens)
        loss.backward()
        return loss.detach()

    def step() -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    name = "fsdp" if reshard_after_forward else "fsdp_grad_op"
    return Prepared(name, model, opt, forward_backward, step)


def deepspeed_config(stage: int, micro_batch: int, dtype: torch.dtype, optim: OptimConfig, bucket_elements: int) -> dict[str, Any]:
    """The DeepSpeed config JSON of a ZeRO ``stage`` run; saved verbatim with the results."""
    return {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 1_000_000,
        "wall_clock_breakdown": False,
        "optimizer": {
            "type": "AdamW",
            "params": {
                "lr": optim.lr,
                "betas": list(optim.betas),
                "eps": optim.eps,
                "weight_decay": optim.weight_decay,
                "torch_adam": True,
            },
        },
        "bf16": {"enabled": dtype == torch.bfloat16},
        "zero_optimization": {
            "stage": stage,
            "contiguous_gradients": True,
            "overlap_comm": False,
            "reduce_bucket_size": bucket_elements,
            "allgather_bucket_size": bucket_elements,
            "stage3_prefetch_bucket_size": bucket_elements,
            "stage3_param_persistence_threshold": 0,
        },
    }


def prepare_deepspeed(cfg: ModelConfig, ctx: DistContext, dtype: torch.dtype, optim: OptimConfig, stage: int, micro_batch: int,
                      seed: int = 0) -> Prepared:
    """The DeepSpeed engine with ZeRO ``stage`` (0 = plain data parallel through DeepSpeed)."""
    if not ctx.is_cuda:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed

    bucket = int(min(5e8, max(cfg.param_count(), 1_000_000)))
    ds_cfg = deepspeed_config(stage, micro_batch, dtype, optim, bucket)
    if stage == 3:
        with deepspeed.zero.Init(config_dict_or_path=ds_cfg):  # partitions each layer as it is built
            model = seeded_model(cfg, seed)
    else:
        model = seeded_model(cfg, seed, ctx.device)
    engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_cfg)

    def forward_backward(tokens: torch.Tensor) -> torch.Tensor:
        loss = engine(tokens)
        engine.backward(loss)
        return loss.detach()

    return Prepared(f"zero{stage}", engine.module, opt, forward_backward, engine.step, deepspeed_config=ds_cfg)


def prepare(strategy: str, cfg: ModelConfig, ctx: DistContext, dtype: torch.dtype, micro_batch: int, optim: OptimConfig | None = None,
            seed: int = 0) -> Prepared:
    """Build the model under ``strategy`` on this rank's device, its weights drawn from ``seed``."""
    optim = optim or OptimConfig()
    if strategy == "ddp":
        return prepare_ddp(cfg, ctx, dtype, optim, seed)
    if strategy in ("fsdp", "fsdp_grad_op"):
        return prepare_fsdp(cfg, ctx, dtype, optim, reshard_after_forward=strategy == "fsdp", seed=seed)
    if strategy in ("zero0", "zero1", "zero2", "zero3"):
        return prepare_deepspeed(cfg, ctx, dtype, optim, int(strategy[-1]), micro_batch, seed)
    raise ValueError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
