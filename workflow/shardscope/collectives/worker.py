"""The collective benchmark worker, run on every rank by ``torchrun -m shardscope.collectives``.

Per message size: warmup calls, a barrier, a timed loop of ``iters`` calls, then the
per-call time of each rank is gathered; rank 0 keeps the mean (nccl-tests' time) and the
max, and writes one JSON document for the job, atomically, only after every size succeeded.
"""

from __future__ import annotations

import argparse
import gc
import sys
from typing import Any

import torch
import torch.distributed as dist

from shardscope.collectives.factors import OPS, algbw_gbps, busbw_gbps
from shardscope.collectives.ops import check_result, op_call
from shardscope.collectives.sweep import DTYPES, make_buffers, message_sizes
from shardscope.device import DistContext, Timer, environment, init_distributed, synchronize
from shardscope.fileio import atomic_write_json

SCHEMA = "shardscope.collectives/1"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags of the worker, named after nccl-tests' where one exists."""
    p = argparse.ArgumentParser(prog="torchrun -m shardscope.collectives", description=__doc__)
    p.add_argument("--op", required=True, choices=OPS)
    p.add_argument("--min-bytes", "-b", type=int, default=1024)
    p.add_argument("--max-bytes", "-e", type=int, default=16 * 1024 * 1024)
    p.add_argument("--factor", "-f", type=int, default=4)
    p.add_argument("--dtype", "-d", default="float32", choices=sorted(DTYPES))
    p.add_argument("--warmup", "-w", type=int, default=2)
    p.add_argument("--iters", "-n", type=int, default=5)
    p.add_argument("--check", "-c", action="store_true", help="verify each result once before timing")
    p.add_argument("--placement", default="local", help="label of the GPU placement (from the plan)")
    p.add_argument("--transport", default="default", help="label of the transport (from the plan)")
    p.add_argument("--job-id", default=None)
    p.add_argument("--cpu", action="store_true", help="force gloo on CPU even where CUDA exists")
    p.add_argument("--out", required=True, help="JSON file rank 0 writes")
    return p.parse_args(argv)


def time_op(ctx: DistContext, op: str, size: int, dtype: torch.dtype, warmup: int, iters: int, check: bool) -> dict[str, Any]:
    """Time ``iters`` calls of ``op`` at ``size`` bytes; returns the row (on every rank)."""
    buffers = make_buffers(op, size, ctx.world_size, dtype, ctx.device)
    call = op_call(op, buffers, ctx.rank, ctx.world_size)
    ok: bool | None = None
    if check:
        flag = torch.tensor([1.0 if check_result(op, buffers, ctx.rank, ctx.world_size) else 0.0], device=ctx.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        ok = bool(flag.item() == 1.0)
    for _ in range(warmup):
        call()
    synchronize(ctx)
    dist.barrier()
    timer = Timer(ctx)
    timer.start()
    for _ in range(iters):
        call()
    per_call_s = timer.stop() / iters
    times = torch.tensor([per_call_s], dtype=torch.float64, device=ctx.device)
    gathered = [torch.zeros_like(times) for _ in range(ctx.world_size)]
    dist.all_gather(gathered, times)
    per_rank = [float(t.item()) for t in gathered]
    mean_s = sum(per_rank) / len(per_rank)
    return {
        "op": op,
        "world_size": ctx.world_size,
        "dtype": next(name for name, d in DTYPES.items() if d == dtype),
        "size_bytes": buffers.size_bytes,
        "count": buffers.count,
        "iters": iters,
        "warmup": warmup,
        "time_s": mean_s,
        "time_max_s": max(per_rank),
        "algbw_gbps": algbw_gbps(buffers.size_bytes, mean_s),
        "busbw_gbps": busbw_gbps(op, ctx.world_size, buffers.size_bytes, mean_s),
        "in_place": op in ("all_reduce", "broadcast", "reduce"),
        "check_ok": ok,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the whole sweep and return the job document (meaningful on rank 0)."""
    ctx = init_distributed(prefer_gpu=not args.cpu)
    dtype = DTYPES[args.dtype]
    rows = []
    gc.disable()  # no collector pauses inside timed loops
    try:
        for size in message_sizes(args.min_bytes, args.max_bytes, args.factor):
            rows.append(time_op(ctx, args.op, size, dtype, args.warmup, args.iters, args.check))
            gc.collect()
    finally:
        gc.enable()
    doc = {
        "schema": SCHEMA,
        "kind": "collectives",
        "job": {
            "job_id": args.job_id or f"{args.op}-ws{ctx.world_size}-{args.placement}-{args.transport}",
            "op": args.op,
            "world_size": ctx.world_size,
            "placement": args.placement,
            "transport": args.transport,
            "dtype": args.dtype,
            "min_bytes": args.min_bytes,
            "max_bytes": args.max_bytes,
            "factor": args.factor,
            "warmup": args.warmup,
            "iters": args.iters,
        },
        "env": environment(ctx),
        "rows": rows,
    }
    if ctx.rank == 0:
        atomic_write_json(args.out, doc)
    dist.barrier()
    dist.destroy_process_group()
    return doc


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m shardscope.collectives``."""
    run(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
