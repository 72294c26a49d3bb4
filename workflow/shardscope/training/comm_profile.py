"""Share of one training step during which communication is in flight, from ``torch.profiler``.

One extra, untimed step runs under the profiler inside a ``shardscope::step`` range. The
communication intervals are NCCL kernels on the GPU (``nccl…`` device events) or, on CPU,
gloo's own work on its threads (``gloo:all_reduce``, ``gloo:all_gather``…). Their union,
clipped to the step's range, divided by the step's length is the share: 0 when no byte
moves, near 1 when the step is all communication. Overlapped communication counts as time in
communication, so the share is an upper bound on what removing communication would save.
"""

from __future__ import annotations

from typing import Any

import torch

from shardscope.device import DistContext, synchronize

STEP_RANGE = "shardscope::step"


def union_length(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Total length of the union of ``intervals``, each clipped to [lo, hi]."""
    clipped = sorted((max(a, lo), min(b, hi)) for a, b in intervals if min(b, hi) > max(a, lo))
    total, end = 0.0, lo
    for a, b in clipped:
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def is_comm_event(name: str, on_device: bool) -> bool:
    """Whether a profiler event is communication work: NCCL kernels on a GPU, gloo work on CPU."""
    lowered = name.lower()
    return lowered.startswith("nccl") if on_device else lowered.startswith("gloo:")


def comm_share_from_events(events: Any, on_device: bool) -> float | None:
    """Share of the ``shardscope::step`` range covered by communication events; None without the range."""
    steps = [e for e in events if e.name == STEP_RANGE]
    if not steps:
        return None
    lo, hi = steps[0].time_range.start, steps[0].time_range.end
    if hi <= lo:
        return None
    comm = []
    for e in events:
        device_event = getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA
        if device_event == on_device and is_comm_event(e.name, on_device):
            comm.append((e.time_range.start, e.time_range.end))
    return union_length(comm, lo, hi) / (hi - lo)


def comm_time_share(prepared: Any, tokens: torch.Tensor, ctx: DistContext) -> float | None:
    """Profile one full step (forward, backward, optimizer) and return its communication share."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.is_cuda else [])
    synchronize(ctx)
    torch.distributed.barrier()
    with profile(activities=activities) as prof:
        with record_function(STEP_RANGE):
            prepared.forward_backward(tokens)
            prepared.step()
            synchronize(ctx)
    return comm_share_from_events(prof.events(), on_device=ctx.is_cuda)
