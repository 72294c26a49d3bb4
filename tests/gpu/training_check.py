"""GPU check of the training stage: every strategy at world size 1 on llama-1b in bf16.

    PYTHONPATH=workflow python3 tests/gpu/training_check.py [--out DIR] [--steps 3] [--seq-len 512]

Runs each strategy (ddp, fsdp, fsdp_grad_op, zero0..zero3) as a real one-rank job through the
launcher the pipeline uses (torchrun, NCCL, CUDA memory stats) and prints, per strategy, the
outcome, the median step time, tokens/s, MFU, peak CUDA memory, and the bytes held in
parameters, gradients and optimizer state measured against both analytic models
(:mod:`shardscope.costmodel.modeled`): ``impl`` is this code's expected bytes, ``paper`` the
ZeRO paper's 2 + 2 + 12 bytes per parameter. At world size 1 nothing is sharded, so every
strategy should hold about 16 bytes per parameter (19.8 GB for 1.24 B parameters); what
differs is where the bytes sit (fp32 weights under DDP/FSDP, bf16 weights + fp32 master
under DeepSpeed).

Without a CUDA GPU it prints a skip line and exits 0. A strategy that cannot run (DeepSpeed
missing, an error inside the job) is a row with its outcome and error, not a crash; the exit
status is 1 when any strategy's outcome is not ``ok`` or its measured bytes are more than 5 %
from the implementation model. About 2-4 minutes on one H100/H200 (model init on the GPU,
1 warmup + 3 steps per strategy); each job has a 150 s limit. Writes each job's JSON and log
under ``--out`` (default ``$OUT`` when set, else ``gpu-training-check/``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STRATEGIES = ("ddp", "fsdp", "fsdp_grad_op", "zero0", "zero1", "zero2", "zero3")
TOLERANCE = 0.05


def parse_args() -> argparse.Namespace:
    """Flags of the check."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama-1b")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--timeout-s", type=int, default=150, help="limit per strategy's job")
    p.add_argument("--out", default=os.environ.get("OUT") or "gpu-training-check")
    p.add_argument("--allow-cpu", action="store_true",
                   help="run even without a GPU (gloo, one CPU rank): checks this script's plumbing, not the GPU")
    return p.parse_args()


def run_strategy(strategy: str, args: argparse.Namespace, out_dir: Path) -> dict:
    """One single-rank job through the pipeline's launcher; its result document (or a timeout row)."""
    import torch

    out, log = out_dir / f"{strategy}.json", out_dir / f"{strategy}.log"
    cpu = [] if torch.cuda.is_available() else ["--cpu"]
    worker_args = ["--strategy", strategy, "--model", args.model, "--micro-batch", str(args.micro_batch), "--seq-len",
                   str(args.seq_len), "--warmup", "1", "--steps", str(args.steps), "--dtype", "bfloat16", "--comm-profile"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "workflow"), os.environ.get("PYTHONPATH")])))
    t0 = time.perf_counter()
    try:
        subprocess.run([sys.executable, "-m", "shardscope", "train", "--nproc", "1", *worker_args, *cpu, "--out", str(out),
                        "--log", str(log)], env=env, timeout=args.timeout_s, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"outcome": "timeout", "error": f"no result within {args.timeout_s} s; see {log}", "wall_s": args.timeout_s}
    doc = json.loads(out.read_text()) if out.exists() else {"outcome": "failed", "error": f"no result; see {log}"}
    doc["wall_s"] = time.perf_counter() - t0
    return doc


def row(strategy: str, doc: dict) -> tuple[str, bool]:
    """One table line and whether the strategy passed."""
    if doc.get("outcome") != "ok":
        return f"{strategy:>13}  {doc.get('outcome', '?'):>8}  {str(doc.get('error'))[:150]}", False
    from shardscope.costmodel.modeled import modeled_for_document

    s, modeled = doc["summary"], modeled_for_document(doc)
    measured, impl, paper = modeled["measured_max_rank"], modeled["implementation"], modeled["zero_paper"]
    ratio = impl["measured_over_modeled"]
    ok = all(abs(r - 1) <= TOLERANCE for r in ratio.values() if r is not None)
    gb = 1e9
    mfu = f"{s['mfu'] * 100:5.1f}%" if s.get("mfu") is not None else "    -"
    comm = f"{s['comm_time_share']:.2f}" if s.get("comm_time_share") is not None else "-"
    line = (f"{strategy:>13}  {'ok':>8}  {s['median_step_time_s'] * 1e3:8.1f}  {s['tokens_per_s']:9.0f}  {mfu}  "
            f"{s['peak_memory_bytes'] / gb:7.2f}  {measured['param_bytes'] / gb:6.2f} {measured['grad_bytes'] / gb:6.2f} "
            f"{measured['optim_bytes'] / gb:6.2f} {measured['total_bytes'] / gb:6.2f}  {impl['total_bytes'] / gb:6.2f} "
            f"{ratio['total_bytes']:5.3f}  {paper['total_bytes'] / gb:6.2f}  {comm:>4}  {'' if ok else 'MISMATCH'}")
    return line, ok


def main() -> int:
    """Run every strategy and print the table; 0 when all are ok and match the model (or no GPU)."""
    try:
        import torch
    except ImportError:
        print("training_check: skipped (torch is not installed)")
        return 0
    args = parse_args()
    if not torch.cuda.is_available() and not args.allow_cpu:
        print("training_check: skipped (no CUDA GPU on this machine)")
        return 0
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU (--allow-cpu: plumbing only)"
    print(f"training_check: {args.model}, bf16, world size 1 on {device}; "
          f"micro-batch {args.micro_batch} x seq {args.seq_len}, 1 warmup + {args.steps} steps; GB = 1e9 bytes")
    print(f"{'strategy':>13}  {'outcome':>8}  {'step ms':>8}  {'tokens/s':>9}  {'  MFU':>5}  {'peak GB':>7}  "
          f"{'params':>6} {'grads':>6} {'optim':>6} {'held':>6}  {'impl':>6} {'ratio':>5}  {'paper':>6}  comm")
    all_ok = True
    for strategy in args.strategies.split(","):
        doc = run_strategy(strategy, args, out_dir)
        line, ok = row(strategy, doc)
        print(line + f"  ({doc.get('wall_s', 0):.0f} s)", flush=True)
        all_ok &= ok
    print("training_check: " + ("all strategies ok and within 5 % of the implementation model" if all_ok else "FAILED"))
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
