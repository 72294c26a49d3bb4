"""GPU check of the memory model: CUDA-measured categories against the modeled terms at world size 1.

    PYTHONPATH=workflow python3 tests/gpu/memory_check.py [--model llama-1b] [--seq-lens 512,2048] [--out DIR]

For one model and two sequence lengths, runs ddp, fsdp, zero2 and zero3 as real one-rank jobs
through the pipeline's launcher (torchrun, NCCL, bf16) and prints, per job, measured / modeled
for parameters, gradients, optimizer state, activations (tensor tracker, peak during the
step), buffers at the peak, the tracked tensor peak, and the CUDA allocator's
``max_memory_allocated`` (``peak_memory_bytes``) against the modeled whole peak after
calibrating the overhead fraction on the first job; also reserved-minus-allocated, alloc
retries and OOMs. Exit status 1 when a ratio is more than 10% from 1 or a job is not ``ok``;
without a CUDA GPU it prints a skip line and exits 0. About 3-5 minutes on one H100/H200.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STRATEGIES = ("ddp", "fsdp", "zero2", "zero3")
TOLERANCE = 0.10


def run_job(strategy: str, seq: int, args: argparse.Namespace, out_dir: Path) -> dict:
    """One single-rank bf16 job; its result document (or a failed row)."""
    out, log = out_dir / f"{strategy}-{seq}.json", out_dir / f"{strategy}-{seq}.log"
    code = ("import sys; from shardscope.training.launch import launch; "
            "sys.exit(launch(1, sys.argv[1:], {'job_id': None, 'strategy': %r, 'model': %r, 'placement': 'local'}, %r, %r, cpu=False))"
            % (strategy, args.model, str(out), str(log)))
    worker_args = ["--strategy", strategy, "--model", args.model, "--micro-batch", str(args.micro_batch), "--seq-len", str(seq),
                   "--warmup", "1", "--steps", "2", "--dtype", "bfloat16"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "workflow"), os.environ.get("PYTHONPATH")])))
    try:
        subprocess.run([sys.executable, "-c", code, *worker_args], env=env, timeout=args.timeout_s, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"outcome": "timeout", "error": f"no result within {args.timeout_s} s; see {log}"}
    return json.loads(out.read_text()) if out.exists() else {"outcome": "failed", "error": f"no result; see {log}"}


def main() -> int:
    """Run the jobs, print measured / modeled per category, exit 1 when one is off by more than 10%."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama-1b")
    p.add_argument("--seq-lens", default="512,2048")
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--timeout-s", type=int, default=240)
    p.add_argument("--out", default=os.environ.get("OUT") or "gpu-memory-check")
    args = p.parse_args()
    try:
        import torch
    except ImportError:
        print("memory_check: skipped (torch is not installed)")
        return 0
    if not torch.cuda.is_available():
        print("memory_check: skipped (no CUDA GPU on this machine)")
        return 0
    sys.path.insert(0, str(REPO / "workflow"))
    from shardscope.training.memory_check import compare_job, modeled_for_job
    from shardscope.training.memory_peak import calibrate_overhead

    out_dir = Path(args.out)
    (out_dir / "logs").mkdir(parents=True, exist_ok=True)
    print(f"memory_check: {args.model}, bf16, world size 1 on {torch.cuda.get_device_name(0)}")
    fraction, ok = None, True
    for seq in (int(s) for s in args.seq_lens.split(",")):
        for strategy in args.strategies.split(","):
            doc = run_job(strategy, seq, args, out_dir)
            if doc.get("outcome") != "ok":
                print(f"{strategy:6} seq {seq:5}  {doc.get('outcome')}: {doc.get('error')}")
                ok = False
                continue
            cuda_peak = doc["summary"]["peak_memory_bytes"]
            if fraction is None:
                fraction = calibrate_overhead(cuda_peak, modeled_for_job(doc))
                print(f"overhead fraction calibrated on {strategy} seq {seq}: {fraction:.4f} of the CUDA peak")
            row = compare_job(doc, fraction)
            modeled_peak = modeled_for_job(doc, fraction).peak_bytes
            row["categories"]["cuda_peak_bytes"] = {"measured": cuda_peak, "modeled": modeled_peak, "ratio": cuda_peak / modeled_peak}
            cats = doc["summary"]["memory_categories"]
            cells = "  ".join(f"{k.removesuffix('_bytes')} {v['measured'] / 1e9:.2f}/{v['modeled'] / 1e9:.2f} GB ({v['ratio']:.3f})"
                              for k, v in row["categories"].items())
            print(f"{strategy:6} seq {seq:5}  phase {row['measured_phase']}/{row['modeled_phase']}  {cells}  "
                  f"reserved-allocated {(cats.get('reserved_minus_allocated_bytes') or 0) / 1e9:.2f} GB  "
                  f"retries {cats.get('num_alloc_retries')}  ooms {cats.get('num_ooms')}")
            ok &= all(abs(v["ratio"] - 1) <= TOLERANCE for v in row["categories"].values() if v["ratio"] is not None)
    print("memory_check: " + ("every category within 10% of the model" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
