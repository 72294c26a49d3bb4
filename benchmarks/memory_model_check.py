"""The memory model against the tensor tracker: strategies x model sizes x sequence lengths on CPU.

    .venv/bin/python benchmarks/memory_model_check.py [--strategies ddp,zero1,...] [--seqs 64,128] [--out FILE]
        [--checkpointing none,full] [--dtype float32] [--optimizer adamw] [--keep DIR [--reuse] [--live] | --from-docs DIR]

Runs each job through ``shardscope train`` (2 CPU ranks, gloo, 1 warmup + 1 timed step, which
also runs the tracked step; ``zero3_hpz`` on 4 ranks with partition 2, as 2 ranks leave it no
partition but the degenerate world size), calibrates the overhead fraction on the first job alone (marked
``calibration run``; :func:`shardscope.costmodel.memory_peak.calibrate_overhead`), applies that
one fraction to every other job without refitting, and prints, per
job, measured / modeled for every category and the whole tracked peak, then the worst error per
strategy and checkpointing mode. Target: every ratio within 10% (exit status 1 when one is not).
About 20-40 s per job on 2 cores.
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
    "small-gelu": json.dumps({"name": "small-gelu", "n_layers": 3, "d_model": 192, "n_heads": 4, "n_kv_heads": 4,
                              "d_ff": 832, "vocab_size": 1536, "max_seq_len": 256, "mlp": "gelu"}),
    "small-gelu-eager": json.dumps({"name": "small-gelu-eager", "n_layers": 3, "d_model": 192, "n_heads": 4,
                                    "n_kv_heads": 4, "d_ff": 832, "vocab_size": 1536, "max_seq_len": 256, "mlp": "gelu",
                                    "activation": "eager_tanh"}),
}


def job_name(strategy: str, model: str, seq: int, checkpointing: str, dtype: str, optimizer: str) -> str:
    """The file name of one job's result document (the names of older runs kept for ``--from-docs``)."""
    name = f"{strategy}-{model}-{seq}"
    for value, default in ((checkpointing, "none"), (dtype, "float32"), (optimizer, "adamw")):
        name += "" if value == default else f"-{value}"
    return name


def run_job(tmp: Path, strategy: str, model: str, seq: int, micro_batch: int, checkpointing: str = "none",
            dtype: str = "float32", optimizer: str = "adamw", live: bool = False) -> dict | None:
    """One ``shardscope train`` job of ``model`` (a key of MODELS) on 2 CPU ranks; its result document (None: it failed, said why).

    ``live``: each rank also writes what was alive at its tracked peak to ``live/<job>/`` (the tracker's debug aid).
    """
    name = job_name(strategy, model, seq, checkpointing, dtype, optimizer)
    out, log = tmp / f"{name}.json", tmp / "logs" / f"{name}.log"
    env = dict(os.environ, SHARDSCOPE_THREADS_PER_RANK="1")
    if live:
        env["SHARDSCOPE_TRACKER_LIVE"] = str(tmp / "live" / name)
    ranks = ["--nproc", "4", "--shard-size", "2"] if strategy == "zero3_hpz" else ["--nproc", "2"]
    cmd = [sys.executable, "-m", "shardscope", "train", "--strategy", strategy, "--model", MODELS[model], *ranks,
           "--warmup", "1", "--steps", "1", "--seq-len", str(seq), "--micro-batch", str(micro_batch), "--cpu",
           "--activation-checkpointing", checkpointing, "--dtype", dtype, "--optimizer", optimizer,
           "--out", str(out), "--log", str(log)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        print(f"{name} FAILED: {proc.stderr[-2000:]}", flush=True)
        return None
    doc = json.loads(out.read_text())
    if doc["outcome"] != "ok":
        print(f"{name} FAILED with outcome {doc['outcome']}: {(doc.get('error') or '')[:500]}; log {log}", flush=True)
        return None
    return doc


def main(argv: list[str] | None = None) -> int:
    """Run the matrix, print the table, exit 1 when a ratio misses the target."""
    from shardscope.costmodel.memory_check import compare_job, modeled_for_job
    from shardscope.costmodel.memory_peak import calibrate_overhead

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--strategies", default="ddp,zero1,zero2,zero3,fsdp,hsdp,zero3_hpz")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--seqs", default="64,128")
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--checkpointing", default="none,full", help="activation checkpointing modes to run")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--optimizer", default="adamw", help="adamw, or adamw_bf16_states (zero1-3 with --dtype bfloat16)")
    p.add_argument("--out", help="write the rows as JSON here")
    p.add_argument("--keep", help="keep every job's result document in this folder")
    p.add_argument("--reuse", action="store_true", help="with --keep: compare a job's document already there instead of rerunning it")
    p.add_argument("--live", action="store_true", help="each job's ranks also write their live set at the peak to <keep>/live/<job>/")
    p.add_argument("--from-docs", help="compare the documents a --keep run left in this folder instead of running jobs")
    args = p.parse_args(argv)
    rows, fraction, worst, checked, calibrated_on = [], None, 0.0, 0, None
    per_strategy: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        for model in args.models.split(","):
            for seq, checkpointing in ((int(s), c) for s in args.seqs.split(",") for c in args.checkpointing.split(",")):
                for strategy in args.strategies.split(","):
                    kept = Path(tmp) / f"{job_name(strategy, model, seq, checkpointing, args.dtype, args.optimizer)}.json"
                    if args.reuse and kept.exists():
                        doc = json.loads(kept.read_text())
                    elif args.from_docs:
                        name = job_name(strategy, model, seq, checkpointing, args.dtype, args.optimizer)
                        doc = json.loads((Path(args.from_docs) / f"{name}.json").read_text())
                    else:
                        doc = run_job(Path(tmp), strategy, model, seq, args.micro_batch, checkpointing, args.dtype,
                                      args.optimizer, live=args.live)
                    if doc is None:
                        per_strategy[(strategy, checkpointing)] = worst = float("inf")
                        continue
                    calibration = fraction is None
                    if calibration:
                        measured = max(r["tracked_peak_bytes"] for r in doc["ranks"])
                        fraction = calibrate_overhead(measured, modeled_for_job(doc))
                        calibrated_on = f"{strategy} {model} seq {seq} ckpt {checkpointing}"
                        print(f"calibration: the overhead fraction is fitted on this one run, {calibrated_on}: "
                              f"{fraction:.4f} (measured peak {measured} B); every later row is checked with it, not refitted")
                    row = compare_job(doc, fraction)
                    row["calibration"] = calibration
                    checked += 0 if calibration else 1
                    rows.append(row)
                    cells = "  ".join(f"{k.removesuffix('_bytes')} {v['measured'] / 1e6:.3f}/{v['modeled'] / 1e6:.3f} MB"
                                      f" ({v['ratio'] or float('nan'):.3f})" for k, v in row["categories"].items())
                    print(f"{strategy:6} {model:10} seq {seq:4} ckpt {checkpointing:4}  phase {row['measured_phase']}/{row['modeled_phase']}  {cells}"
                          f"{'  (calibration run)' if calibration else ''}", flush=True)
                    errors = [abs(v["ratio"] - 1) for v in row["categories"].values() if v["ratio"]]
                    worst = max([worst, *errors])
                    key = (strategy, checkpointing)
                    per_strategy[key] = max([per_strategy.get(key, 0.0), *errors])
    if args.out:
        Path(args.out).write_text(json.dumps({"overhead_fraction": fraction, "calibrated_on": calibrated_on, "rows": rows}, indent=1))
    if fraction is not None:
        print(f"overhead fraction {fraction:.4f}, fitted on {calibrated_on} alone, checked on the {checked} other runs")
    for (strategy, checkpointing), error in per_strategy.items():
        print(f"worst |measured/modeled - 1| of {strategy} with checkpointing {checkpointing}: {error:.3f}")
    print(f"largest |measured/modeled - 1|: {worst:.3f} (target <= {TOLERANCE})")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
