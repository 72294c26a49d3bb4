"""The one answer: one function for a strategy's whole peak, one for each strategy's best micro-batch.

``shardscope memory``, ``advise``, ``predict plan``, the decision map, the report's modeled bars and the
plan's sizing all ask the same question: *this model, this strategy, these GPUs, this micro-batch, sequence
length, dtype, checkpointing, trainable share and optimizer placement: how many bytes does one GPU peak at?*
:func:`job_peak` answers it (the memory model's :func:`~shardscope.costmodel.memory_peak.whole_peak`, fed
from :class:`~shardscope.costmodel.step.StepAssumptions`), so no two of them can give different bytes.
:func:`best_micro_batch` sizes a strategy at a global batch from those bytes, and the ranking
(:func:`shardscope.costmodel.advise.rank_strategies`, then :func:`shardscope.costmodel.decision.decide`) orders
strategies by the step of each at its own micro-batch.

Every number is *modeled*. ``peak_bytes`` is the whole modeled peak (model states, activations, buffers and the
memory model's overhead terms), compared with the usable share of the GPU's memory (:data:`PEAK_BASIS`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from shardscope.contracts.models import ModelConfig
from shardscope.contracts.strategies import dtype_bytes
from shardscope.costmodel.memory_peak import OptimizerAssumption, PeakTerms, model_states, whole_peak
from shardscope.costmodel.step import StepAssumptions

#: Training dtypes a question may name. float16 costs what bfloat16 costs (2-byte parameters, gradients and
#: activations; the same fp32 master and moments; the same tensor-core peak), so the memory model sizes it as bf16.
DTYPES = ("bfloat16", "float16", "float32")
#: What ``peak_bytes`` is, as the ``--json`` documents say it (``peak_basis``).
PEAK_BASIS = ("reserved: the whole modeled peak per GPU as the caching allocator reaches it: model states, "
              "activations, buffers, the allocator's reserve and the blocks it keeps cached in the room the usable "
              "memory leaves (not needed to fit: freed before an allocation fails); device_bytes adds the CUDA "
              "context and communicator buffers, and is what is checked against the usable share of the GPU's "
              "memory; allocated_peak_bytes is the peak of the tensors alive")


def memory_dtype(dtype: str) -> str:
    """The dtype the memory model sizes ``dtype`` as: float16 as bfloat16 (the same bytes), else itself."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return "bfloat16" if dtype == "float16" else dtype


def trainable_states(strategy: str, cfg: ModelConfig, gpus: int, dtype: str, fraction: float,
                     optimizer: OptimizerAssumption, shard_group: int | None = None) -> dict[str, int]:
    """Model-state bytes when only ``fraction`` of the parameters train (LoRA-style): every parameter held,
    gradients and optimizer state (master copy included) for the trainable share only. A frozen parameter is
    never updated, so it needs no fp32 copy: it is held in the training dtype (PEFT and LitGPT LoRA load the base
    weights so), the trainable share as the strategy holds its parameters.

    HSDP holds FSDP's states over its shard group; ZeRO-3 with hpZ its states plus the secondary partition.
    """
    group = shard_group or gpus
    if strategy == "hsdp":
        held = model_states("fsdp", cfg, group, dtype, "implementation", optimizer)
    else:
        held = model_states(strategy, cfg, gpus, dtype, "implementation", optimizer,
                            hpz_partition=group if strategy == "zero3_hpz" else None)
    from shardscope.costmodel.modeled import implementation_memory

    per_param = implementation_memory(1, "fsdp" if strategy == "hsdp" else strategy, 1, dtype)["bytes_per_param"]
    element = dtype_bytes(dtype)
    kept = fraction + (1 - fraction) * min(1.0, element / per_param["param_bytes"])  # sharded alike
    params = int(held["param_bytes"] * kept)
    return {"param_bytes": params, "grad_bytes": int(held["grad_bytes"] * fraction),
            "optim_bytes": int(held["optim_bytes"] * fraction)}


def job_peak(strategy: str, cfg: ModelConfig, gpus: int, a: StepAssumptions, shard_group: int | None = None, *,
             attention: str | None = None, optimizer: str = "adamw", overhead_fraction: float = 0.0,
             held: dict[str, int] | None = None, **run: Any) -> PeakTerms:
    """The whole modeled peak of one GPU running ``strategy`` on ``gpus`` GPUs with the step ``a`` describes.

    ``a`` gives the micro-batch, sequence length (the model's, capped at 4096, when None), dtype, activation
    checkpointing, trainable fraction, optimizer offload, DDP's ``gradient_as_bucket_view`` and the run's DeepSpeed
    config; ``shard_group`` is HSDP's shard group or hpZ's
    partition. ``attention``, ``optimizer`` (its moments' bytes), ``overhead_fraction`` and ``held`` (model states
    given outright, a user's bytes per parameter) are ``shardscope memory``'s further knobs; ``run`` a measured run's
    recorded settings (``device``, ``fair``, ``overlap_comm``: :mod:`shardscope.costmodel.memory_check`); at their
    defaults every caller gets the same bytes. ValueError names the argument on bad input.
    """
    dtype = memory_dtype(a.dtype)
    choice = OptimizerAssumption(name=optimizer, offload=a.offload_optimizer, implementation=a.adamw)
    if held is None and a.trainable_fraction < 1:
        held = trainable_states(strategy, cfg, gpus, dtype, a.trainable_fraction, choice, shard_group)
    if a.deepspeed is not None:  # the run's own DeepSpeed config, unless a measured run recorded its settings
        run = {"deepspeed": a.deepspeed, "overlap_comm": a.deepspeed.overlap_comm, **run}
    return whole_peak(strategy, cfg, gpus, a.seq_len_for(cfg), a.micro_batch, a.checkpointing, dtype=dtype,
                      attention=attention, optimizer=choice, overhead_fraction=overhead_fraction,
                      shard_group=shard_group, held=held, trainable_fraction=a.trainable_fraction,
                      ddp_bucket_view=a.ddp_bucket_view, **run)


def largest_fitting(fits: Callable[[int], bool], candidates: list[int] | None = None, limit: int = 65536) -> int:
    """The largest micro-batch ``fits`` accepts, 0 if none: the largest of ``candidates`` (checked largest first
    down to the first that fits), else up to ``limit`` by doubling then bisection (the peak grows with the
    micro-batch)."""
    if candidates is not None:
        return next((mb for mb in sorted(candidates, reverse=True) if fits(mb)), 0)
    if not fits(1):
        return 0
    low, high = 1, 2
    while high <= limit and fits(high):
        low, high = high, high * 2
    high = min(high, limit + 1)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n``, ascending."""
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def per_rank_batch(global_batch: int, data_parallel: int) -> int:
    """Sequences each data-parallel rank takes per optimizer step; ValueError unless the ranks divide
    ``global_batch``."""
    if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
        raise ValueError(f"--global-batch must be a positive integer, got {global_batch!r}")
    if global_batch % data_parallel:
        raise ValueError(f"--global-batch {global_batch} is not a multiple of the {data_parallel} data-parallel ranks; "
                         "micro_batch x grad_accum x ranks must equal it")
    return global_batch // data_parallel


def best_micro_batch(strategy: str, cfg: ModelConfig, gpus: int, a: StepAssumptions, usable_bytes: int | None,
                     global_batch: int, shard_group: int | None = None) -> tuple[int, int, bool | None]:
    """(micro-batch, gradient accumulation, fits) of ``strategy`` at ``global_batch`` sequences per optimizer step:
    the largest micro-batch whose whole peak (:func:`job_peak`) fits ``usable_bytes`` and divides each rank's share
    evenly (micro_batch x grad_accum x ranks = global batch). Nothing fits: micro-batch 1, fits False; memory
    unknown: the whole share in one micro-batch, fits None."""
    share = per_rank_batch(global_batch, gpus)
    if usable_bytes is None:
        return share, 1, None
    best = largest_fitting(lambda mb: job_peak(strategy, cfg, gpus, replace(a, micro_batch=mb), shard_group)
                           .fits(usable_bytes), divisors(share))
    return (best, share // best, True) if best else (1, share, False)


def smallest_holding(strategies: list[str], cfg: ModelConfig, gpus: int, a: StepAssumptions, usable_bytes: int,
                     shard_sizes: dict[str, int] | None = None, most_gpus: int = 4096) -> dict[str, Any]:
    """What a model that no strategy holds would need: the smallest peak (which strategy, at which micro-batch), the
    fewest GPUs (doubling ``gpus``, at most ``most_gpus``) at which any strategy fits and which one (the strategy with
    the smallest peak here need not be the one that shards best: ZeRO-2 keeps every parameter), and which strategy
    fits here with the optimizer offloaded to the CPU or with full activation checkpointing instead (None: none
    does). Where no GPU count holds it as asked (its activations alone outgrow the GPU: sharding divides the states,
    not them), the fewest GPUs with full activation checkpointing too, the two together."""
    def peak(s: str, n: int, step: StepAssumptions) -> PeakTerms:
        group = (shard_sizes or {}).get(s)
        return job_peak(s, cfg, n, step, group if group and n % group == 0 else None)

    peaks = {s: peak(s, gpus, a) for s in strategies}
    best = min(peaks, key=lambda s: peaks[s].device_bytes)
    by_peak = sorted(strategies, key=lambda s: peaks[s].device_bytes)

    def fewest(step: StepAssumptions) -> tuple[int | None, str | None]:
        n = gpus
        while n < most_gpus:
            n *= 2
            chosen = next((s for s in by_peak if peak(s, n, step).fits(usable_bytes)), None)
            if chosen:
                return n, chosen
        return None, None

    needed, needed_by = fewest(a)
    offloaded = {s: peak(s, gpus, replace(a, offload_optimizer="cpu")).device_bytes for s in strategies}
    recomputed = {s: peak(s, gpus, replace(a, checkpointing="full")).device_bytes for s in strategies}
    # checkpointing alone at these GPUs is its own answer; more GPUs with it only where neither holds it alone
    both, both_by = fewest(replace(a, checkpointing="full")) if needed is None and a.checkpointing == "none" \
        and min(recomputed.values()) > usable_bytes else (None, None)
    return {"smallest_peak_bytes": peaks[best].peak_bytes, "strategy": best, "micro_batch": a.micro_batch,
            "gpus": gpus, "usable_bytes": usable_bytes, "gpus_needed": needed, "strategy_needed": needed_by,
            "gpus_needed_with_checkpointing": both, "strategy_needed_with_checkpointing": both_by,
            "fits_with_offload": min(offloaded, key=offloaded.__getitem__)
            if min(offloaded.values()) <= usable_bytes and a.offload_optimizer == "none" else None,
            "fits_with_checkpointing": min(recomputed, key=recomputed.__getitem__)
            if min(recomputed.values()) <= usable_bytes and a.checkpointing == "none" else None,
            "method": "modeled"}
