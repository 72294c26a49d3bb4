"""GPU check of the memory-bound scale: the seed's Mistral-7B shape at world size 1, each strategy a row.

    PYTHONPATH=workflow python3 tests/gpu/seed_scale_check.py [--out DIR] [--strategies ddp,zero3,fsdp]

The pipeline's second model scale (config ``training.memory_bound``: Mistral-7B-shaped, random
weights, bf16, seq 4096, micro-batch 1) trained on one GPU through the pipeline's launcher, as
``training_check.py`` does for llama-1b. At world size 1 nothing is sharded: 7.24 B parameters
x 16 bytes of weights, gradients and Adam state (116 GB) do not fit an 80 GB GPU, so each
strategy must end as a result row with outcome ``oom`` (or ``ok`` where it fits), never as a
crash, a hang or a missing result. It also prints what the planner would plan for this GPU's
memory (:func:`shardscope.plan.scales.memory_scale`): at world size 1 on 80 GB it scales down.

Exit status 0 when every strategy is an ``ok`` or ``oom`` row (or there is no GPU: a skip line),
1 otherwise. Each job has a ``--timeout-s`` limit (default 300 s: building 7 B parameters takes
a while before the first step runs out of memory).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from training_check import REPO, run_strategy  # noqa: E402  (the same one-rank launcher run)

ROW_OUTCOMES = ("ok", "oom")


def parse_args() -> argparse.Namespace:
    """Flags of the check (the sizing of config training.memory_bound by default)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="mistral-7b")
    p.add_argument("--strategies", default="ddp,zero3,fsdp")
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--timeout-s", type=int, default=300, help="limit per strategy's job")
    p.add_argument("--out", default=os.environ.get("OUT") or "gpu-seed-scale-check")
    return p.parse_args()


def planned_scale(memory_bytes: int, model: str) -> str:
    """What the planner plans as the memory-bound scale at world size 1 for a GPU of ``memory_bytes``."""
    sys.path.insert(0, str(REPO / "workflow"))
    from shardscope.plan.scales import Scale, memory_scale

    scale = memory_scale({"gpus": [{"index": 0, "memory_bytes": memory_bytes}]}, {"model": model}, 1)
    return f"{scale.model_name}: {scale.reason}" if isinstance(scale, Scale) else scale


def main() -> int:
    """Run each strategy at the seed scale and print one row each; 0 when each is an ok or oom row."""
    try:
        import torch
    except ImportError:
        print("seed_scale_check: skipped (torch is not installed)")
        return 0
    if not torch.cuda.is_available():
        print("seed_scale_check: skipped (no CUDA GPU on this machine)")
        return 0
    args = parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    memory = torch.cuda.get_device_properties(0).total_memory
    print(f"seed_scale_check: {args.model}, bf16, world size 1 on {torch.cuda.get_device_name(0)} "
          f"({memory / 1e9:.1f} GB); micro-batch {args.micro_batch} x seq {args.seq_len}")
    print(f"seed_scale_check: the planner's memory-bound scale here: {planned_scale(memory, args.model)}")
    passed = True
    for strategy in args.strategies.split(","):
        doc = run_strategy(strategy, args, out_dir)
        outcome = doc.get("outcome")
        peak = (doc.get("summary") or {}).get("peak_memory_bytes")
        detail = f"peak {peak / 1e9:.1f} GB" if peak else str(doc.get("error"))[:150]
        print(f"{strategy:>13}  {outcome:>8}  {detail}  ({doc.get('wall_s', 0):.0f} s)", flush=True)
        passed &= outcome in ROW_OUTCOMES
    print("seed_scale_check: " + ("every strategy is an ok or oom row" if passed else "FAILED: a strategy is not an ok/oom row"))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
