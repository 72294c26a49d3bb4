"""GPU check of the collective worker on ONE GPU: NCCL, CUDA-event timing, positive times.

    .venv/bin/python tests/gpu/collectives_check.py            # on a machine with a CUDA GPU
    .venv/bin/python tests/gpu/collectives_check.py --cpu      # the same checks on gloo (tests this file)

Runs the real worker (``torchrun --nproc-per-node 1 -m shardscope.collectives``, world size 1)
for all_reduce, all_gather and broadcast over 1 KiB .. 256 MiB with ``--check``, each job
under the pipeline's guard (a wall-clock limit), and verifies what a GPU run must show: the
NCCL backend and its version, timing by CUDA events, the GPU's name and driver, every row
checked with 0 wrong elements, finite positive times, and algbw/busbw that follow from size
and time with nccl-tests' factors (at one rank busbw is 0 for all_reduce and all_gather).
It prints each job as an nccl-tests table and a PASS/FAIL line; exit status 0 on PASS.
If ``all_reduce_perf`` (nccl-tests) is on the PATH it is run too (``-g 1``) and imported.
Without a CUDA GPU it prints ``SKIPPED: ...`` and exits 0. Takes about a minute on a GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

OPS = ("all_reduce", "all_gather", "broadcast")
WALL_S = 240  # per job; the whole check stays well under 5 minutes


def expected_env(cpu: bool) -> dict[str, str]:
    """What the job's environment must say: NCCL + CUDA events on GPU, gloo + perf_counter with --cpu."""
    if cpu:
        return {"backend": "gloo", "device_type": "cpu", "timing": "perf_counter", "comm_library": "gloo"}
    return {"backend": "nccl", "device_type": "cuda", "timing": "cuda_events", "comm_library": "nccl"}


def problems(doc: dict[str, Any], op: str, cpu: bool) -> list[str]:
    """Everything wrong with one job document, as sentences (empty when the job is good)."""
    from shardscope.contracts.factors import busbw_factor

    found = []
    env, rows = doc.get("env", {}), doc.get("rows", [])
    want = expected_env(cpu)
    for key in ("backend", "device_type", "timing"):
        if env.get(key) != want[key]:
            found.append(f"{op}: env {key} is {env.get(key)!r}, expected {want[key]!r}")
    if not str(env.get("comm_library", "")).startswith(want["comm_library"]):
        found.append(f"{op}: comm_library is {env.get('comm_library')!r}, expected it to start with {want['comm_library']!r}")
    if not env.get("devices"):
        found.append(f"{op}: env lists no devices")
    if not cpu and not env.get("gpu_driver"):
        found.append(f"{op}: env has no GPU driver version")
    if not rows:
        found.append(f"{op}: no rows")
    for row in rows:
        where = f"{op} at {row.get('size_bytes')} B"
        t, t_max = row.get("time_s"), row.get("time_max_s")
        if not (isinstance(t, float) and math.isfinite(t) and t > 0):
            found.append(f"{where}: time_s {t!r} is not a positive number")
            continue
        if not (isinstance(t_max, float) and t_max >= t):
            found.append(f"{where}: time_max_s {t_max!r} is below time_s {t}")
        if row.get("check_ok") is not True or row.get("wrong") != 0:
            found.append(f"{where}: data check failed ({row.get('wrong')} wrong elements)")
        if not math.isclose(row["algbw_gbps"], row["size_bytes"] / t / 1e9, rel_tol=1e-9):
            found.append(f"{where}: algbw_gbps does not equal size / time")
        if not math.isclose(row["busbw_gbps"], row["algbw_gbps"] * busbw_factor(op, row["world_size"]), rel_tol=1e-9, abs_tol=1e-12):
            found.append(f"{where}: busbw_gbps does not follow nccl-tests' factor")
    return found


def run_job(op: str, work: Path, max_bytes: int, cpu: bool) -> tuple[dict[str, Any] | None, str]:
    """Run one worker job under the guard; its document (None on failure) and its log text."""
    out, log = work / f"{op}.json", work / f"{op}.log"
    cmd = [sys.executable, "-m", "shardscope.collectives.guard", "--job-id", f"gpu-check-{op}", "--log", str(log),
           "--wall-s", str(WALL_S), "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", "1", "-m", "shardscope.collectives", "--op", op, "--check", "-b", "1024",
           "-e", str(max_bytes), "-f", "4", "-w", "5", "-n", "20", "--timeout-s", "120",
           "--job-id", f"gpu-check-{op}", "--out", str(out), *(["--cpu"] if cpu else [])]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=WALL_S + 60, check=False)
    text = log.read_text(errors="replace") if log.exists() else proc.stderr
    if proc.returncode != 0 or not out.exists():
        return None, text + proc.stderr
    return json.loads(out.read_text()), text


def run_peer(work: Path, max_bytes: int) -> str:
    """nccl-tests' all_reduce_perf on the same GPU, imported; one summary line."""
    from shardscope.collectives.nccl_tests import read_nccl_tests
    from shardscope.collectives.peer import PEER_BINARY, peer_command

    binary = shutil.which(PEER_BINARY)
    if binary is None:
        return f"nccl-tests: {PEER_BINARY} not on the PATH; peer not run"
    raw = work / f"{PEER_BINARY}-ws1.txt"
    sweep = {"min_bytes": 1024, "max_bytes": max_bytes, "factor": 4, "warmup": 5, "iters": 20}
    with open(raw, "w") as handle:
        subprocess.run(peer_command(binary, 1, sweep, "float32", True), stdout=handle, stderr=subprocess.STDOUT,
                       timeout=WALL_S, check=False)
    result = read_nccl_tests(raw)
    slowest = max(row["time_s"] for row in result.rows)
    return (f"nccl-tests: {result.op}, {result.world_size} rank, {len(result.rows)} rows, version {result.version}, "
            f"largest time {slowest * 1e6:.1f} us (algbw peak {max(r['algbw_gbps'] for r in result.rows):.2f} GB/s)")


def main(argv: list[str] | None = None) -> int:
    """Run the check; 0 on PASS or SKIPPED, 1 on FAIL."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="run the same checks on gloo (to test this script without a GPU)")
    p.add_argument("--max-bytes", type=int, default=256 * 2**20, help="largest message (default 256 MiB)")
    args = p.parse_args(argv)

    import torch

    if not args.cpu and not torch.cuda.is_available():
        print("SKIPPED: no CUDA GPU visible (torch.cuda.is_available() is False); nothing to check here")
        return 0
    from shardscope.collectives.report import format_report

    started = time.monotonic()
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="shardscope-gpu-check-") as tmp:
        work = Path(tmp)
        for op in OPS:
            doc, log = run_job(op, work, args.max_bytes, args.cpu)
            if doc is None:
                failures.append(f"{op}: the job failed; its log ends with:\n{log[-3000:]}")
                continue
            print(format_report(doc, f"{op} (world size 1)"))
            failures.extend(problems(doc, op, args.cpu))
        if not args.cpu:
            try:
                print(run_peer(work, args.max_bytes))
            except Exception as exc:  # noqa: BLE001 -- the peer is informative; its failure is reported, not fatal
                print(f"nccl-tests peer could not be run or read: {exc}")
    elapsed_s = time.monotonic() - started
    if failures:
        print(f"FAIL ({elapsed_s:.0f} s):")
        for failure in failures:
            print(f"  - {failure}")
        return 1
    print(f"PASS ({elapsed_s:.0f} s): {', '.join(OPS)} on {'gloo/CPU' if args.cpu else 'NCCL/GPU'}, world size 1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
