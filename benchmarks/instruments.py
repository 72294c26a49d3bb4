"""shardscope's own instruments beside torch's: FLOPs per token and the peak memory of one step (issue 33).

1. FLOPs per token, per preset (and ``--model`` shapes): ``ModelConfig.flops_per_token`` from
   :mod:`shardscope.contracts.models` (whatever formula the branch has) beside what
   ``torch.utils.flop_counter.FlopCounterMode`` counts for one forward and backward of the real
   model at ``--seq-len``, built on the meta device (no memory, no weights: the presets up to
   mistral-7b count in seconds).
2. Peak memory of one training step of ``--memory-model`` on one CPU rank (a gloo group of one in
   this process), per strategy (DDP, FSDP2): the tensor tracker's peak, the CPU allocator's from
   torch's profiler (``profile_memory=True``) and ``MemTracker`` / ``FSDPMemTracker``'s
   (:mod:`shardscope.training.reference_peaks` says how each is taken).

It prints what it measured; nothing is asserted (``tests/training/test_memtrack_instruments.py``
asserts the 1% agreement). About two minutes on 2 shared cores::

    nice .venv/bin/python benchmarks/instruments.py [--seq-len 128] [--memory-model tiny] [--model '{"preset": "tiny"}']
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

import torch  # noqa: E402

from shardscope.contracts.models import PRESETS, resolve_model  # noqa: E402


def counted_flops_per_token(cfg: object, seq_len: int) -> float:
    """FlopCounterMode's FLOPs of one forward and backward of the model on the meta device, per token."""
    from torch.utils.flop_counter import FlopCounterMode

    from shardscope.training.model import GPT

    with torch.device("meta"):
        model = GPT(cfg)
        tokens = torch.zeros((1, seq_len + 1), dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        model(tokens).backward()
    return counter.get_total_flops() / seq_len


def flops_table(models: dict[str, object], seq_len: int) -> None:
    """One line per model: our formula, the counter, and ours as a share of the counter."""
    print(f"FLOPs per token (forward + backward) at seq {seq_len}: ours = contracts.models.flops_per_token, "
          "torch = FlopCounterMode")
    print(f"{'model':<14}{'ours':>16}{'torch':>16}{'ours/torch':>12}")
    for name, cfg in models.items():
        ours, counted = cfg.flops_per_token(seq_len), counted_flops_per_token(cfg, seq_len)
        print(f"{name:<14}{ours:>16.4g}{counted:>16.4g}{ours / counted:>12.3f}")


def memory_table(model: str, seq_len: int, micro_batch: int) -> None:
    """One line per strategy: the peak of one step by each view, and each against the profiler's."""
    import torch.distributed as dist

    from shardscope.device import DistContext
    from shardscope.training.model import synthetic_batch
    from shardscope.training.reference_peaks import VIEWS, peaks_of_step
    from shardscope.training.strategies import prepare

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 2000))
    dist.init_process_group("gloo", rank=0, world_size=1)
    cfg = resolve_model(model)[1]
    ctx = DistContext(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"), backend="gloo")
    print(f"\npeak memory of one step, {model}, {micro_batch} x {seq_len} tokens, one CPU rank (bytes; share of the "
          "profiler's)")
    print(f"{'strategy':<10}" + "".join(f"{view:>22}" for view in VIEWS))
    try:
        for strategy in ("ddp", "fsdp"):
            prepared = prepare(strategy, cfg, ctx, torch.float32, micro_batch)
            prepared.forward_backward(synthetic_batch(cfg, micro_batch, seq_len, 0, 0, ctx.device))
            prepared.step()
            peaks = peaks_of_step(prepared, lambda i: synthetic_batch(cfg, micro_batch, seq_len, 1 + i, 0, ctx.device))
            print(f"{strategy:<10}" + "".join(f"{peaks[v]:>14,} ({peaks[v] / peaks['profiler']:.3f})" for v in VIEWS))
    finally:
        dist.destroy_process_group()


def main() -> None:
    """Print both tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per sequence for the FLOP count")
    parser.add_argument("--model", action="append", default=[], help="a JSON object of dimensions to count too")
    parser.add_argument("--memory-model", default="tiny", help="preset or JSON dimensions of the memory comparison")
    parser.add_argument("--memory-seq-len", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=2)
    args = parser.parse_args()
    models = {name: cfg for name, cfg in PRESETS.items() if args.seq_len <= cfg.max_seq_len}
    models.update({text: resolve_model(json.loads(text))[1] for text in args.model})
    flops_table(models, args.seq_len)
    memory_table(json.loads(args.memory_model) if args.memory_model.startswith("{") else args.memory_model,
                 args.memory_seq_len, args.micro_batch)


if __name__ == "__main__":
    main()
