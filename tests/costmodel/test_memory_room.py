"""The caching allocator's cache where the GPU has room (costmodel/memory_peak.py's ``with_room``; modeled numbers).

A training process's reserved peak runs above its allocated peak while the GPU has room to spare (freed blocks stay
cached), and falls back to its allocated peak and fragmentation when memory runs short (the allocator frees its cache
and retries before it fails). So the peak a run shows grows into the room its GPU leaves, and "fits" is decided
without the cache.
"""

from __future__ import annotations

import json

import pytest

from shardscope.cli import main
from shardscope.contracts.models import PRESETS
from shardscope.costmodel.answer import job_peak
from shardscope.costmodel.memory_peak import ALLOCATOR_CACHE_FRACTION, ALLOCATOR_RESERVE_FRACTION, with_room
from shardscope.costmodel.step import StepAssumptions

CFG = PRESETS["mistral-7b"]
ASKED = StepAssumptions(micro_batch=1, seq_len=4096, dtype="bfloat16")


def test_the_cache_grows_into_the_room_and_stops_at_it() -> None:
    bare = job_peak("zero3", CFG, 8, ASKED)
    allocated = bare.allocated_peak_bytes
    assert bare.cache_bytes == 0 and bare.peak_bytes == pytest.approx(allocated * (1 + ALLOCATOR_RESERVE_FRACTION), abs=2)
    roomy = job_peak("zero3", CFG, 8, ASKED, capacity_bytes=10**12)
    assert roomy.peak_bytes == pytest.approx(allocated * (1 + ALLOCATOR_CACHE_FRACTION), abs=2)
    assert roomy.allocated_peak_bytes == allocated and roomy.fits(bare.device_bytes)
    just = bare.device_bytes + 10**9  # a GPU with 1 GB to spare beyond what the run needs
    tight = job_peak("zero3", CFG, 8, ASKED, capacity_bytes=just)
    assert tight.cache_bytes == pytest.approx(10**9, abs=1) and tight.device_bytes == just and tight.fits(just)
    short = job_peak("zero3", CFG, 8, ASKED, capacity_bytes=bare.device_bytes - 1)
    assert short.cache_bytes == 0 and not short.fits(bare.device_bytes - 1)
    assert with_room(roomy, 10**12) == roomy  # applied twice, the same


def test_no_cache_on_the_allocated_basis_or_under_a_calibrated_overhead() -> None:
    cpu = job_peak("zero3", CFG, 8, ASKED, device="cpu", capacity_bytes=10**12)
    assert cpu.basis == "allocated" and cpu.cache_bytes == 0
    calibrated = job_peak("zero3", CFG, 8, ASKED, overhead_fraction=0.2, capacity_bytes=10**12)
    assert calibrated.cache_bytes == 0


def test_memory_and_advise_show_the_cache_and_say_so(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["memory", "--model", "mistral-7b", "--gpus", "8", "--strategy", "zero3", "--no-deepspeed-estimate",
            "--gpu-memory-gb", "141"]
    assert main([*args, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["peak"]["cache_bytes"] > 0 and row["peak_fits"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"up to {ALLOCATOR_CACHE_FRACTION:.1%} in all" in out and "'fits' is decided without the cache" in out
    (line,) = [x for x in out.splitlines() if x.startswith("peak") and "zero3" in x]
    cells = line.split()  # the overhead column holds the reserve and the cache: the terms add up to the peak
    numbers = [float(cells[i - 1]) for i, c in enumerate(cells) if c == "GB"]
    assert sum(numbers[:4]) == pytest.approx(numbers[4], abs=0.03)
    advice = ["advise", "--model", "mistral-7b", "--gpus", "8", "--topology", "preset:hgx-h100", "--json"]
    assert main(advice) == 0
    doc = json.loads(capsys.readouterr().out)
    for entry in doc["ranking"]:
        peak = job_peak(entry["strategy"], CFG, 8, StepAssumptions(), capacity_bytes=doc["decision"]["usable_bytes"])
        assert entry["peak_bytes"] == peak.peak_bytes and entry["allocated_peak_bytes"] == peak.allocated_peak_bytes
        assert entry["fits"] == peak.fits(doc["decision"]["usable_bytes"])
