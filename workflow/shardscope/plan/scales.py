"""The memory-bound model scale of a GPU plan, sized from the detected GPU memory.

A GPU node trains two scales: the communication-bound one of the ``gpu`` section (gpt2-small:
its step time is mostly gradient traffic) and the memory-bound one of config
``training.memory_bound`` (the seed's Mistral-7B shape, random weights, bf16, seq 4096), where
the question is which strategy fits at all. DDP of 7.2 B parameters needs 16 bytes per parameter
(116 GB) on every GPU, so on 80 GB GPUs its run must be an ``oom`` row, while ZeRO-3 / FSDP
shard the same state over the ranks.

The model is planned where its fully sharded state (ZeRO-3, 16 bytes per parameter over the
world size) fits within :data:`STATE_SHARE` of one GPU's memory; otherwise the next smaller
preset of :data:`SMALLER` that does, and the reason says what was scaled down and why. Where
the probe saw no GPU memory, the configured model is planned as it is (a run that does not fit
is an ``oom`` row, never a crash). Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Share of one GPU's memory the sharded model states may fill; the rest is left to activations,
#: the gathered layers and the framework's buffers.
STATE_SHARE = 0.6
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


def memory_scale(topology: dict[str, Any], section: dict[str, Any], world_size: int) -> Scale | str:
    """The memory-bound scale of config ``training.memory_bound`` for ``world_size`` GPUs, or why none is planned."""
    from shardscope.contracts.models import resolve_model
    from shardscope.costmodel.memory_model import predict_memory

    wanted = section["model"]
    name, cfg = resolve_model(wanted)
    strategies = tuple(section.get("strategies", ("ddp", "zero3", "fsdp")))
    seq_len, micro_batch = int(section.get("seq_len", 4096)), int(section.get("micro_batch", 1))
    memory = gpu_memory_bytes(topology)
    if memory is None:
        return Scale(wanted, name, min(seq_len, cfg.max_seq_len), micro_batch, strategies,
                     f"GPU memory was not detected: {name} is planned as configured, and a strategy that does not fit "
                     "is an oom row")
    ladder = [wanted, *(SMALLER[SMALLER.index(wanted) + 1:] if isinstance(wanted, str) and wanted in SMALLER else ())]
    notes = []
    for candidate in ladder:
        cname, ccfg = resolve_model(candidate)
        sharded = predict_memory(ccfg.param_count(), "zero3", world_size)["total_bytes"]
        full = predict_memory(ccfg.param_count(), "ddp", world_size)["total_bytes"]
        if sharded <= STATE_SHARE * memory:
            fit = "fits (before activations)" if full <= memory else "does not fit (expect an oom row)"
            why = (f"{cname} ({ccfg.param_count() / 1e9:.2f} B parameters): sharded over {world_size} GPU(s) its weights, "
                   f"gradients and Adam state take {_gib(sharded)} per GPU of {_gib(memory)}; unsharded (DDP) "
                   f"{_gib(full)}, which {fit}")
            if notes:
                why = f"scaled down to {cname}: " + "; ".join(notes) + f". {why}"
            return Scale(candidate, cname, min(seq_len, ccfg.max_seq_len), micro_batch, strategies, why)
        notes.append(f"{cname} would take {_gib(sharded)} per GPU even sharded over {world_size} GPU(s), above "
                     f"{STATE_SHARE:.0%} of the {_gib(memory)} of one GPU")
    return "no memory-bound model is planned: " + "; ".join(notes)

