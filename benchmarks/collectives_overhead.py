"""What our collective harness costs: the worker's all_reduce timing next to a bare timing loop.

    .venv/bin/python benchmarks/collectives_overhead.py [--sizes 4096,...] [--repeats 7] [--nproc 2]

Starts itself under torchrun (``--nproc`` CPU ranks, gloo; or NCCL with ``--gpu``) unless it
is already a torchrun rank. Per message size, in ONE job, it alternates two methods, several
times each (the order flips every repeat so neither always runs first):

- ours: :func:`shardscope.collectives.worker.time_op`, the exact code path of the pipeline's
  jobs (buffers from the sweep module, the op call from the ops module, warmup, barrier,
  :class:`shardscope.device.Timer`, per-rank times reduced across ranks);
- bare: one tensor, warmup calls, ``barrier``, ``perf_counter``, N back-to-back
  ``dist.all_reduce`` calls, ``barrier``, ``perf_counter`` (rank 0's time).

Both run the same number of iterations per window, chosen so that a window lasts about
``--window-s`` seconds, and bus bandwidth is computed for both with the project's factors.
Per size it prints the median busbw of each method, and the ratio ours / bare as the median
of the per-repeat ratios (each pair ran back to back, so shares the machine's load) with
their range: the harness costs nothing when the ratio is 1. ``best`` is the same ratio from
the fastest window of each method, the estimate least disturbed by other load. The target is >= 0.95 at every
size >= 1 MiB; the exit status is 1 when a size misses it.

Note on semantics: ours times each rank from its own exit of the barrier and averages the
ranks (as nccl-tests does); bare times rank 0 from barrier to barrier, so it also counts
one trailing barrier and the skew with which ranks leave the first barrier. On an idle
machine both are small against a window; on an oversubscribed one they are not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

TARGET_RATIO = 0.95
TARGET_FROM_BYTES = 1 << 20
#: Rank 0 writes its verdict here, for the launcher's exit status (ranks themselves exit 0).
SUMMARY_ENV = "SHARDSCOPE_OVERHEAD_SUMMARY"


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Flags of the benchmark (the same in the launcher and in every rank)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default=",".join(str(4**k * 1024) for k in range(2, 8)),
                   help="message sizes in bytes, comma-separated (default 16 KiB .. 16 MiB, x4)")
    p.add_argument("--repeats", type=int, default=9, help="windows per method and size (medians are taken)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls before each window")
    p.add_argument("--window-s", type=float, default=0.1, help="aim for timed windows about this long")
    p.add_argument("--nproc", type=int, default=2, help="ranks (torchrun --nproc-per-node)")
    p.add_argument("--gpu", action="store_true", help="use CUDA/NCCL where available (default: CPU ranks, gloo)")
    return p.parse_args(argv)


def launch(argv: list[str], nproc: int) -> int:
    """Run this file under torchrun with ``nproc`` ranks; 0 when every size met the target."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           os.path.abspath(__file__), *argv]
    with tempfile.TemporaryDirectory() as tmp:
        summary = os.path.join(tmp, "summary.json")
        code = subprocess.run(cmd, check=False, env=dict(os.environ, **{SUMMARY_ENV: summary})).returncode
        if code != 0 or not os.path.exists(summary):
            return code or 1
        with open(summary, encoding="utf-8") as handle:
            return 0 if not json.load(handle)["missed_sizes"] else 1


def bare_loop_s(ctx: Any, tensor: Any, warmup: int, iters: int) -> float:
    """Seconds per call of the reference loop on this rank: barrier, N back-to-back all_reduce, barrier."""
    import gc

    import torch.distributed as dist

    from shardscope.device import synchronize

    for _ in range(warmup):
        dist.all_reduce(tensor)
    synchronize(ctx)
    dist.barrier()
    gc.disable()
    try:
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor)
        synchronize(ctx)
        dist.barrier()
        return (time.perf_counter() - t0) / iters
    finally:
        gc.enable()


def rank_main(args: argparse.Namespace) -> int:
    """The measurement, on every rank; rank 0 prints the table."""
    import torch
    import torch.distributed as dist

    from shardscope.contracts.factors import busbw_gbps
    from shardscope.collectives.worker import time_op
    from shardscope.device import init_distributed

    ctx = init_distributed(prefer_gpu=args.gpu)
    sizes = [int(s) for s in args.sizes.split(",")]
    results = []
    for size in sizes:
        tensor = torch.zeros(size // 4, dtype=torch.float32, device=ctx.device)
        # Same iterations on every rank: rank 0's pilot decides.
        pilot = torch.tensor([bare_loop_s(ctx, tensor, args.warmup, 3)], dtype=torch.float64, device=ctx.device)
        dist.broadcast(pilot, src=0)
        iters = max(5, min(5000, math.ceil(args.window_s / max(float(pilot.item()), 1e-9))))
        ours_s, bare_s = [], []
        for repeat in range(args.repeats):
            for method in (("ours", "bare") if repeat % 2 == 0 else ("bare", "ours")):
                if method == "ours":
                    ours_s.append(time_op(ctx, "all_reduce", size, torch.float32, args.warmup, iters, False)["time_s"])
                else:
                    bare_s.append(bare_loop_s(ctx, tensor, args.warmup, iters))
        results.append((size, iters, ours_s, bare_s))
    if ctx.rank == 0:
        print(f"# collectives_overhead: all_reduce, {ctx.world_size} ranks, {ctx.backend}, float32, "
              f"{torch.get_num_threads()} threads/rank, {args.repeats} repeats; busbw in GB/s (1e9 B/s), medians")
        print(f"# {'size_bytes':>11} {'iters':>6} {'ours_busbw':>11} {'bare_busbw':>11} {'ratio':>6} "
              f"{'ratio_range':>13} {'best':>6}  (target: ratio >= {TARGET_RATIO} at >= {TARGET_FROM_BYTES} B)")
    missed, rows = [], []
    for size, iters, ours_s, bare_s in results:
        ours_bw = busbw_gbps("all_reduce", ctx.world_size, size, statistics.median(ours_s))
        bare_bw = busbw_gbps("all_reduce", ctx.world_size, size, statistics.median(bare_s))
        per_repeat = sorted(b / o for o, b in zip(ours_s, bare_s, strict=True))  # busbw ratio = inverse time ratio
        ratio = statistics.median(per_repeat)
        best = min(bare_s) / min(ours_s)
        verdict = ""
        if size >= TARGET_FROM_BYTES:
            verdict = "ok" if ratio >= TARGET_RATIO else "MISSED"
            if ratio < TARGET_RATIO:
                missed.append(size)
        rows.append({"size_bytes": size, "iters": iters, "ours_busbw_gbps": ours_bw, "bare_busbw_gbps": bare_bw,
                     "ratio": ratio, "ratio_min": per_repeat[0], "ratio_max": per_repeat[-1], "best_ratio": best})
        if ctx.rank == 0:
            print(f"  {size:>11} {iters:>6} {ours_bw:>11.4f} {bare_bw:>11.4f} {ratio:>6.3f} "
                  f"{per_repeat[0]:>6.3f}-{per_repeat[-1]:<6.3f} {best:>6.3f}  {verdict}")
    if ctx.rank == 0 and os.environ.get(SUMMARY_ENV):
        with open(os.environ[SUMMARY_ENV], "w", encoding="utf-8") as handle:
            json.dump({"rows": rows, "missed_sizes": missed}, handle)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Launch under torchrun, or measure when already a rank."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if "LOCAL_RANK" not in os.environ:
        return launch(argv, args.nproc)
    return rank_main(args)


if __name__ == "__main__":
    sys.exit(main())
