"""The collective benchmark worker, run on every rank by ``torchrun -m shardscope.collectives``.

Per message size: warmup calls, a barrier, a timed loop of ``iters`` calls, then the
per-call time of each rank is gathered; rank 0 keeps the mean (nccl-tests' time) and the
max, and writes one JSON document for the job, atomically, only after every size succeeded.

Every collective is bounded by ``--timeout-s``: a rank that never joins or hangs makes the
others fail with a message naming the job, instead of hanging the pipeline. (For tests only:
``SHARDSCOPE_TEST_HANG_RANK=R`` makes rank R sleep before its first collective.)
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import traceback
from typing import Any

import torch
import torch.distributed as dist

from shardscope.contracts.factors import OPS, algbw_gbps, busbw_gbps
from shardscope.collectives.ops import count_wrong, op_call
from shardscope.collectives.sweep import DTYPES, make_buffers, message_sizes
from shardscope.device import DistContext, Timer, environment, init_distributed, synchronize
from shardscope.fileio import atomic_write_json

SCHEMA = "shardscope.collectives/1"
#: Default bound on one collective, in seconds (NCCL's own default is 10 minutes).
DEFAULT_TIMEOUT_S = 300.0
#: Test hook: the rank named here sleeps this long before its first collective.
HANG_RANK_ENV = "SHARDSCOPE_TEST_HANG_RANK"
HANG_S = 3600.0


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
    p.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S,
                   help="fail when one collective takes longer than this (a rank did not join or hung)")
    p.add_argument("--out", required=True, help="JSON file rank 0 writes")
    args = p.parse_args(argv)
    if not args.timeout_s > 0:
        p.error(f"--timeout-s must be a positive number of seconds, got {args.timeout_s}")
    if args.warmup < 0 or args.iters < 1:
        p.error(f"--warmup must be >= 0 and --iters >= 1, got {args.warmup} and {args.iters}")
    try:
        message_sizes(args.min_bytes, args.max_bytes, args.factor)
    except ValueError as exc:
        p.error(f"{exc}; expected 1 <= -b <= -e and -f >= 2")
    return args


def time_op(ctx: DistContext, op: str, size: int, dtype: torch.dtype, warmup: int, iters: int, check: bool) -> dict[str, Any]:
    """Time ``iters`` calls of ``op`` at ``size`` bytes; returns the row (on every rank).

    Buffers and the call are prepared before the clock starts and the garbage collector is
    off from warmup to the end of the timed loop, so the loop pays for the collective alone.
    """
    buffers = make_buffers(op, size, ctx.world_size, dtype, ctx.device)
    call = op_call(op, buffers, ctx.rank, ctx.world_size)
    wrong: int | None = None
    if check:
        count = torch.tensor([count_wrong(op, buffers, ctx.rank, ctx.world_size)], dtype=torch.int64, device=ctx.device)
        dist.all_reduce(count)  # summed over ranks, as nccl-tests' #wrong
        wrong = int(count.item())
    timer = Timer(ctx)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(warmup):
            call()
        synchronize(ctx)
        dist.barrier()
        timer.start()
        for _ in range(iters):
            call()
        per_call_s = timer.stop() / iters
    finally:
        if gc_was_enabled:
            gc.enable()
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
        "check_ok": None if wrong is None else wrong == 0,
        "wrong": wrong,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the whole sweep and return the job document (meaningful on rank 0)."""
    ctx = init_distributed(prefer_gpu=not args.cpu, timeout_s=args.timeout_s)
    if os.environ.get(HANG_RANK_ENV) == str(ctx.rank):
        time.sleep(HANG_S)  # test hook: this rank never reaches the first collective in time
    dtype = DTYPES[args.dtype]
    rows = []
    # Everything alive now (torch's modules, the process group) stays for the whole sweep: frozen, it is
    # left out of the collections between sizes, which then scan only the sweep's own objects (a full
    # collection over torch's object graph took 0.2-0.7 s per size here, seconds per job).
    gc.freeze()
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
            "check": args.check,
        },
        "env": environment(ctx),
        "rows": rows,
    }
    if ctx.rank == 0:
        atomic_write_json(args.out, doc)
    dist.barrier()
    dist.destroy_process_group()
    return doc


def job_label(args: argparse.Namespace) -> str:
    """The job id as the result file will name it (before the process group exists)."""
    return args.job_id or f"{args.op}-ws{os.environ.get('WORLD_SIZE', '1')}-{args.placement}-{args.transport}"


def failure_message(args: argparse.Namespace, exc: BaseException) -> str:
    """One sentence for a rank whose collective failed: which job, which rank, and why."""
    rank = os.environ.get("RANK", "0")
    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    if "timed out" in str(exc).lower() or "timeout" in str(exc).lower():
        return (f"collective job {job_label(args)}: rank {rank} waited longer than --timeout-s {args.timeout_s:g} s "
                f"for a collective (another rank did not join or hung): {reason}")
    return f"collective job {job_label(args)}: rank {rank} failed in torch.distributed: {reason}"


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m shardscope.collectives``; 1 when a collective failed or timed out."""
    args = parse_args(argv)
    try:
        run(args)
    except RuntimeError as exc:  # gloo raises a plain RuntimeError on timeout; DistError is one too
        traceback.print_exc()
        print(f"shardscope: error: {failure_message(args, exc)}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
