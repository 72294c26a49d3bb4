"""The peak of one training step as torch's own instruments see it, beside the tensor tracker's.

Three views of the same step (forward + backward + optimizer step, on one rank):

``tracker``
    :func:`shardscope.training.memtrack.tracked_step`: the bytes held after backward plus the
    transient peak (what every training job stores as ``tracked_peak_bytes``).
``profiler``
    the CPU allocator's own events from ``torch.profiler.profile(profile_memory=True)``: each
    allocation and free in time order, their running sum's maximum over the bytes held when the
    step began (parameters, gradients and optimizer state, counted by
    :func:`shardscope.training.held_bytes.measure_held_bytes`). The allocator's truth on CPU.
``memtracker``
    ``torch.distributed._tools.mem_tracker.MemTracker`` (DDP, or a plain module) or
    ``FSDPMemTracker`` (FSDP2): torch's tensor-level tracker, its ``peak`` snapshot's total (both are
    handed the torch optimizer itself, whose ``step`` they hook).

Each view runs its step as the second micro-batch of a gradient accumulation (one
``forward_backward`` first), so gradients exist from the step's start, as the tracker counts
them (:mod:`shardscope.training.memtrack`: "gradients counted throughout"), and all three count
the same bytes. Used by ``tests/training/test_memtrack_instruments.py`` (within 1%) and
``benchmarks/instruments.py``.

Why DeepSpeed is measured by our tracker alone: ``MemTracker`` sorts memory into parameters,
gradients and optimizer state by torch's own roles (``module.parameters()``, ``param.grad``,
``optimizer.state``), and DeepSpeed's ZeRO keeps its parameter partitions (``ds_tensor``), its
reduced gradient partitions and fp32 master weights in attributes of its own engine and
optimizer, so MemTracker would file them as other memory and could not tell the states apart;
:mod:`shardscope.training.held_bytes` knows those attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from shardscope.training.held_bytes import innermost_optimizer, measure_held_bytes

VIEWS = ("tracker", "profiler", "memtracker")


def _accumulated(prepared: Any, tokens: torch.Tensor) -> None:
    """A first micro-batch's forward and backward, so that the measured step starts with gradients."""
    prepared.forward_backward(tokens)


def tracker_peak_bytes(prepared: Any, first: torch.Tensor, tokens: torch.Tensor) -> int:
    """The tensor tracker's peak of one step: bytes held after backward plus the transient peak."""
    from shardscope.training.memtrack import tracked_step

    _accumulated(prepared, first)
    tracked, held = tracked_step(prepared, tokens)
    return held.param_bytes + held.grad_bytes + held.optim_bytes + tracked.transient_peak_bytes


def profiler_peak_bytes(prepared: Any, first: torch.Tensor, tokens: torch.Tensor) -> int:
    """The CPU allocator's peak of one step from the profiler's memory events (see the module docstring)."""
    from torch.profiler import ProfilerActivity, profile

    _accumulated(prepared, first)
    held = measure_held_bytes(prepared.model, prepared.optimizer)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        prepared.forward_backward(tokens)
        prepared.step()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    current = peak = 0
    for event in events:
        current += event.nbytes()
        peak = max(peak, current)
    return held.param_bytes + held.grad_bytes + held.optim_bytes + peak


def memtracker_peak_bytes(prepared: Any, first: torch.Tensor, tokens: torch.Tensor) -> int:
    """``MemTracker``'s (DDP) or ``FSDPMemTracker``'s (FSDP2) peak total of one step."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker

    if prepared.strategy.startswith("zero"):
        raise ValueError(f"{prepared.strategy}: MemTracker cannot file DeepSpeed's states (module docstring)")
    _accumulated(prepared, first)
    if prepared.strategy in ("fsdp", "fsdp_grad_op", "hsdp"):
        tracker = FSDPMemTracker(prepared.model, innermost_optimizer(prepared.optimizer))
    else:
        tracker = MemTracker()
        tracker.track_external(prepared.model, innermost_optimizer(prepared.optimizer))
    with tracker:
        prepared.forward_backward(tokens)
        prepared.step()
    peaks = tracker.get_tracker_snapshot("peak")
    return int(sum(by_kind["Total"] for by_kind in peaks.values()))


PEAKS: dict[str, Callable[[Any, torch.Tensor, torch.Tensor], int]] = {
    "tracker": tracker_peak_bytes, "profiler": profiler_peak_bytes, "memtracker": memtracker_peak_bytes}


def peaks_of_step(prepared: Any, batch: Callable[[int], torch.Tensor], views: tuple[str, ...] = VIEWS) -> dict[str, int]:
    """Each view's peak of the same step (``batch(i)``: the tokens of micro-batch ``i``); the views run in turn."""
    return {view: PEAKS[view](prepared, batch(0), batch(1)) for view in views}
