"""Where one training step's time goes, per strategy, on this machine: phases, CPU time, host functions.

    .venv/bin/python benchmarks/step_profile.py [--strategies ddp zero1 zero2] [--rounds 12] [--cprofile 4]

Starts itself under torchrun (``--nproc`` CPU ranks, gloo) unless it already is a torchrun rank.
Every strategy is prepared in ONE job from the same seed (:func:`shardscope.training.strategies.prepare`,
the pipeline's code and settings) at the default CPU sizing (tiny model, micro-batch 2, seq 64, float32),
and the strategies run interleaved: each round runs one step of every strategy, the order rotated
every round, so a loaded machine slows all of them alike and the ratios between them stay
comparable. Each step starts with the worker's barrier. Per strategy and phase (forward,
backward, optimizer step) rank 0 records the wall time and the process CPU time (every thread of
the rank: the compute thread and gloo's), and the median over rounds is printed. CPU seconds do
not grow while a rank waits (gloo blocks, it does not spin), so CPU time per phase is the work
done, and wall minus CPU is waiting (on the peer rank, on the scheduler).

With ``--cprofile N``, a second pass runs N more interleaved rounds with one ``cProfile`` profile
per strategy enabled only around that strategy's steps, and prints per strategy the functions with
the most own time per step and the Python calls per step (host work that scales with the number
of parameter tensors shows up there), also without builtins: the count of Python function calls
the training worker records per step (``summary.host_calls_per_step``, training/host_calls.py), to
check the recorded counts against an independent profile. cProfile slows Python-heavy code, so its times are for
ranking functions, the phase table for the times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

DEFAULT_STRATEGIES = ("ddp", "fsdp", "fsdp_grad_op", "zero0", "zero1", "zero2", "zero3")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Flags of the benchmark (the same in the launcher and in every rank)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strategies", nargs="+", default=list(DEFAULT_STRATEGIES))
    p.add_argument("--model", default="tiny")
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--rounds", type=int, default=12, help="interleaved timed rounds (one step of every strategy each)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    p.add_argument("--cprofile", type=int, default=0, help="rounds of the cProfile pass (0: none)")
    p.add_argument("--top", type=int, default=12, help="functions shown per strategy in the cProfile pass")
    p.add_argument("--nproc", type=int, default=2)
    return p.parse_args(argv)


def launch(argv: list[str], nproc: int) -> int:
    """Run this file under torchrun with ``nproc`` CPU ranks."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           os.path.abspath(__file__), *argv]
    return subprocess.run(cmd, check=False).returncode


def _phases(prepared, strategy):  # noqa: ANN001, ANN202 - torch objects, imported lazily
    """(forward, backward, step) callables of one prepared strategy, float32 as the CPU sizing trains."""
    if strategy.startswith("zero"):
        engine = prepared.step.__self__

        def forward(tokens):  # noqa: ANN001, ANN202
            return engine(tokens)

        def backward(loss):  # noqa: ANN001, ANN202
            engine.backward(loss)

        return forward, backward, prepared.step
    model = prepared.model

    def forward_plain(tokens):  # noqa: ANN001, ANN202
        return model(tokens)

    def backward_plain(loss):  # noqa: ANN001, ANN202
        loss.backward()

    return forward_plain, backward_plain, prepared.step


def rank_main(args: argparse.Namespace) -> int:
    """The measurement, on every rank; rank 0 prints the tables."""
    import cProfile
    import gc
    import io
    import pstats

    import torch.distributed as dist

    from shardscope.device import init_distributed
    from shardscope.training.model import parse_model_spec, resolve_model, synthetic_batch
    from shardscope.training.strategies import prepare
    from shardscope.training.worker import DTYPES

    ctx = init_distributed(prefer_gpu=False)
    _, cfg = resolve_model(parse_model_spec(args.model))
    prepared = {s: prepare(s, cfg, ctx, DTYPES["float32"], args.micro_batch, seed=0) for s in args.strategies}
    phases = {s: _phases(p, s) for s, p in prepared.items()}
    tensors = {s: sum(1 for p in prepared[s].model.parameters() if p.requires_grad) for s in args.strategies}
    records: dict[str, list[tuple[float, ...]]] = {s: [] for s in args.strategies}
    profiles = {s: cProfile.Profile() for s in args.strategies}

    def one_step(strategy: str, step: int, profile: cProfile.Profile | None) -> tuple[float, ...]:
        forward, backward, opt_step = phases[strategy]
        tokens = synthetic_batch(cfg, args.micro_batch, args.seq_len, step, ctx.rank, ctx.device)
        dist.barrier()
        if profile:
            profile.enable()
        marks = [(time.perf_counter(), time.process_time())]
        loss = forward(tokens)
        marks.append((time.perf_counter(), time.process_time()))
        backward(loss)
        marks.append((time.perf_counter(), time.process_time()))
        opt_step()
        marks.append((time.perf_counter(), time.process_time()))
        if profile:
            profile.disable()
        walls = [b[0] - a[0] for a, b in zip(marks, marks[1:])]
        cpus = [b[1] - a[1] for a, b in zip(marks, marks[1:])]
        return (*walls, *cpus)

    order = list(args.strategies)
    for rnd in range(args.warmup):
        for s in order:
            one_step(s, rnd, None)
    gc.collect()
    gc.disable()
    try:
        for rnd in range(args.rounds):
            rotated = order[rnd % len(order):] + order[:rnd % len(order)]
            for s in rotated:
                records[s].append(one_step(s, args.warmup + rnd, None))
        for rnd in range(args.cprofile):
            rotated = order[rnd % len(order):] + order[:rnd % len(order)]
            for s in rotated:
                one_step(s, args.warmup + args.rounds + rnd, profiles[s])
    finally:
        gc.enable()
    if ctx.rank == 0:
        print(f"model {args.model}, {ctx.world_size} ranks, micro-batch {args.micro_batch}, seq {args.seq_len}, float32; "
              f"medians over {args.rounds} interleaved rounds, rank 0 (ms)")
        print(f"{'strategy':<13} {'tensors':>7} {'fwd wall':>9} {'bwd wall':>9} {'opt wall':>9} {'step wall':>9} "
              f"{'fwd cpu':>8} {'bwd cpu':>8} {'opt cpu':>8} {'step cpu':>8}")
        for s in args.strategies:
            cols = list(zip(*records[s]))
            med = [statistics.median(c) * 1e3 for c in cols]
            wall = statistics.median([sum(r[:3]) for r in records[s]]) * 1e3
            cpu = statistics.median([sum(r[3:]) for r in records[s]]) * 1e3
            print(f"{s:<13} {tensors[s]:>7} {med[0]:>9.1f} {med[1]:>9.1f} {med[2]:>9.1f} {wall:>9.1f} "
                  f"{med[3]:>8.1f} {med[4]:>8.1f} {med[5]:>8.1f} {cpu:>8.1f}")
        for s in args.strategies if args.cprofile else ():
            out = io.StringIO()
            stats = pstats.Stats(profiles[s], stream=out)
            calls = sum(v[1] for v in stats.stats.values()) / args.cprofile
            python_only = sum(v[1] for k, v in stats.stats.items() if k[0] != "~") / args.cprofile
            total = stats.total_tt / args.cprofile * 1e3
            print(f"\n== {s}: {calls:.0f} Python calls per step ({python_only:.0f} of Python functions, builtins left "
                  f"out: what the worker records as host_calls_per_step), {total:.1f} ms profiled per step; own time per step:")
            rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:args.top]
            for (path, line, name), (_, ncalls, tottime, cumtime, _) in rows:
                where = "/".join(path.split("/")[-2:])
                print(f"  {tottime / args.cprofile * 1e3:8.2f} ms  {ncalls / args.cprofile:7.0f} calls  "
                      f"cum {cumtime / args.cprofile * 1e3:8.2f} ms  {where}:{line}({name})")
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


def main() -> int:
    """Launch under torchrun, or measure when already a rank."""
    args = parse_args(sys.argv[1:])
    if "LOCAL_RANK" not in os.environ:
        return launch(sys.argv[1:], args.nproc)
    return rank_main(args)


if __name__ == "__main__":
    sys.exit(main())
