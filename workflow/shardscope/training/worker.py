"""The training worker, run on every rank by ``torchrun -m shardscope.training``.

It builds the model under one strategy, runs ``warmup`` untimed steps and ``steps`` timed
ones on synthetic tokens, counts the bytes each rank holds after the first timed backward,
and rank 0 writes the job's JSON atomically. A rank that fails writes a small error file
beside the output and exits non-zero; :mod:`shardscope.training.launch` turns that into a
result with outcome ``oom`` or ``failed``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import traceback
from typing import Any

import torch
import torch.distributed as dist

from shardscope.device import DistContext, Timer, environment, init_distributed, peak_memory_bytes, reset_peak_memory, synchronize
from shardscope.fileio import atomic_write_json
from shardscope.training.held_bytes import measure_held_bytes
from shardscope.training.model import resolve_model, synthetic_batch
from shardscope.training.peak_flops import peak_flops
from shardscope.training.strategies import STRATEGIES, prepare

SCHEMA = "shardscope.training/1"
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Flags of the worker; the launcher passes them through."""
    p = argparse.ArgumentParser(prog="torchrun -m shardscope.training", description=__doc__)
    p.add_argument("--strategy", required=True, choices=STRATEGIES)
    p.add_argument("--model", required=True, help="preset name or a JSON object of dimensions")
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.add_argument("--memory-budget-bytes", type=int, default=None)
    p.add_argument("--placement", default="local")
    p.add_argument("--job-id", default=None)
    p.add_argument("--cpu", action="store_true", help="force gloo on CPU even where CUDA exists")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    if args.warmup < 1 or args.steps < 1:
        p.error("--warmup and --steps must be at least 1 (optimizer state exists only after a step)")
    return args


def _model_spec(text: str) -> str | dict[str, Any]:
    return json.loads(text) if text.lstrip().startswith("{") else text


def _timed(ctx: DistContext, fn: Any, *args: Any) -> tuple[Any, float]:
    timer = Timer(ctx)
    timer.start()
    result = fn(*args)
    return result, timer.stop()


def train(args: argparse.Namespace, ctx: DistContext) -> dict[str, Any]:
    """Run warmup and timed steps; return the job document (complete on rank 0)."""
    model_name, cfg = resolve_model(_model_spec(args.model))
    dtype = DTYPES[args.dtype]
    prepared = prepare(args.strategy, cfg, ctx, dtype, args.micro_batch)
    step_rows, held = [], None
    reset_peak_memory(ctx)
    gc.collect()
    gc.disable()
    try:
        for step in range(args.warmup + args.steps):
            tokens = synthetic_batch(cfg, args.micro_batch, args.seq_len, step, ctx.rank, ctx.device)
            synchronize(ctx)
            dist.barrier()
            loss, t_fb = _timed(ctx, prepared.forward_backward, tokens)
            if step == args.warmup:
                held = measure_held_bytes(prepared.model, prepared.optimizer)
            _, t_opt = _timed(ctx, prepared.step)
            step_time = torch.tensor([t_fb + t_opt], dtype=torch.float64, device=ctx.device)
            dist.all_reduce(step_time, op=dist.ReduceOp.MAX)
            if step >= args.warmup:
                step_rows.append({"step": step - args.warmup, "step_time_s": float(step_time.item()), "loss": float(loss.float().item())})
    finally:
        gc.enable()
    peak, peak_method = peak_memory_bytes(ctx)
    per_rank = [None] * ctx.world_size
    dist.all_gather_object(per_rank, {"rank": ctx.rank, **held.to_dict(), "peak_memory_bytes": peak})
    tokens_per_step = args.micro_batch * args.seq_len * ctx.world_size
    median_s = statistics.median(r["step_time_s"] for r in step_rows)
    tokens_per_s = tokens_per_step / median_s
    env = environment(ctx)
    peak_f = peak_flops(env["devices"][0] if ctx.is_cuda else None)
    mfu = cfg.flops_per_token(args.seq_len) * tokens_per_s / (peak_f * ctx.world_size) if peak_f else None
    max_peak = max(r["peak_memory_bytes"] for r in per_rank)
    over = args.memory_budget_bytes is not None and max_peak > args.memory_budget_bytes
    return {
        "schema": SCHEMA,
        "kind": "training",
        "job": {
            "job_id": args.job_id or f"{args.strategy}-{model_name}-ws{ctx.world_size}-{args.placement}",
            "strategy": args.strategy,
            "model": model_name,
            "model_config": cfg.to_dict(),
            "param_count": cfg.param_count(),
            "world_size": ctx.world_size,
            "placement": args.placement,
            "dtype": args.dtype,
            "micro_batch": args.micro_batch,
            "seq_len": args.seq_len,
            "warmup": args.warmup,
            "steps": args.steps,
            "memory_budget_bytes": args.memory_budget_bytes,
            "deepspeed_config": prepared.deepspeed_config,
        },
        "env": dict(env, deepspeed=_deepspeed_version()),
        "outcome": "over_budget" if over else "ok",
        "error": f"peak memory {max_peak} B exceeds the budget of {args.memory_budget_bytes} B" if over else None,
        "summary": {
            "median_step_time_s": median_s,
            "tokens_per_step": tokens_per_step,
            "tokens_per_s": tokens_per_s,
            "mfu": mfu,
            "peak_flops": peak_f,
            "peak_memory_bytes": max_peak,
            "peak_memory_method": peak_method,
        },
        "steps": step_rows,
        "ranks": per_rank,
    }


def _deepspeed_version() -> str | None:
    module = sys.modules.get("deepspeed")
    return getattr(module, "__version__", None) if module else None


def error_path(out: str, rank: int) -> str:
    """Where rank ``rank`` leaves its error report for the launcher."""
    return f"{out}.rank{rank}.error.json"


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m shardscope.training`` on one rank."""
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    try:
        ctx = init_distributed(prefer_gpu=not args.cpu)
        doc = train(args, ctx)
        if ctx.rank == 0:
            atomic_write_json(args.out, doc)
        dist.barrier()
    except BaseException as exc:  # noqa: BLE001 - every failure becomes data for the launcher
        is_oom = isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()
        atomic_write_json(error_path(args.out, rank), {"rank": rank, "oom": is_oom, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
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
