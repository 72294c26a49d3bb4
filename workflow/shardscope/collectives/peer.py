"""nccl-tests as a peer: run ``all_reduce_perf`` on the same GPUs as our all_reduce jobs.

On a GPU node where nccl-tests is installed (``all_reduce_perf`` on the PATH), the pipeline
runs it once per planned (world size, placement) with the same sweep, in one process
driving ``world_size`` GPUs (``-g N``), and imports its table with
``shardscope collectives import``. Its numbers then sit beside ours in the database: if
torch.distributed's all_reduce reaches a clearly lower busbw than NCCL's own test on the
same GPUs, the gap is ours (harness or framework), not the fabric's.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from shardscope.collectives.report import NCCL_TESTS_TYPES

#: The nccl-tests binary the peer runs.
PEER_BINARY = "all_reduce_perf"


def peer_job_id(world_size: int, placement: str) -> str:
    """The peer job's id, also the stem of its result file: ``nccl-tests-ws{n}-{placement}``."""
    return f"nccl-tests-ws{world_size}-{placement}"


def peer_jobs(plan: dict[str, Any], which: Callable[[str], str | None]) -> list[dict[str, Any]]:
    """One peer job per planned (world size, placement) of the default transport; none off GPU.

    ``which`` is :func:`shutil.which` (injected for tests): no job is planned when the plan
    runs on CPU or the binary is not on the PATH.
    """
    if plan.get("device") != "gpu":
        return []
    binary = which(PEER_BINARY)
    if binary is None:
        return []
    jobs: dict[str, dict[str, Any]] = {}
    for job in plan.get("collectives", []):
        if job.get("transport") != "default" or int(job["world_size"]) < 2:
            continue
        job_id = peer_job_id(int(job["world_size"]), job["placement"])
        jobs.setdefault(job_id, {"job_id": job_id, "binary": binary, "world_size": int(job["world_size"]),
                                 "placement": job["placement"], "devices": list(job.get("devices") or [])})
    return list(jobs.values())


def find_peer_job(plan: dict[str, Any], which: Callable[[str], str | None], world_size: int, placement: str) -> dict[str, Any]:
    """The planned peer job for ``world_size`` and ``placement``; ValueError when none is planned."""
    job_id = peer_job_id(int(world_size), placement)
    for job in peer_jobs(plan, which):
        if job["job_id"] == job_id:
            return job
    raise ValueError(f"no nccl-tests peer job {job_id!r} is planned (it needs a GPU plan with that world size "
                     f"and placement, and {PEER_BINARY} on the PATH)")


def peer_command(binary: str, world_size: int, sweep: dict[str, Any], dtype: str, check: bool) -> list[str]:
    """The ``all_reduce_perf`` command line for one job: our sweep, one process driving N GPUs.

    ``-b/-e/-f`` are the sweep's sizes, ``-w/-n`` its warmup and timed iterations, ``-g`` the
    GPUs of the job, ``-d`` the nccl-tests name of our dtype and ``-c`` the data check.
    """
    if world_size < 1:
        raise ValueError(f"world size must be at least 1, got {world_size}")
    if dtype not in NCCL_TESTS_TYPES:
        raise ValueError(f"dtype {dtype!r} has no nccl-tests name; expected one of {', '.join(NCCL_TESTS_TYPES)}")
    return [
        binary,
        "-b", str(int(sweep["min_bytes"])),
        "-e", str(int(sweep["max_bytes"])),
        "-f", str(int(sweep["factor"])),
        "-g", str(int(world_size)),
        "-w", str(int(sweep["warmup"])),
        "-n", str(int(sweep["iters"])),
        "-d", NCCL_TESTS_TYPES[dtype],
        "-c", "1" if check else "0",
    ]


def peer_env(job: dict[str, Any]) -> dict[str, str]:
    """The environment of a peer job: the job's GPUs made visible, as for our own jobs."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(d) for d in job["devices"])} if job["devices"] else {}


def peer_result_files(plan: dict[str, Any], results_dir: str, which: Callable[[str], str | None]) -> list[str]:
    """The result files of every planned peer job (``[]`` off GPU or without the binary): the
    collect rule's input, so peers run exactly when they can."""
    return [f"{results_dir}/collectives/{job['job_id']}.json" for job in peer_jobs(plan, which)]


def peer_shell_words(plan: dict[str, Any], which: Callable[[str], str | None], world_size: int, placement: str,
                     sweep: dict[str, Any], dtype: str, check: bool) -> str:
    """``VAR=value ... /path/all_reduce_perf -b ...`` for one planned peer job, shell-quoted (for ``env``)."""
    job = find_peer_job(plan, which, world_size, placement)
    words = [f"{k}={v}" for k, v in sorted(peer_env(job).items())]
    return shlex.join([*words, *peer_command(job["binary"], int(world_size), sweep, dtype, check)])
