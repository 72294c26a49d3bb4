"""Each data-parallel strategy behind one small interface: forward+backward, then step.

``ddp`` (torch DDP), ``fsdp`` (FSDP2 ``fully_shard``, full shard), ``fsdp_grad_op`` (FSDP2
without resharding after forward, ZeRO-2-like), ``hsdp`` (FSDP2 on a 2-D mesh: parameters
sharded inside groups of ``shard_size`` ranks, replicated across the groups),
``zero0``..``zero3`` (the DeepSpeed engine) and ``zero3_hpz`` (ZeRO-3 with ZeRO++'s hierarchical
partitioning: a second, 16-bit copy of the parameters sharded inside groups of ``shard_size`` ranks,
from which backward gathers inside the group). Mixed precision is bf16 compute with fp32 master weights where the dtype is bf16.

Each strategy runs at its framework's recommended settings and says so in
:attr:`Prepared.settings` (stored with every result; :mod:`shardscope.contracts.fairness`
describes the policy): DeepSpeed's own per-stage defaults (``overlap_comm`` on for stage 3
only, ZeRO-3 prefetch on), FSDP2's default prefetch, DDP's default buckets; the gradients are
reduced in one selectable dtype everywhere (DDP through its comm hook, FSDP2 through
``MixedPrecisionPolicy.reduce_dtype``, DeepSpeed through ``communication_data_type``).
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
from shardscope.contracts.fairness import DDP_BUCKET_BYTES, FairSettings, deepspeed_bucket_elements
from shardscope.contracts.strategies import WORKER_DDP_BUCKET_VIEW
from shardscope.training.model import GPT, ModelConfig

__all__ = ["STRATEGIES", "OptimConfig", "Prepared", "prepare", "seeded_model"]


@dataclass(frozen=True)
class OptimConfig:
    """AdamW hyper-parameters shared by every strategy."""

    lr: float = 3e-4
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    states: str = "adamw"
    """Optimizer-state variant (:mod:`shardscope.contracts.optimizers`): ``adamw`` or ``adamw_bf16_states``."""


@dataclass
class Prepared:
    """A model wrapped for one strategy, with its optimizer and the two calls of a step."""

    strategy: str
    model: nn.Module
    optimizer: Any
    forward_backward: Callable[[torch.Tensor], torch.Tensor]
    step: Callable[[], None]
    deepspeed_config: dict[str, Any] | None = None
    settings: dict[str, Any] | None = None
    """What this strategy ran with (dtypes, reduce dtype, overlap, prefetch, buckets), for the result document."""


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


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def bf16_wire_hook(process_group, bucket):  # noqa: ANN001, ANN201 - DDP checks the annotations, see below
    """DDP comm hook for CPU/gloo: average a gradient bucket in bf16 on the wire, write it back in the bucket's dtype.

    torch's ``bf16_compress_hook`` does the same but refuses to register without CUDA and
    NCCL; this one lets a CPU run reduce in bf16 too. DDP insists that the annotations be
    ``dist.GradBucket`` and a future; they are set after the definition (this module's
    annotations are strings).
    """
    import torch.distributed as dist

    group = process_group if process_group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    wire = buffer.to(torch.bfloat16).div_(group.size())
    future = dist.all_reduce(wire, group=group, async_op=True).get_future()

    def back(fut: Any) -> torch.Tensor:
        buffer.copy_(fut.value()[0])
        return buffer

    return future.then(back)


def _annotate_hook() -> None:
    import torch.distributed as dist

    bf16_wire_hook.__annotations__ = {"process_group": dist.ProcessGroup, "bucket": dist.GradBucket,
                                      "return": torch.futures.Future[torch.Tensor]}


_annotate_hook()


def prepare_ddp(cfg: ModelConfig, ctx: DistContext, dtype: torch.dtype, optim: OptimConfig, seed: int = 0,
                fair: FairSettings | None = None) -> Prepared:
    """torch DDP: full fp32 replica per rank, one bucketed gradient all-reduce per step.

    The all-reduce runs through a comm hook: torch's ``allreduce_hook`` for fp32 reduction,
    ``bf16_compress_hook`` for bf16 (:func:`bf16_wire_hook` on CPU; gradients cast to bf16 for the wire, back to fp32 after),
    so DDP can move the same bytes as a bf16 DeepSpeed run. Either hook calls
    ``torch.distributed.all_reduce`` from Python, where the byte counter sees it.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    fair = fair or FairSettings()
    reduce_dtype = fair.resolved_reduce_dtype(_dtype_name(dtype))
    model = seeded_model(cfg, seed, ctx.device)
    ddp = DDP(model, device_ids=[ctx.device] if ctx.is_cuda else None, gradient_as_bucket_view=WORKER_DDP_BUCKET_VIEW,
              bucket_cap_mb=DDP_BUCKET_BYTES / 2**20)
    bf16_hook = default_hooks.bf16_compress_hook if ctx.is_cuda else bf16_wire_hook
    hook = bf16_hook if reduce_dtype == "bfloat16" else default_hooks.allreduce_hook
    ddp.register_comm_hook(None, hook)
    opt = _adamw(ddp.parameters(), optim)
    settings = fair.describe("ddp", _dtype_name(dtype), param_dtype="float32", gather_dtype=None, overlap_comm=True,
                             prefetch="none (DDP gathers nothing)", reduce_bucket_bytes=DDP_BUCKET_BYTES,
                             allgather_bucket_bytes=None, comm_hook=hook.__name__)

    def forward_backward(tokens: torch.Tensor) -> torch.Tensor:
        with _autocast(ctx, dtype):
            loss = ddp(tokens)
        loss.backward()
        return loss.detach()

    def step() -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Prepared("ddp", ddp, opt, forward_backward, step, settings=settings)


def hsdp_mesh_shape(world_size: int, shard_size: int | None) -> tuple[int, int]:
    """(replicate, shard) of an HSDP run: ``shard_size`` ranks share one copy of the sharded state
    (consecutive ranks: a node's or an island's), the copies replicated across ``world_size // shard_size`` groups.

    ``shard_size`` None shards over all ranks (1 x world size). Raises ValueError when it does not divide the world size.
    """
    shard = world_size if shard_size is None else shard_size
    if shard < 1 or world_size % shard:
        raise ValueError(f"--shard-size {shard} must divide the world size {world_size}")
    return world_size // shard, shard


def prepare_fsdp(cfg: ModelConfig, ctx: DistContext, dtype: torch.dtype, optim: OptimConfig, reshard_after_forward: bool,
                 seed: int = 0, fair: FairSettings | None = None, shard_size: int | None = None,
                 hybrid: bool = False) -> Prepared:
    """FSDP2: every block and the root ``fully_shard``-ed over a 1-D mesh of all ranks, or with ``hybrid``
    (HSDP) over the 2-D (replicate, shard) mesh of :func:`hsdp_mesh_shape`: gradients reduce-scattered
    inside each shard group, then all-reduced across the groups.

    Parameters stay fp32 shards (the master weights); ``MixedPrecisionPolicy`` gathers them in
    the compute dtype and reduce-scatters gradients in the chosen reduce dtype. Prefetching is
    FSDP2's default (no explicit ``set_modules_to_*_prefetch``).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    fair = fair or FairSettings()
    reduce_dtype = fair.resolved_reduce_dtype(_dtype_name(dtype))
    shape = hsdp_mesh_shape(ctx.world_size, shard_size) if hybrid else None
    mesh = (init_device_mesh(ctx.device.type, shape, mesh_dim_names=("replicate", "shard")) if shape
            else init_device_mesh(ctx.device.type, (ctx.world_size,)))
    mp = MixedPrecisionPolicy(param_dtype=dtype if dtype == torch.bfloat16 else None, reduce_dtype=getattr(torch, reduce_dtype))
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

    name = "hsdp" if hybrid else "fsdp" if reshard_after_forward else "fsdp_grad_op"
    settings = fair.describe(name, _dtype_name(dtype), param_dtype="float32", gather_dtype=_dtype_name(dtype), overlap_comm=True,
                             prefetch="FSDP2 default (implicit: the next group's all-gather issued ahead, forward and backward)",
                             reduce_bucket_bytes=None, allgather_bucket_bytes=None, comm_hook=None)
    if shape:
        settings["mesh"] = {"replicate": shape[0], "shard": shape[1]}
    return Prepared(name, model, opt, forward_backward, step, settings=settings)


def deepspeed_config(stage: int, micro_batch: int, dtype: torch.dtype, optim: OptimConfig,
                     fair: FairSettings | None = None, grad_accum: int = 1, hpz_partition: int | None = None) -> dict[str, Any]:
    """The DeepSpeed config JSON of a ZeRO ``stage`` run; saved verbatim with the results.

    ``overlap_comm`` is left unset so DeepSpeed picks its own per-stage default (on for ZeRO-3
    only); bucket and prefetch sizes are DeepSpeed's defaults or, with ``fair.buckets ==
    "equal"``, DDP's 25 MiB (:mod:`shardscope.contracts.fairness`); gradients are reduced in
    ``communication_data_type``. Every parameter is partitioned under ZeRO-3 (persistence 0).
    ``hpz_partition`` (ZeRO-3 only) sets ZeRO++'s ``zero_hpz_partition_size``: the ranks of one
    secondary parameter partition (:func:`hpz_partition_size`).
    """
    from shardscope.contracts.optimizers import deepspeed_bf16_settings

    fair = fair or FairSettings()
    reduce_dtype = fair.resolved_reduce_dtype(_dtype_name(dtype))
    zero: dict[str, Any] = {"stage": stage, "contiguous_gradients": True, "stage3_param_persistence_threshold": 0}
    if hpz_partition is not None:
        if stage != 3:
            raise ValueError(f"hpZ's secondary partition is ZeRO-3's, not stage {stage}'s")
        zero["zero_hpz_partition_size"] = hpz_partition
    if fair.buckets == "equal":
        sizes = deepspeed_bucket_elements(fair, reduce_dtype, _dtype_name(dtype))
        zero.update(reduce_bucket_size=sizes["reduce"], allgather_bucket_size=sizes["allgather"],
                    stage3_prefetch_bucket_size=sizes["prefetch"])
    return {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": grad_accum,
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
        "bf16": {"enabled": dtype == torch.bfloat16, **deepspeed_bf16_settings(optim.states)},
        "communication_data_type": {"float32": "fp32", "bfloat16": "bf16"}[reduce_dtype],
        "zero_optimization": zero,
    }


def hpz_partition_size(world_size: int, shard_size: int | None) -> int:
    """hpZ's secondary partition on ``world_size`` ranks: ``shard_size`` consecutive ranks (an island's or a node's).

    DeepSpeed cuts groups of ``zero_hpz_partition_size`` consecutive ranks and keeps in each rank
    a 16-bit shard of the parameters over its group beside ZeRO-3's primary shard over all
    ranks. A size of 1 is DeepSpeed's "hpZ off"; a size equal to the world size is accepted by
    DeepSpeed but degenerate (the secondary shard duplicates the primary one and backward gathers
    over every rank, as ZeRO-3 does): both are refused here, so a ``zero3_hpz`` result always
    differs from ``zero3``. Raises ValueError otherwise when it does not divide the world size.
    """
    size = world_size if shard_size is None else shard_size
    if size < 2 or size >= world_size or world_size % size:
        raise ValueError(f"--shard-size {size}: hpZ's partition must divide the world size {world_size} "
                         "into two or more groups of two or more ranks")
    return size


def deepspeed_settings(engine: Any, stage: int, dtype: torch.dtype, fair: FairSettings) -> dict[str, Any]:
    """The settings block of a DeepSpeed run, read back from the engine (what DeepSpeed resolved, not what was asked)."""
    zero = engine._config.zero_config
    wire = 2 if dtype == torch.bfloat16 else 4
    reduce_bytes = 2 if fair.resolved_reduce_dtype(_dtype_name(dtype)) == "bfloat16" else 4
    prefetch = (f"stage3_prefetch_bucket_size={zero.prefetch_bucket_size} elements" if stage == 3 and zero.prefetch_bucket_size
                else "none (ZeRO-0..2 gather nothing before use)")
    hpz = int(zero.zero_hpz_partition_size)
    settings = fair.describe("zero3_hpz" if hpz > 1 else f"zero{stage}", _dtype_name(dtype), param_dtype=_dtype_name(dtype),
                             gather_dtype=_dtype_name(dtype) if stage > 0 else None, overlap_comm=bool(zero.overlap_comm),
                             prefetch=prefetch, reduce_bucket_bytes=int(zero.reduce_bucket_size) * reduce_bytes,
                             allgather_bucket_bytes=int(zero.allgather_bucket_size) * wire if stage in (1, 2) else None,
                             comm_hook=None)
    if hpz > 1:
        settings["hpz_partition_size"] = hpz
    return settings


def prepare_deepspeed(cfg: ModelConfig, ctx: DistContext, dtype: torch.dtype, optim: OptimConfig, stage: int, micro_batch: int,
                      seed: int = 0, fair: FairSettings | None = None, grad_accum: int = 1,
                      hpz_partition: int | None = None) -> Prepared:
    """The DeepSpeed engine with ZeRO ``stage`` (0 = plain data parallel through DeepSpeed), accumulating
    ``grad_accum`` micro-batches per optimizer step (:mod:`shardscope.training.accumulation`); with
    ``hpz_partition`` ZeRO-3's hpZ (``zero3_hpz``)."""
    if not ctx.is_cuda:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed

    fair = fair or FairSettings()
    ds_cfg = deepspeed_config(stage, micro_batch, dtype, optim, fair, grad_accum, hpz_partition)
    from shardscope.training.deepspeed_startup import quiet_known_warnings

    quiet_known_warnings()  # DeepSpeed's calls of deprecated torch collectives: a FutureWarning per call site and rank
    if stage == 3:
        with deepspeed.zero.Init(config_dict_or_path=ds_cfg):  # partitions each layer as it is built
            model = seeded_model(cfg, seed)
    else:
        model = seeded_model(cfg, seed, ctx.device)
    from shardscope.training.deepspeed_startup import skip_muon

    skip_muon(ds_cfg["optimizer"]["type"])  # AdamW needs no Muon; importing it loads TorchInductor (seconds per rank)
    engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_cfg)

    def forward_backward(tokens: torch.Tensor) -> torch.Tensor:
        loss = engine(tokens)
        engine.backward(loss)
        return loss.detach()

    settings = deepspeed_settings(engine, stage, dtype, fair)
    return Prepared(settings["strategy"], engine.module, opt, forward_backward, engine.step, deepspeed_config=ds_cfg,
                    settings=settings)


def prepare(strategy: str, cfg: ModelConfig, ctx: DistContext, dtype: torch.dtype, micro_batch: int, optim: OptimConfig | None = None,
            seed: int = 0, fair: FairSettings | None = None, shard_size: int | None = None, grad_accum: int = 1) -> Prepared:
    """Build the model under ``strategy`` on this rank's device, its weights drawn from ``seed``, under ``fair``'s policy
    (``shard_size``: the ranks of one HSDP shard group, all ranks when None; or of one hpZ secondary partition)."""
    optim = optim or OptimConfig()
    fair = fair or FairSettings()
    if strategy == "ddp":
        return prepare_ddp(cfg, ctx, dtype, optim, seed, fair)
    if strategy in ("fsdp", "fsdp_grad_op"):
        return prepare_fsdp(cfg, ctx, dtype, optim, reshard_after_forward=strategy == "fsdp", seed=seed, fair=fair)
    if strategy == "hsdp":
        return prepare_fsdp(cfg, ctx, dtype, optim, reshard_after_forward=True, seed=seed, fair=fair,
                            shard_size=shard_size, hybrid=True)
    if strategy in ("zero0", "zero1", "zero2", "zero3"):
        return prepare_deepspeed(cfg, ctx, dtype, optim, int(strategy[-1]), micro_batch, seed, fair, grad_accum)
    if strategy == "zero3_hpz":
        return prepare_deepspeed(cfg, ctx, dtype, optim, 3, micro_batch, seed, fair, grad_accum,
                                 hpz_partition=hpz_partition_size(ctx.world_size, shard_size))
    raise ValueError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
