"""A DeepSpeed config file read as the knobs the memory and step models use (``--deepspeed-config``).

A run that sets DeepSpeed's buckets (``reduce_bucket_size``, ``allgather_bucket_size``), ``overlap_comm`` or ZeRO-3's
parameter limits (``stage3_max_live_parameters``, ``stage3_max_reuse_distance``, ``stage3_prefetch_bucket_size``) and
step sub-groups (``sub_group_size``) holds and moves other bytes than DeepSpeed's defaults; ``advise`` and ``memory`` read them from the run's own
``ds_config.json`` (DeepSpeed's format: the keys under ``zero_optimization``, ``offload_optimizer.device``, or the
``cpu_offload`` flag that preceded it). A key
left out takes DeepSpeed's default (``deepspeed/runtime/zero/config.py``); ``"auto"`` takes what Hugging Face's
Trainer and Accelerate fill in from the model's width ``h`` (``reduce_bucket_size`` ``h²``,
``stage3_prefetch_bucket_size`` ``0.9·h²``), else DeepSpeed's default. Torch-free: the file is read, DeepSpeed is not
imported. Every problem is a ``ValueError`` of one sentence naming the file and the key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardscope.contracts.strategies import (
    DEEPSPEED_BUCKET_ELEMENTS,
    DEEPSPEED_PREFETCH_ELEMENTS,
    ZERO3_MAX_REUSE_ELEMENTS,
)

#: DeepSpeed's default ``stage3_max_live_parameters`` (deepspeed/runtime/zero/config.py: 1e9 elements): how many
#: gathered elements ZeRO-3's prefetch brings the live total to (and so what it holds); what
#: ``stage3_max_reuse_distance`` keeps gathered may pass it
#: (:func:`shardscope.costmodel.memory_peak.zero3_gathered_elements`).
DEEPSPEED_MAX_LIVE_ELEMENTS = 1_000_000_000
#: DeepSpeed's default ``sub_group_size`` (deepspeed/runtime/zero/config.py: 1e9 elements): ZeRO-3 steps its partition in
#: sub-groups of about this many elements, one after another (``stage3.py``: a sub-group closes once it reaches it).
ZERO3_SUB_GROUP_ELEMENTS = 1_000_000_000
#: The ``zero_optimization`` keys read, each with DeepSpeed's default and what ``"auto"`` becomes (a function of the
#: model's width; None: DeepSpeed's default), as Hugging Face's ``HfTrainerDeepSpeedConfig`` and Accelerate fill them.
_KEYS: dict[str, tuple[int, Any]] = {
    "reduce_bucket_size": (DEEPSPEED_BUCKET_ELEMENTS, lambda h: h * h),
    "allgather_bucket_size": (DEEPSPEED_BUCKET_ELEMENTS, None),
    "stage3_prefetch_bucket_size": (DEEPSPEED_PREFETCH_ELEMENTS, lambda h: int(0.9 * h * h)),
    "stage3_max_live_parameters": (DEEPSPEED_MAX_LIVE_ELEMENTS, None),
    "stage3_max_reuse_distance": (ZERO3_MAX_REUSE_ELEMENTS, None),
    "sub_group_size": (ZERO3_SUB_GROUP_ELEMENTS, None),
}


@dataclass(frozen=True)
class DeepSpeedKnobs:
    """What a run's DeepSpeed config sets that the models use (DeepSpeed's defaults where it is silent)."""

    reduce_bucket_elements: int = DEEPSPEED_BUCKET_ELEMENTS
    """``reduce_bucket_size``: the gradient bucket ZeRO-1/2/3 allocate and reduce."""
    allgather_bucket_elements: int = DEEPSPEED_BUCKET_ELEMENTS
    """``allgather_bucket_size``: ZeRO-1/2's after-step parameter all-gather, per call."""
    prefetch_bucket_elements: int = DEEPSPEED_PREFETCH_ELEMENTS
    """``stage3_prefetch_bucket_size``: ZeRO-3's look-ahead, counted within the live parameters."""
    max_live_parameters: int = DEEPSPEED_MAX_LIVE_ELEMENTS
    """``stage3_max_live_parameters``: the gathered elements up to which ZeRO-3 prefetches (what its reuse distance
    keeps may pass it)."""
    max_reuse_distance: int = ZERO3_MAX_REUSE_ELEMENTS
    """``stage3_max_reuse_distance``: a module used again within this many elements of the trace stays gathered."""
    sub_group_elements: int = ZERO3_SUB_GROUP_ELEMENTS
    """``sub_group_size``: the elements of its partition ZeRO-3 steps at once."""
    overlap_comm: bool | None = None
    """``overlap_comm``; None: DeepSpeed's default (on for ZeRO-3, off for 1-2)."""
    offload_optimizer: str | None = None
    """``offload_optimizer.device``: ``cpu``, ``none``; None where the config does not say."""
    stage: int | None = None
    """``zero_optimization.stage``, where given (which strategy the file was written for)."""
    source: str = ""
    """The file read."""


def read_deepspeed_config(path: str, d_model: int) -> DeepSpeedKnobs:
    """The :class:`DeepSpeedKnobs` of DeepSpeed config file ``path`` for a model of width ``d_model`` (``"auto"``)."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file; --deepspeed-config takes the path of the run's DeepSpeed config "
                         "(ds_config.json)") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable JSON DeepSpeed config ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: a DeepSpeed config is a JSON object, got {type(doc).__name__}")
    zero = doc.get("zero_optimization", {})
    if not isinstance(zero, dict):
        raise ValueError(f"{path}: zero_optimization must be an object, got {type(zero).__name__}")
    values = {key: _elements(path, key, zero.get(key, "default"), default, auto, d_model)
              for key, (default, auto) in _KEYS.items()}
    overlap = zero.get("overlap_comm")
    if overlap == "auto":
        overlap = None
    if overlap is not None and not isinstance(overlap, bool):
        raise ValueError(f"{path}: zero_optimization.overlap_comm must be true, false or \"auto\", got {overlap!r}")
    stage = zero.get("stage")
    if stage is not None and (isinstance(stage, bool) or stage not in (0, 1, 2, 3)):
        raise ValueError(f"{path}: zero_optimization.stage must be 0, 1, 2 or 3, got {stage!r}")
    offload = zero.get("offload_optimizer") or {}
    device = offload.get("device") if isinstance(offload, dict) else None
    legacy = zero.get("cpu_offload")  # DeepSpeed's key before offload_optimizer (0.3), still read as it
    if legacy is not None and not isinstance(legacy, bool):
        raise ValueError(f"{path}: zero_optimization.cpu_offload must be true or false, got {legacy!r}")
    if device is None and legacy is not None:
        device = "cpu" if legacy else "none"
    if device not in (None, "none", "cpu", "nvme"):
        raise ValueError(f"{path}: zero_optimization.offload_optimizer.device must be none, cpu or nvme, got {device!r}")
    if device == "nvme":
        raise ValueError(f"{path}: zero_optimization.offload_optimizer.device nvme is not modeled; cpu and none are")
    return DeepSpeedKnobs(reduce_bucket_elements=values["reduce_bucket_size"],
                          allgather_bucket_elements=values["allgather_bucket_size"],
                          prefetch_bucket_elements=values["stage3_prefetch_bucket_size"],
                          max_live_parameters=values["stage3_max_live_parameters"],
                          max_reuse_distance=values["stage3_max_reuse_distance"],
                          sub_group_elements=values["sub_group_size"], overlap_comm=overlap,
                          offload_optimizer=device, stage=stage, source=str(path))


def _elements(path: str, key: str, value: Any, default: int, auto: Any, d_model: int) -> int:
    """One element count of the config: as written (DeepSpeed takes floats such as ``5e8``), its default, or the
    ``"auto"`` value."""
    if value == "default":
        return default
    if value == "auto":
        return auto(d_model) if auto else default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 1 or value != int(value):
        raise ValueError(f"{path}: zero_optimization.{key} must be a positive whole number of elements or \"auto\", "
                         f"got {value!r}")
    return int(value)


def run_knobs(path: str | None, d_model: int, offload_flag: str) -> tuple[DeepSpeedKnobs | None, str]:
    """(the knobs of ``--deepspeed-config``, the optimizer offload): the config's ``offload_optimizer.device`` where
    ``--offload-optimizer`` is left at ``none``; a flag that says otherwise than the file is refused in one sentence."""
    if path is None:
        return None, offload_flag
    knobs = read_deepspeed_config(path, d_model)
    said = knobs.offload_optimizer
    if said is not None and offload_flag != "none" and said != offload_flag:
        raise ValueError(f"--offload-optimizer {offload_flag} and {path}'s zero_optimization.offload_optimizer.device "
                         f"{said} disagree; give one")
    return knobs, said if said is not None and offload_flag == "none" else offload_flag


def add_deepspeed_config_arg(p: Any) -> None:
    """``--deepspeed-config FILE``, shared by ``advise`` and ``memory``."""
    p.add_argument("--deepspeed-config", metavar="FILE",
                   help="the run's DeepSpeed config (ds_config.json): its reduce_bucket_size, allgather_bucket_size, "
                        "overlap_comm, stage3_max_live_parameters, stage3_max_reuse_distance and "
                        "offload_optimizer.device (or 2021's cpu_offload) replace DeepSpeed's defaults (\"auto\" as Hugging Face fills it: "
                        "reduce_bucket_size = width²)")
