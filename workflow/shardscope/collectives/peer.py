"""nccl-tests as a peer: run ``all_reduce_perf`` on the same GPUs as our all_reduce jobs.

On a GPU node where nccl-tests is installed (``all_reduce_perf`` on the PATH), the planner
plans it once per planned (world size, placement) with the same sweep
(:func:`shardscope.plan.machine.peer_section`); ``shardscope job run`` runs it in one process
driving ``world_size`` GPUs (``-g N``), and the rule imports its table with
``shardscope collectives import``. Its numbers then sit beside ours in the database: if
torch.distributed's all_reduce reaches a clearly lower busbw than NCCL's own test on the
same GPUs, the gap is ours (harness or framework), not the fabric's.
"""

from __future__ import annotations

from typing import Any

from shardscope.collectives.report import NCCL_TESTS_TYPES

#: The nccl-tests binary the peer runs.
PEER_BINARY = "all_reduce_perf"


def peer_job_id(world_size: int, placement: str) -> str:
    """The peer job's id, also the stem of its result file: ``nccl-tests-ws{n}-{placement}``."""
    return f"nccl-tests-ws{world_size}-{placement}"


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
