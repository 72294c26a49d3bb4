"""The communication share's arithmetic: interval unions and which profiler events count."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from shardscope.training.comm_profile import STEP_RANGE, comm_share_from_events, is_comm_event, union_length


def test_union_merges_overlaps_and_clips() -> None:
    assert union_length([], 0, 10) == 0
    assert union_length([(1, 3), (2, 5), (7, 8)], 0, 10) == 5  # [1,5] + [7,8]
    assert union_length([(2, 4), (1, 6)], 0, 10) == 5  # nested
    assert union_length([(-5, 2), (9, 20), (30, 40)], 0, 10) == 3  # clipped to the step; outside ignored


@pytest.mark.parametrize(
    ("name", "on_device", "expected"),
    [
        ("gloo:all_reduce", False, True),
        ("gloo:all_gather", False, True),
        ("c10d::allreduce_", False, False),  # the enqueue on the main thread, not the transfer
        ("aten::mm", False, False),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", True, True),
        ("ampere_sgemm_128x64_tn", True, False),
    ],
)
def test_which_events_are_communication(name: str, on_device: bool, expected: bool) -> None:
    assert is_comm_event(name, on_device) is expected


def _event(name: str, start: float, end: float, device: bool = False) -> SimpleNamespace:
    kind = torch.autograd.DeviceType.CUDA if device else torch.autograd.DeviceType.CPU
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end), device_type=kind)


def test_share_of_the_step_range() -> None:
    events = [_event(STEP_RANGE, 100, 200), _event("gloo:all_reduce", 120, 150), _event("gloo:all_gather", 140, 160),
              _event("aten::mm", 100, 200), _event("ncclDevKernel_x", 100, 200, device=True)]
    assert comm_share_from_events(events, on_device=False) == pytest.approx(0.4)
    assert comm_share_from_events(events, on_device=True) == pytest.approx(1.0)
    assert comm_share_from_events(events[1:], on_device=False) is None  # no step range: not measured
