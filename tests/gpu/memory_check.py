"""GPU check of the memory model: CUDA-measured categories against the modeled terms at world size 1.

    PYTHONPATH=workflow python3 tests/gpu/memory_check.py [--model llama-1b] [--seq-lens 512,2048] [--out DIR]

For one model and two sequence lengths, runs ddp, fsdp, zero2 and zero3 as real one-rank jobs
through the pipeline's launcher (torchrun, NCCL, bf16) and prints, per job, measured / modeled
for parameters, gradients, optimizer state, activations (tensor tracker, peak during the
step), buffers at the peak and the tracked tensor peak (against the model without overhead:
the tracker sees tensors, not the allocator), and the CUDA allocator's ``max_memory_allocated``
(``peak_memory_bytes``) against the modeled whole peak with the overhead fraction calibrated
on the first job and checked on the others; also reserved-minus-allocated, alloc retries and
OOMs from ``torch.cuda.memory_stats``. Then one job under a CUDA memory cap halfway between
its modeled states and its modeled peak must end with outcome ``oom`` and leave the
allocator's memory snapshot (``<result>.rank0.oom_snapshot.pickle``, open it at
pytorch.org/memory_viz).

Exit status 1 when a ratio is more than 10% from 1, a job is not ``ok``, a job saw an OOM or
the OOM job left no snapshot; without a CUDA GPU it prints a skip line and exits 0
(``--allow-cpu`` runs the same plumbing on one CPU rank with the tiny model, for the unit
tests and for checking this script). Jobs stop being started once ``--budget-s`` (420 s) has
passed, so the command ends within about 8 minutes; jobs it had no time for are a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STRATEGIES = ("ddp", "fsdp", "zero2", "zero3")
TOLERANCE = 0.10


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Flags of the check (``--model``/``--seq-lens`` default to llama-1b at 512,2048, tiny at 64,128 under ``--allow-cpu``)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None)
    p.add_argument("--seq-lens", default=None)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--timeout-s", type=int, default=150, help="limit per job")
    p.add_argument("--budget-s", type=int, default=420, help="start no job after this many seconds")
    p.add_argument("--no-oom-job", action="store_true", help="skip the job that must run out of memory")
    p.add_argument("--allow-cpu", action="store_true", help="run without a GPU (gloo, one CPU rank, tiny model): plumbing only")
    p.add_argument("--out", default=os.environ.get("OUT") or "gpu-memory-check")
    args = p.parse_args(argv)
    args.model = args.model or ("tiny" if args.allow_cpu else "llama-1b")
    args.seq_lens = args.seq_lens or ("64,128" if args.allow_cpu else "512,2048")
    return args


def job_code(strategy: str, args: argparse.Namespace, out: Path, log: Path, cpu: bool, wrapper: Path | None) -> str:
    """The Python that launches one job through the pipeline's launcher (under ``wrapper`` instead of the worker module, if given)."""
    code = ("import sys; from shardscope.training import launch as L; from shardscope.cli import build_parser; "
            "from shardscope.training.commands import training_spec\n")
    if wrapper is not None:  # the same torchrun command, running the capped worker script instead of -m shardscope.training
        code += (f"sys.path.insert(0, {str(wrapper.parent)!r}); from capped_worker import wrapped_command\n"
                 "orig = L.launch_command\n"
                 f"L.launch_command = lambda *a, **k: wrapped_command(orig(*a, **k), {str(wrapper)!r})\n")
    # the job spec as `shardscope train` builds it from the same flags, launched through the pipeline's launcher
    code += ("job = training_spec(build_parser().parse_args(['train', '--nproc', '1', *sys.argv[1:], '--out', %r, '--log', %r]))\n"
             "sys.exit(L.launch(job, %r, %r, cpu=%r))" % (str(out), str(log), str(out), str(log), cpu))
    return code


def run_job(strategy: str, seq: int, args: argparse.Namespace, out_dir: Path, cpu: bool, name: str | None = None,
            cap_bytes: int | None = None) -> dict:
    """One single-rank bf16 job; its result document (or a timeout / failed row)."""
    name = name or f"{strategy}-{seq}"
    out, log = out_dir / f"{name}.json", out_dir / "logs" / f"{name}.log"
    wrapper = Path(__file__).resolve().with_name("capped_worker.py") if cap_bytes else None
    worker_args = ["--strategy", strategy, "--model", args.model, "--micro-batch", str(args.micro_batch), "--seq-len", str(seq),
                   "--warmup", "1", "--steps", "2", "--dtype", "bfloat16", *(["--cpu"] if cpu else [])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "workflow"), os.environ.get("PYTHONPATH")])))
    if cap_bytes:
        env["SHARDSCOPE_CHECK_CUDA_CAP_BYTES"] = str(cap_bytes)
    if cpu:
        env.setdefault("SHARDSCOPE_THREADS_PER_RANK", "1")
    t0 = time.perf_counter()
    try:
        subprocess.run([sys.executable, "-c", job_code(strategy, args, out, log, cpu, wrapper), *worker_args], env=env,
                       timeout=args.timeout_s, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"outcome": "timeout", "error": f"no result within {args.timeout_s} s; see {log}", "wall_s": args.timeout_s}
    doc = json.loads(out.read_text()) if out.exists() else {"outcome": "failed", "error": f"no result; see {log}"}
    doc["wall_s"] = time.perf_counter() - t0
    doc["result_path"] = str(out)
    return doc


def ratio_cell(name: str, cell: dict) -> str:
    """``name measured/modeled GB (ratio)``; a ratio the model cannot give (modeled 0) prints as ``-``."""
    ratio = f"{cell['ratio']:.3f}" if cell.get("ratio") is not None else "-"
    return f"{name.removesuffix('_bytes')} {cell['measured'] / 1e9:.3f}/{cell['modeled'] / 1e9:.3f} GB ({ratio})"


def within(cells: dict) -> bool:
    """Whether every ratio there is within the tolerance (a missing ratio fails nothing: nothing was modeled)."""
    return all(abs(v["ratio"] - 1) <= TOLERANCE for v in cells.values() if v.get("ratio") is not None)


def check_job(doc: dict, fraction: float | None, on_cuda: bool) -> tuple[dict, float | None, bool]:
    """The rows of one ok job: tracked categories vs the model, the CUDA peak vs the calibrated model; the fraction and a verdict.

    The first job calibrates the overhead fraction on its CUDA peak (that row is then 1 by
    construction and marked ``calibration``); every later job is checked with it.
    """
    from shardscope.costmodel.memory_check import compare_job, modeled_for_job
    from shardscope.costmodel.memory_peak import calibrate_overhead

    row = compare_job(doc, 0.0)  # the tracker counts tensors: no allocator overhead in what it sees
    ok = within(row["categories"])
    cats = doc["summary"].get("memory_categories") or {}
    if on_cuda:
        cuda_peak = int(doc["summary"]["peak_memory_bytes"])
        row["calibration"] = fraction is None
        if fraction is None:
            fraction = calibrate_overhead(cuda_peak, modeled_for_job(doc))
        modeled_peak = modeled_for_job(doc, fraction).peak_bytes
        cell = {"measured": cuda_peak, "modeled": modeled_peak, "ratio": cuda_peak / modeled_peak}
        row["cuda"] = {"cuda_peak_bytes": cell}
        ok &= within(row["cuda"]) and not cats.get("num_ooms")
        for key in ("reserved_minus_allocated_bytes", "num_alloc_retries", "num_ooms"):
            if cats.get(key) is None:  # the CUDA counters must be there on a GPU run
                ok = False
    return row, fraction, ok


def oom_check(args: argparse.Namespace, out_dir: Path, seq: int) -> bool:
    """One ddp job capped halfway between its modeled states and its modeled peak: outcome ``oom`` and a loadable snapshot."""
    from shardscope.costmodel.memory_peak import whole_peak

    terms = whole_peak("ddp", args.model, 1, seq, args.micro_batch, dtype="bfloat16")
    cap = terms.state_bytes + (terms.peak_bytes - terms.state_bytes) // 2
    doc = run_job("ddp", seq, args, out_dir, cpu=False, name=f"ddp-{seq}-oom", cap_bytes=cap)
    snapshot = Path(f"{doc.get('result_path', out_dir / f'ddp-{seq}-oom.json')}.rank0.oom_snapshot.pickle")
    loaded = False
    if snapshot.exists():
        with snapshot.open("rb") as f:
            data = pickle.load(f)  # noqa: S301 - the file this check's own job just wrote
        loaded = isinstance(data, dict) and "segments" in data
    ok = doc.get("outcome") == "oom" and loaded
    print(f"oom job   ddp seq {seq} capped at {cap / 1e9:.2f} GB: outcome {doc.get('outcome')}, snapshot "
          f"{snapshot if loaded else 'MISSING or unreadable'}  {'' if ok else 'FAILED'}", flush=True)
    return ok


def main(argv: list[str] | None = None) -> int:
    """Run the jobs, print measured / modeled per category, exit 1 when one is off by more than 10%."""
    try:
        import torch
    except ImportError:
        print("memory_check: skipped (torch is not installed)")
        return 0
    args = parse_args(argv)
    on_cuda = torch.cuda.is_available()
    if not on_cuda and not args.allow_cpu:
        print("memory_check: skipped (no CUDA GPU on this machine)")
        return 0
    sys.path.insert(0, str(REPO / "workflow"))
    out_dir = Path(args.out)
    (out_dir / "logs").mkdir(parents=True, exist_ok=True)
    where = torch.cuda.get_device_name(0) if on_cuda else "CPU (--allow-cpu: plumbing only)"
    print(f"memory_check: {args.model}, bf16, world size 1, micro-batch {args.micro_batch} on {where}; GB = 1e9 bytes")
    start, fraction, ok, rows = time.perf_counter(), None, True, []
    jobs = [(int(s), strategy) for s in args.seq_lens.split(",") for strategy in args.strategies.split(",")]
    for seq, strategy in jobs:
        if time.perf_counter() - start > args.budget_s:
            print(f"{strategy:6} seq {seq:5}  not run: the --budget-s of {args.budget_s} s is spent  FAILED")
            ok = False
            continue
        doc = run_job(strategy, seq, args, out_dir, cpu=not on_cuda)
        if doc.get("outcome") != "ok":
            print(f"{strategy:6} seq {seq:5}  {doc.get('outcome')}: {str(doc.get('error'))[:300]}  FAILED", flush=True)
            ok = False
            continue
        calibrating = fraction is None and on_cuda
        row, fraction, job_ok = check_job(doc, fraction, on_cuda)
        rows.append(row)
        ok &= job_ok
        cats = doc["summary"].get("memory_categories") or {}
        cells = "  ".join(ratio_cell(k, v) for k, v in {**row["categories"], **row.get("cuda", {})}.items())
        counters = (f"  reserved-allocated {(cats.get('reserved_minus_allocated_bytes') or 0) / 1e9:.3f} GB  "
                    f"retries {cats.get('num_alloc_retries')}  ooms {cats.get('num_ooms')}") if on_cuda else ""
        print(f"{strategy:6} seq {seq:5}  phase {row['measured_phase']}/{row['modeled_phase']}  {cells}{counters}"
              f"{'  (calibration: overhead fraction %.4f of the CUDA peak)' % fraction if calibrating else ''}"
              f"  {doc['wall_s']:.0f} s{'' if job_ok else '  MISMATCH'}", flush=True)
    if on_cuda and not args.no_oom_job:
        if time.perf_counter() - start > args.budget_s:
            print(f"oom job not run: the --budget-s of {args.budget_s} s is spent  FAILED")
            ok = False
        else:
            ok &= oom_check(args, out_dir, int(args.seq_lens.split(",")[-1]))
    (out_dir / "memory_check_rows.json").write_text(json.dumps({"overhead_fraction": fraction, "rows": rows}, indent=1))
    print(f"memory_check: {'every category within 10% of the model' if ok else 'FAILED'} ({time.perf_counter() - start:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
