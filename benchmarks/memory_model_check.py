"""The memory model against the tensor tracker: strategies x model sizes x sequence lengths on CPU.

    .venv/bin/python benchmarks/memory_model_check.py [--strategies ddp,zero1,...] [--seqs 64,128] [--out FILE]
        [--keep DIR | --from-docs DIR]

Runs each job through ``shardscope train`` (2 CPU ranks, gloo, 1 warmup + 1 timed step, which
also runs the tracked step), calibrates the overhead fraction on the first job and prints, per
job, measured / modeled for every category and the whole tracked peak. Target: every ratio
within 10% (exit status 1 when one is not). About 20-40 s per job on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TOLERANCE = 0.10
MODELS = {
    "tiny": "tiny",
    "small-gqa": json.dumps({"name": "small-gqa", "n_layers": 4, "d_model": 256, "n_heads": 8, "n_kv_heads": 4,
                             "d_ff": 768, "vocab_size": 2048, "max_seq_len": 256}),
}


def run_job(tmp: Path, strategy: str, model: str, seq: int, micro_batch: int) -> dict:
    """One ``shardscope train`` job of ``model`` (a key of MODELS) on 2 CPU ranks; its result document."""
    out, log = tmp / f"{strategy}-{model}-{seq}.json", tmp / "logs" / f"{strategy}-{model}-{seq}.log"
    env = dict(os.environ, SHARDSCOPE_THREADS_PER_RANK="1")
    cmd = [sys.executable, "-m", "shardscope", "train", "--strategy", strategy, "--model", MODELS[model], "--nproc", "2",
           "--warmup", "1", "--steps", "1", "--seq-len", str(seq), "--micro-batch", str(micro_batch), "--cpu",
           "--out", str(out), "--log", str(log)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{strategy} {model} seq {seq} failed: {proc.stderr[-2000:]}")
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    """Run the matrix, print the table, exit 1 when a ratio misses the target."""
    from shardscope.training.memory_check import compare_job, modeled_for_job
    from shardscope.training.memory_peak import calibrate_overhead

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--strategies", default="ddp,zero1,zero2,zero3,fsdp")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--seqs", default="64,128")
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--out", help="write the rows as JSON here")
    p.add_argument("--keep", help="keep every job's result document in this folder")
    p.add_argument("--from-docs", help="compare the documents a --keep run left in this folder instead of running jobs")
    args = p.parse_args(argv)
    rows, fraction, worst = [], None, 0.0
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        for model in args.models.split(","):
            for seq in (int(s) for s in args.seqs.split(",")):
                for strategy in args.strategies.split(","):
                    if args.from_docs:
                        doc = json.loads((Path(args.from_docs) / f"{strategy}-{model}-{seq}.json").read_text())
                    else:
                        doc = run_job(Path(tmp), strategy, model, seq, args.micro_batch)
                    if fraction is None:
                        measured = max(r["tracked_peak_bytes"] for r in doc["ranks"])
                        fraction = calibrate_overhead(measured, modeled_for_job(doc))
                        print(f"overhead fraction calibrated on {strategy} {model} seq {seq}: {fraction:.4f}")
                    row = compare_job(doc, fraction)
                    rows.append(row)
                    cells = "  ".join(f"{k.removesuffix('_bytes')} {v['measured'] / 1e6:.3f}/{v['modeled'] / 1e6:.3f} MB"
                                      f" ({v['ratio']:.3f})" for k, v in row["categories"].items())
                    print(f"{strategy:6} {model:10} seq {seq:4}  phase {row['measured_phase']}/{row['modeled_phase']}  {cells}",
                          flush=True)
                    worst = max([worst] + [abs(v["ratio"] - 1) for v in row["categories"].values() if v["ratio"]])
    if args.out:
        Path(args.out).write_text(json.dumps({"overhead_fraction": fraction, "rows": rows}, indent=1))
    print(f"largest |measured/modeled - 1|: {worst:.3f} (target <= {TOLERANCE})")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
