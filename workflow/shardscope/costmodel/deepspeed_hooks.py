"""Host time DeepSpeed's ZeRO gradient hooks add in the releases that recount the backward's parameters in every hook.

DeepSpeed 0.18.5 and 0.18.6 call ``count_used_parameters_in_backward`` inside every parameter's gradient hook (added
for reentrant checkpointing by deepspeedai/DeepSpeed#7780): each hook walks every trainable parameter to count those
the running backward will touch, so one backward of ``P`` trainable parameter tensors walks ``P²`` of them on the
host; the GPU waits for it once the host's work takes longer than the GPU's (the step model takes the longer).
Release 0.18.7 counts once per backward phase again (#7886, "Fix hook count performance regression from v0.18.5";
the two releases' ``stage_1_and_2.py`` and ``stage3.py`` read here). The fix measured a
24-layer transformer of 147 parameter tensors, ZeRO-2, bf16, batch 8 on 8 H100 at 0.1265 s per iteration before and
0.0505 s after: 0.076 s over 147² hook-parameter visits, :data:`SECONDS_PER_VISIT`. OpenTau's pi05 runs pinned
deepspeed 0.18.5 (its ``uv.lock``) and found "per-parameter Python hooks" taking about 2.8 s of a 3.4 s ZeRO-2 backward
(TensorAuto/OpenTau#177), which DDP did not pay.

The release a run uses is the one installed where ``advise`` runs (read from the package's metadata; DeepSpeed is not
imported), or ``--deepspeed-version``. Torch-free; every number here is modeled.
"""

from __future__ import annotations

import importlib.metadata

from shardscope.contracts.models import ModelConfig
from shardscope.contracts.strategies import uses_deepspeed

#: DeepSpeed releases whose ZeRO gradient hooks recount the backward's parameters in every hook.
RECOUNTING_RELEASES = ("0.18.5", "0.18.6")
#: Host seconds per (hook, parameter) visit of the recount: (0.1265 - 0.0505) s / 147² (deepspeedai/DeepSpeed#7886).
SECONDS_PER_VISIT = (0.1265 - 0.0505) / 147**2


def installed_deepspeed_version() -> str | None:
    """The DeepSpeed release installed in this Python environment, from its package metadata; None without one."""
    try:
        return importlib.metadata.version("deepspeed")
    except importlib.metadata.PackageNotFoundError:
        return None


def recounts_in_every_hook(version: str | None) -> bool:
    """Whether DeepSpeed ``version`` (``0.18.5``, ``0.18.5+abc``...) recounts the backward's parameters in every hook."""
    return version is not None and version.split("+")[0] in RECOUNTING_RELEASES


def hook_recount_s(strategy: str, cfg: ModelConfig, version: str | None, trainable_fraction: float = 1.0) -> float:
    """Host seconds the recount adds to one micro-batch's backward of ``strategy`` on ``cfg`` under DeepSpeed ``version``:
    ``P² ×`` :data:`SECONDS_PER_VISIT` for its ``P`` parameter tensors (:meth:`ModelConfig.param_tensors`); 0 for a
    strategy DeepSpeed does not run, a release without the recount, or frozen weights (only the few adapters a
    LoRA-style run trains have hooks, so the recount is negligible)."""
    if not uses_deepspeed(strategy) or not recounts_in_every_hook(version) or trainable_fraction < 1:
        return 0.0
    return cfg.param_tensors() ** 2 * SECONDS_PER_VISIT


def recount_note(version: str | None, strategies: list[str], cfg: ModelConfig, trainable_fraction: float = 1.0) -> str | None:
    """The ``note:`` line advise prints where DeepSpeed ``version`` recounts in every hook and a DeepSpeed strategy is
    ranked; None otherwise."""
    extra = max((hook_recount_s(s, cfg, version, trainable_fraction) for s in strategies), default=0.0)
    if not extra:
        return None
    return (f"DeepSpeed {version} recounts the backward's parameters in every gradient hook (deepspeedai/DeepSpeed#7886, "
            f"fixed in 0.18.7): ZeRO's backward is modeled {extra:.3f} s longer per micro-batch for the model's "
            f"{cfg.param_tensors()} parameter tensors; DeepSpeed 0.18.7 or later removes it")
