"""The training worker, run on every rank by ``torchrun -m shardscope.training --spec FILE --out FILE``.

It reads its job whole from the spec file (a :class:`~shardscope.contracts.jobs.TrainingJob`, checked
by :func:`~shardscope.contracts.jobs.job_from_dict` where it is read, as everywhere it is built), joins
the process group with the spec's collective ``timeout_s``, builds the model under one strategy, runs
``warmup`` untimed steps and ``repeats`` timed windows of ``steps`` steps on synthetic tokens (median
and 95% interval over the windows: :mod:`shardscope.contracts.repeats`), counts the bytes each rank
holds after the first timed backward, and rank 0 writes the job's JSON atomically (into the launcher's
private folder: only the launcher publishes it). Weights start from the spec's ``seed`` on every rank
under every strategy, so per-step losses compare across strategies; the summary carries the measured bytes
per rank (the memory models beside them are the predictions stage's:
:func:`shardscope.costmodel.modeled.modeled_for_document`) and, with ``comm_profile``, the share of one
profiled step spent in communication (``comm_time_share``, else null). One more untimed step
counts the bytes of every collective (``summary.comm_bytes``, beside the ZeRO paper's volume),
and ``settings`` records the fair-comparison settings the strategy ran with. A rank that fails writes
a small error file beside the output and exits non-zero; :mod:`shardscope.training.launch` turns that
into a result with outcome ``oom`` or ``failed``.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import traceback
from typing import Any

import torch
import torch.distributed as dist

from shardscope.device import DistContext, Timer, environment, init_distributed, reset_peak_memory, synchronize
from shardscope.fileio import atomic_write_json, read_json
from shardscope.training.accumulation import accumulating
from shardscope.training.comm_bytes import count_step_collectives
from shardscope.training.host_calls import PythonCallCounter
from shardscope.contracts.comm_volume import comm_block
from shardscope.contracts.jobs import TrainingJob, job_from_dict
from shardscope.contracts.names import GROUPED_STRATEGIES
from shardscope.contracts.fairness import FairSettings
from shardscope.training.held_bytes import measure_held_bytes
from shardscope.training.memtrack import (
    cuda_memory_counters,
    dump_oom_snapshot,
    largest_rank_bytes,
    measured_peak,
    step_peak_bytes,
    memory_categories,
    record_memory_history,
    tracked_step,
)
from shardscope.training.model import synthetic_batch
from shardscope.contracts.peak_flops import peak_flops
from shardscope.contracts.repeats import summarize_repeats
from shardscope.training.strategies import OptimConfig, Prepared, prepare
from shardscope.training.checkpointing import apply_checkpointing
from shardscope.training.outcome_files import SCHEMA, error_path

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Flags of the worker: the job's spec file (what the launcher wrote), where rank 0 writes, and ``--cpu``."""
    p = argparse.ArgumentParser(prog="torchrun -m shardscope.training", description=__doc__)
    p.add_argument("--spec", required=True, help="the training job's spec, whole: a results/plan/jobs/{id}.json or the "
                                                 "file `shardscope train` / `shardscope job run` writes")
    p.add_argument("--cpu", action="store_true", help="force gloo on CPU even where CUDA exists")
    p.add_argument("--out", required=True)
    return p.parse_args(argv)


def read_spec(path: str, world_size: int) -> TrainingJob:
    """The training job of the spec file at ``path``, read through :func:`job_from_dict` (every field checked there,
    once); a ValueError naming the file when it is not a training job of this world size."""
    job = job_from_dict(read_json(path))
    if not isinstance(job, TrainingJob):
        raise ValueError(f"{path}: a {job.KIND} job spec, not a training job")
    if job.world_size != world_size:
        raise ValueError(f"{path}: the spec's world_size {job.world_size} is not the {world_size} ranks torchrun started")
    return job


def _timed(ctx: DistContext, fn: Any, *args: Any) -> tuple[Any, float]:
    timer = Timer(ctx)
    timer.start()
    result = fn(*args)
    return result, timer.stop()


def timed_step(prepared: Prepared, tokens: torch.Tensor, ctx: DistContext, measure_held: bool = False) -> tuple[torch.Tensor, float, Any]:
    """One training step as every job times it: align ranks, time forward+backward and the optimizer step.

    Returns the loss, this rank's step time and, when ``measure_held``, the bytes this rank
    holds after backward (counted outside the timed regions). The slowest rank's time per step
    is taken once after the loop (:func:`slowest_rank_s`), not with a collective per step.
    Shared with ``benchmarks/training_overhead.py`` so the overhead it reports is this code's.
    """
    synchronize(ctx)
    dist.barrier()
    loss, t_fb = _timed(ctx, prepared.forward_backward, tokens)
    held = measure_held_bytes(prepared.model, prepared.optimizer) if measure_held else None
    _, t_opt = _timed(ctx, prepared.step)
    return loss, t_fb + t_opt, held


def slowest_rank_s(local_s: list[float], ctx: DistContext) -> list[float]:
    """Per step, the largest of every rank's time: the step time the job reports."""
    times = torch.tensor(local_s, dtype=torch.float64, device=ctx.device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    return [float(t) for t in times.cpu()]


def train(job: TrainingJob, ctx: DistContext) -> dict[str, Any]:
    """Run ``job``'s warmup and timed steps; return its result document (complete on rank 0)."""
    model_name, cfg = job.resolved_model()
    dtype = DTYPES[job.dtype]
    fair = FairSettings(reduce_dtype=job.reduce_dtype, buckets=job.buckets)
    shard_size = job.shard_size or int(os.environ.get("LOCAL_WORLD_SIZE", ctx.world_size))
    prepared = accumulating(prepare(job.strategy, cfg, ctx, dtype, job.micro_batch, optim=OptimConfig(states=job.optimizer),
                                    seed=job.seed, fair=fair, shard_size=shard_size, grad_accum=job.grad_accum),
                            job.grad_accum)
    apply_checkpointing(prepared.model, job.activation_checkpointing)
    rows = job.micro_batch * job.grad_accum  # this rank's sequences per optimizer step
    # HSDP moves inside its group what FSDP over one shard group would; the ZeRO paper's volumes know FSDP
    modeled_as = "fsdp" if job.strategy == "hsdp" else job.strategy
    local_s, losses, held, step_peaks = [], [], None, []
    timed_steps = job.steps * job.repeats
    reset_peak_memory(ctx)
    gc.collect()
    gc.disable()
    try:
        for step in range(job.warmup + timed_steps):
            tokens = synthetic_batch(cfg, rows, job.seq_len, step, ctx.rank, ctx.device)
            loss, step_s, measured = timed_step(prepared, tokens, ctx, measure_held=step == job.warmup)
            held = measured or held
            if step >= job.warmup:
                local_s.append(step_s)
                losses.append(float(loss.float().item()))
                step_peaks.append(step_peak_bytes(ctx))
    finally:
        gc.enable()
    step_rows = [{"step": i, "step_time_s": t, "loss": loss_value, "repeat": i // job.steps, "peak_memory_bytes": peak_i}
                 for i, (t, loss_value, peak_i) in enumerate(zip(slowest_rank_s(local_s, ctx), losses,
                                                                 largest_rank_bytes(step_peaks, ctx)))]
    peak = measured_peak(ctx)
    memory = _tracked_memory(prepared, cfg, job, ctx)
    extra_step = job.warmup + timed_steps
    with PythonCallCounter() as host_calls:  # the untimed step that counts collectives also counts Python calls
        comm_rows = count_step_collectives(prepared, synthetic_batch(cfg, rows, job.seq_len, extra_step, ctx.rank, ctx.device),
                                           lambda: synchronize(ctx))
    comm_share = None
    if job.comm_profile:
        from shardscope.training.comm_profile import comm_time_share

        tokens = synthetic_batch(cfg, rows, job.seq_len, extra_step + 1, ctx.rank, ctx.device)
        try:
            comm_share = comm_time_share(prepared, tokens, ctx)
        except RuntimeError as exc:  # a profiler that cannot start (no CUPTI) leaves the share unmeasured
            print(f"rank {ctx.rank}: communication profile failed, comm_time_share is null: {exc}", file=sys.stderr)
    per_rank = [None] * ctx.world_size
    dist.all_gather_object(per_rank, {"rank": ctx.rank, **held.to_dict(), "peak_memory_bytes": peak["peak_memory_bytes"],
                                      "peak_memory_reserved_bytes": peak["peak_memory_reserved_bytes"], "comm_time_share": comm_share,
                                      **memory})
    tokens_per_step = job.tokens_per_step
    spread = summarize_repeats([r["step_time_s"] for r in step_rows], job.repeats, tokens_per_step)
    median_s = spread["median_step_time_s"]
    tokens_per_s = tokens_per_step / median_s
    settings = prepared.settings or {}
    env = environment(ctx)
    peak_f = peak_flops(env["devices"][0] if ctx.is_cuda else None)
    mfu = cfg.flops_per_token(job.seq_len) * tokens_per_s / (peak_f * ctx.world_size) if peak_f else None
    max_peak = max(r["peak_memory_bytes"] for r in per_rank)
    # the budget against CUDA's peak on GPU; on CPU against the tensor tracker's peak (the RSS counts the runtime too)
    budget_peak, budget_what = ((max_peak, peak["peak_memory_method"]) if ctx.is_cuda else
                                (max(r["tracked_peak_bytes"] for r in per_rank), "tracked tensor peak"))
    over = job.memory_budget_bytes is not None and budget_peak > job.memory_budget_bytes
    return {
        "schema": SCHEMA,
        "kind": "training",
        "job": {
            "job_id": job.job_id,
            "strategy": job.strategy,
            "model": model_name,
            "model_config": cfg.to_dict(),
            "param_count": cfg.param_count(),
            "world_size": ctx.world_size,
            "placement": job.placement,
            "transport": job.transport,
            "shard_size": shard_size if job.strategy in GROUPED_STRATEGIES else None,
            "dtype": job.dtype,
            "micro_batch": job.micro_batch,
            "grad_accum": job.grad_accum,
            "global_batch": rows * ctx.world_size,
            "seq_len": job.seq_len,
            "warmup": job.warmup,
            "steps": job.steps,
            "repeats": job.repeats,
            "memory_budget_bytes": job.memory_budget_bytes,
            "seed": job.seed,
            "deepspeed_config": prepared.deepspeed_config,
            "activation_checkpointing": job.activation_checkpointing,
            "optimizer": job.optimizer,
        },
        "settings": settings,
        "env": dict(env, deepspeed=_deepspeed_version()),
        "outcome": "over_budget" if over else "ok",
        "error": f"peak memory ({budget_what}) {budget_peak} B exceeds the budget of {job.memory_budget_bytes} B" if over else None,
        "summary": {
            "median_step_time_s": median_s,
            **{k: v for k, v in spread.items() if k != "median_step_time_s"},
            "tokens_per_step": tokens_per_step,
            "tokens_per_s": tokens_per_s,
            "mfu": mfu,
            "peak_flops": peak_f,
            "peak_memory_bytes": max_peak,
            "peak_memory_method": peak["peak_memory_method"],
            "peak_memory_reserved_bytes": max((r["peak_memory_reserved_bytes"] for r in per_rank
                                               if r["peak_memory_reserved_bytes"] is not None), default=None),
            "comm_time_share": _mean_or_none(r["comm_time_share"] for r in per_rank),
            "host_calls_per_step": host_calls.calls,
            "comm_bytes": comm_block(modeled_as, cfg.param_count(), settings.get("reduce_dtype", job.dtype),
                                     settings.get("gather_dtype"), comm_rows if ctx.rank == 0 else None, job.grad_accum),
            "memory_categories": memory_categories(per_rank),
        },
        "steps": step_rows,
        "ranks": per_rank,
    }


def _tracked_memory(prepared: Prepared, cfg: Any, job: TrainingJob, ctx: DistContext) -> dict[str, Any]:
    """This rank's memory by category from one extra, untimed step under the tensor tracker (and CUDA's counters)."""
    tokens = synthetic_batch(cfg, job.micro_batch * job.grad_accum, job.seq_len, job.warmup + job.steps, ctx.rank, ctx.device)
    synchronize(ctx)
    tracked, held_then = tracked_step(prepared, tokens)
    synchronize(ctx)
    state = held_then.param_bytes + held_then.grad_bytes + held_then.optim_bytes
    out: dict[str, Any] = {"activation_bytes": tracked.activation_bytes, "buffer_bytes": tracked.buffer_bytes,
                           "activation_peak_bytes": tracked.activation_peak_bytes,
                           "tracked_peak_bytes": state + tracked.transient_peak_bytes, "tracked_peak_phase": tracked.peak_phase}
    out.update(cuda_memory_counters(ctx.device) if ctx.is_cuda else
               {"reserved_minus_allocated_bytes": None, "max_reserved_bytes": None, "num_alloc_retries": None, "num_ooms": None})
    return out


def _mean_or_none(values: Any) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def _deepspeed_version() -> str | None:
    module = sys.modules.get("deepspeed")
    return getattr(module, "__version__", None) if module else None


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether a rank's failure is running out of memory (the launcher's ``oom`` row, not ``failed``):
    torch's OutOfMemoryError, or an error of a framework that wraps one and says so (DeepSpeed, NCCL)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower():
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m shardscope.training`` on one rank."""
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    try:
        job = read_spec(args.spec, int(os.environ.get("WORLD_SIZE", "1")))
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")  # a timed-out NCCL collective aborts, not hangs
        ctx = init_distributed(prefer_gpu=not args.cpu, timeout_s=job.timeout_s)
        if ctx.is_cuda:
            record_memory_history()
        doc = train(job, ctx)
        if ctx.rank == 0:
            atomic_write_json(args.out, doc)
        dist.barrier()
    except BaseException as exc:  # noqa: BLE001 - every failure becomes data for the launcher
        is_oom = is_out_of_memory(exc)
        snapshot = dump_oom_snapshot(f"{args.out}.rank{rank}.oom_snapshot.pickle") if is_oom else None
        atomic_write_json(error_path(args.out, rank), {"rank": rank, "oom": is_oom, "error": f"{type(exc).__name__}: {exc}",
                                                       "traceback": traceback.format_exc(), "memory_snapshot": snapshot})
        sys.stderr.write(traceback.format_exc())
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    # DeepSpeed sometimes aborts during interpreter teardown after a finished run; the
    # result is already on disk, so leave without running that teardown.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
