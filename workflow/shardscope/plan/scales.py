"""The memory-bound model scale of a GPU plan, sized from the detected GPU memory.

A GPU node trains two scales: the communication-bound one of the ``gpu`` section (gpt2-small:
its step time is mostly gradient traffic) and the memory-bound one of config
``training.memory_bound`` (the seed's Mistral-7B shape, random weights, bf16, seq 4096), where
the question is which strategy fits at all. DDP of 7.2 B parameters needs 16 bytes per parameter
(116 GB) on every GPU, so on 80 GB GPUs its run must be an ``oom`` row, while ZeRO-3 / FSDP
shard the same state over the ranks.

The model is planned where its whole peak under ZeRO-3 (the most sharded strategy: states, activations
and buffers at the section's sequence length and micro-batch, in bf16) fits the usable share of one
GPU's memory (:data:`USABLE_FRACTION`), the bytes :func:`shardscope.costmodel.answer.job_peak` gives
advise, ``memory`` and the report; otherwise the next smaller preset of :data:`SMALLER` that does, and
the reason says what was scaled down and why. Where
the probe saw no GPU memory, the configured model is planned as it is (a run that does not fit
is an ``oom`` row, never a crash). Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shardscope.costmodel.step import DEFAULT_USABLE_FRACTION
from shardscope.settings import MemoryBound, section_settings

#: Share of one GPU's memory the whole modeled peak may fill: advise's (all of it: the peak counts the allocator's
#: reserve, the CUDA context and NCCL's buffers itself).
USABLE_FRACTION = DEFAULT_USABLE_FRACTION
#: Presets to scale down to, largest first (gpt2-small is the communication-bound scale already).
SMALLER = ("mistral-7b", "llama-1b")


@dataclass(frozen=True)
class Scale:
    """The memory-bound model chosen for this node: its spec, sizing, strategies and why it was chosen."""

    model: str | dict[str, Any]
    model_name: str
    seq_len: int
    micro_batch: int
    strategies: tuple[str, ...]
    reason: str


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def gpu_memory_bytes(topology: dict[str, Any]) -> int | None:
    """The smallest GPU memory the probe saw, or None when it saw none."""
    sizes = [g.get("memory_bytes") for g in topology.get("gpus", [])]
    known = [int(s) for s in sizes if s]
    return min(known) if known and len(known) == len(sizes) else None


def memory_scale(topology: dict[str, Any], section: MemoryBound | Mapping[str, Any], world_size: int) -> Scale | str:
    """The memory-bound scale of config ``training.memory_bound`` (its settings, or the section as a mapping, its
    defaults then the schema's) for ``world_size`` GPUs, or why none is planned."""
    from shardscope.contracts.models import resolve_model
    from shardscope.costmodel.answer import job_peak
    from shardscope.contracts.strategies import WORKER_ADAMW, WORKER_DDP_BUCKET_VIEW
    from shardscope.costmodel.step import StepAssumptions

    section = section_settings(MemoryBound, "training.memory_bound", section)
    wanted = section.model
    name, cfg = resolve_model(wanted)
    strategies = tuple(section.strategies)
    seq_len, micro_batch = int(section.seq_len), int(section.micro_batch)
    memory = gpu_memory_bytes(topology)
    if memory is None:
        return Scale(wanted, name, min(seq_len, cfg.max_seq_len), micro_batch, strategies,
                     f"GPU memory was not detected: {name} is planned as configured, and a strategy that does not fit "
                     "is an oom row")
    ladder = [wanted, *(SMALLER[SMALLER.index(wanted) + 1:] if isinstance(wanted, str) and wanted in SMALLER else ())]
    notes = []
    usable = int(memory * USABLE_FRACTION)
    for candidate in ladder:
        cname, ccfg = resolve_model(candidate)
        step = StepAssumptions(micro_batch=micro_batch, seq_len=min(seq_len, ccfg.max_seq_len), dtype="bfloat16",
                               ddp_bucket_view=WORKER_DDP_BUCKET_VIEW, adamw=WORKER_ADAMW)
        sharded_terms, full_terms = job_peak("zero3", ccfg, world_size, step), job_peak("ddp", ccfg, world_size, step)
        sharded, full = sharded_terms.peak_bytes, full_terms.peak_bytes
        if sharded_terms.fits(usable):
            fit = "fits" if full_terms.fits(usable) else "does not fit (expect an oom row)"
            why = (f"{cname} ({ccfg.param_count() / 1e9:.2f} B parameters): sharded over {world_size} GPU(s) (ZeRO-3) "
                   f"its whole modeled peak is {_gib(sharded)} per GPU ({_gib(sharded_terms.device_bytes)} with the CUDA "
                   f"context and NCCL's buffers beside it, what must fit) of the {_gib(usable)} usable; unsharded (DDP) "
                   f"{_gib(full)}, which {fit}")
            if notes:
                why = f"scaled down to {cname}: " + "; ".join(notes) + f". {why}"
            return Scale(candidate, cname, min(seq_len, ccfg.max_seq_len), micro_batch, strategies, why)
        notes.append(f"{cname} would peak at {_gib(sharded_terms.device_bytes)} per GPU (with the CUDA context and "
                     f"NCCL's buffers) even sharded over {world_size} GPU(s) (ZeRO-3), "
                     f"above the {_gib(usable)} usable of one GPU ({USABLE_FRACTION:.0%} of {_gib(memory)})")
    return "no memory-bound model is planned: " + "; ".join(notes)

