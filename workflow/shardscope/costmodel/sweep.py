"""Predicted busbw against message size and GPU count for a whole machine: the ``predict collectives`` sweep."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from shardscope.costmodel.calibrate import Calibration
from shardscope.costmodel.collectives import (
    CollectivePrediction,
    Job,
    predict_collective,
)
from shardscope.costmodel.machine import Machine
from shardscope.costmodel.placement import best_placement
from shardscope.errors import UserError

#: nccl-tests' usual sweep: 1 KiB to 8 GiB, doubling.
DEFAULT_SIZES = tuple(2**k for k in range(10, 34))
TRANSPORTS = ("default", "pcie")


def default_world_sizes(machine: Machine) -> list[int]:
    """Powers of two up to the node's GPU count, and the count itself (2 and 4 ranks on the cpu fabric)."""
    if machine.fabric == "cpu":
        return [2, 4]
    count = machine.gpu_count
    sizes = [n for n in (2, 4, 8, 16, 32, 64) if n <= count]
    if count >= 2 and count not in sizes:
        sizes.append(count)
    return sizes or [2]


def job_for(machine: Machine, world_size: int, transport: str = "default") -> Job:
    """The job of ``world_size`` ranks: the best GPUs of one node, or whole nodes when larger."""
    if transport not in TRANSPORTS:
        raise UserError(f"unknown transport {transport!r}; expected one of {', '.join(TRANSPORTS)}")
    if world_size < 2:
        raise UserError(f"a collective needs at least 2 ranks, got {world_size}")
    if machine.fabric == "cpu":
        return Job(machine, (), cpu_ranks=world_size)
    nvlink = transport == "default"
    if world_size <= machine.gpu_count:
        return Job(machine, best_placement(machine, world_size, nvlink).members, nvlink=nvlink)
    if world_size % machine.gpu_count:
        raise UserError(f"{world_size} ranks is more than the node's {machine.gpu_count} GPUs and not a multiple of it")
    return Job(machine, machine.gpus, nodes=world_size // machine.gpu_count, nvlink=nvlink)


def predict_sweep(machine: Machine, ops: Sequence[str], world_sizes: Sequence[int], sizes: Sequence[int] = DEFAULT_SIZES,
                  calibrations: Mapping[str, Calibration] | None = None, transport: str = "default",
                  algorithms: Sequence[str] | None = None) -> list[tuple[CollectivePrediction, Job]]:
    """Predictions for every (op, world size, size); calibrated ops use their fitted latency and efficiency."""
    out: list[tuple[CollectivePrediction, Job]] = []
    for n in world_sizes:
        job = job_for(machine, n, transport)
        for op in ops:
            cal = (calibrations or {}).get(op)
            peak = predict_collective(op, 1 << 40, job, algorithms).algbw_gbps if cal else 0.0
            for size in sizes:
                pred = predict_collective(op, size, job, algorithms)
                if cal:
                    time_s = cal.time_s(size, peak)
                    algbw = size / time_s / 1e9
                    pred = replace(pred, time_s=time_s, algorithm=f"calibrated:{pred.algorithm}", algbw_gbps=algbw,
                                   busbw_gbps=algbw * (pred.busbw_gbps / pred.algbw_gbps))
                out.append((pred, job))
    return out
