"""``shardscope train``: launch one training job under torchrun and make its outcome data.

A job that fails (out of memory, a strategy that breaks) must not stop the pipeline: the
launcher reads the error files the ranks left, writes a result with outcome ``oom`` or
``failed`` and the error text, and returns 0. Only a launcher that cannot write any result
returns non-zero.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from shardscope.fileio import atomic_write_json, read_json
from shardscope.training.worker import SCHEMA, error_path


def prebuild_deepspeed_cpu_ops(log: Any) -> None:
    """Build DeepSpeed's shared-memory comm op once, so ranks do not race to JIT-build it."""
    env = dict(os.environ, DS_ACCELERATOR="cpu")
    code = "from deepspeed.comm.torch import build_shm_op; build_shm_op()"
    subprocess.run([sys.executable, "-c", code], env=env, stdout=log, stderr=subprocess.STDOUT, check=False)


def failure_document(job: dict[str, Any], out: str, nproc: int, returncode: int, log_path: str) -> dict[str, Any]:
    """The result of a job whose ranks failed: outcome ``oom`` if any rank ran out of memory."""
    reports = [read_json(p) for p in sorted(glob.glob(f"{glob.escape(out)}.rank*.error.json"))]
    oom = any(r.get("oom") for r in reports)
    first = reports[0]["error"] if reports else f"torchrun exited with status {returncode}; see {log_path}"
    return {
        "schema": SCHEMA,
        "kind": "training",
        "job": dict(job, world_size=nproc),
        "env": {},
        "outcome": "oom" if oom else "failed",
        "error": first[:2000],
        "summary": {},
        "steps": [],
        "ranks": [],
    }


def launch(nproc: int, worker_args: list[str], job: dict[str, Any], out: str, log_path: str, cpu: bool) -> int:
    """Run the worker on ``nproc`` local ranks; always leave a result at ``out`` unless unwritable."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    for stale in [out, *glob.glob(f"{glob.escape(out)}.rank*.error.json")]:
        Path(stale).unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "shardscope.training", *worker_args, "--out", out]
    with open(log_path, "a", encoding="utf-8") as log:
        if cpu and job["strategy"].startswith("zero"):
            prebuild_deepspeed_cpu_ops(log)
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        returncode = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    if returncode == 0 and Path(out).exists():
        return 0
    atomic_write_json(out, failure_document(job, out, nproc, returncode, log_path))
    for path in range(nproc):
        Path(error_path(out, path)).unlink(missing_ok=True)
    print(f"training job {job.get('job_id')} ended with outcome {read_json(out)['outcome']}; log: {log_path}", file=sys.stderr)
    return 0
