"""The parts of a job spec that come from the config: what every collective / training job shares.

:func:`job_entry` turns the fields of one planned job into its ``plan.json`` entry, checked as
its typed spec (:mod:`shardscope.contracts.jobs`) so that a plan never lists a job that cannot run.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from shardscope.contracts.jobs import CollectiveJob, PeerJob, SpecError, Sweep, TrainingJob, job_to_dict
from shardscope.errors import UserError

if TYPE_CHECKING:
    from shardscope.settings import PlannerSettings, Sizing


def collective_settings(config: PlannerSettings, profile: Sizing) -> dict[str, Any]:
    """What every collective job of this config shares: dtype, sweep, data check and limits."""
    section = config.collectives
    return {"dtype": section.dtype, "sweep": asdict(profile.sweep), "check": bool(section.check),
            "timeout_s": float(section.timeout_s), "wall_s": float(section.job_timeout_s)}


def positive_int(key: str, value: Any) -> int:
    """``value`` when it is a positive integer (not a bool); else a :class:`UserError` naming config key ``key``,
    so the plan stops before any job runs."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"config key {key}: {value!r} is not valid; expected a positive integer")
    return value


#: ``training.job_timeout_s: auto``: a training job may run this many times its modeled (GPU) or measured (CPU)
#: time before its launcher stops it; the margin covers a busy node and the model's error.
WALL_MARGIN = 3.0
#: ``auto``'s least limit: starting torch and DeepSpeed (and building DeepSpeed's CPU op once, 65 s on 2 cores) on
#: a node shared with other work, or building a 7B model with random weights on a GPU node (its start is an
#: assumption, ``GPU_JOB_START_SECONDS``, never measured here), must never be mistaken for a hang: a limit that
#: ends a healthy job loses its row, one that waits too long on a hung job only costs time.
MIN_WALL_S = 1200.0
#: ``auto``'s limit of a GPU job the cost model cannot price (multi-node, emulated, a model without predictions).
UNPRICED_WALL_S = 3600.0


def auto_wall_s(seconds: float) -> float:
    """``training.job_timeout_s: auto`` for a job expected to take ``seconds``: the margin over it, at least the
    floor."""
    return round(max(MIN_WALL_S, WALL_MARGIN * seconds), 1)


def training_limits(config: PlannerSettings, on_gpu: bool) -> dict[str, float]:
    """Every training job's collective timeout and wall-clock limit (``auto`` on GPU: refined per job by
    :func:`refine_wall_limits` once the plan can be priced)."""
    from shardscope.plan.summary import CPU_JOB_SECONDS

    section = config.training
    wall = section.job_timeout_s
    if wall == "auto":
        measured = max(seconds for kind, seconds in CPU_JOB_SECONDS.items() if kind.startswith("train"))
        wall = UNPRICED_WALL_S if on_gpu else auto_wall_s(measured)
    return {"timeout_s": float(section.timeout_s), "wall_s": float(wall)}


def refine_wall_limits(plan: dict[str, Any], topology: dict[str, Any], config: PlannerSettings) -> None:
    """Under ``training.job_timeout_s: auto``, each single-node training job of a GPU plan gets :func:`auto_wall_s` of
    its modeled time (:func:`shardscope.plan.modeled_time.training_job_seconds`); unpriced ones keep
    :data:`UNPRICED_WALL_S`."""
    from shardscope.plan.modeled_time import training_job_seconds

    if config.training.job_timeout_s != "auto" or plan.get("device") != "gpu":
        return
    seconds = training_job_seconds(plan, topology)
    if isinstance(seconds, str):
        return
    for job in plan.get("training") or []:
        job["wall_s"] = auto_wall_s(seconds[job["job_id"]])


def training_settings(config: PlannerSettings, profile: Sizing, on_gpu: bool = False) -> dict[str, Any]:
    """What every training job of this config shares: the model, its sizing, repeats, reduction dtype, buckets, the
    memory budget and the time limits."""
    gib = config.training.memory_budget_gib
    repeats = positive_int(f"{'gpu' if on_gpu else 'cpu'}.repeats", profile.repeats)
    return {"model_spec": profile.model, "dtype": profile.dtype, "micro_batch": int(profile.micro_batch),
            "seq_len": int(profile.seq_len), "warmup": int(profile.warmup), "steps": int(profile.steps),
            "memory_budget_bytes": int(gib * 2**30) if gib else None, "seed": 0, "comm_profile": True,
            "repeats": repeats, "reduce_dtype": config.training.reduce_dtype, "buckets": config.training.buckets,
            **training_limits(config, on_gpu), **memory_knobs(config)}


def memory_knobs(config: PlannerSettings) -> dict[str, str]:
    """Config ``training.activation_checkpointing`` and ``training.optimizer`` as job fields (left out at their
    defaults, so earlier job specs are unchanged); an unknown value is a :class:`UserError` naming the key."""
    from shardscope.contracts.names import CHECKPOINTING_MODES, WORKER_OPTIMIZERS

    section = config.training
    knobs = {"activation_checkpointing": (section.activation_checkpointing, CHECKPOINTING_MODES),
             "optimizer": (section.optimizer, WORKER_OPTIMIZERS)}
    for key, (value, allowed) in knobs.items():
        if value not in allowed:
            raise UserError(f"config key training.{key}: {value!r} is not a known value; expected one of {', '.join(allowed)}")
    return {key: value for key, (value, allowed) in knobs.items() if value != allowed[0]}


def job_entry(cls: type[CollectiveJob] | type[TrainingJob] | type[PeerJob], fields: dict[str, Any]) -> dict[str, Any]:
    """The plan entry of one job: ``fields`` checked as a spec of ``cls``, in its JSON form.

    A config value no job can run with (the schema lets through, e.g. min_bytes above max_bytes)
    is a :class:`UserError` naming the job and the field."""
    try:
        spec = cls(**{**fields, "sweep": Sweep(**fields["sweep"])} if "sweep" in fields else fields)
    except SpecError as exc:
        if exc.field_name == "optimizer":  # the config key that chose it, not the job's field
            raise UserError(f"config key training.optimizer: planned job {fields.get('job_id')!r}: {exc.problem}") from None
        raise UserError(f"config: planned job {fields.get('job_id')!r}: {exc}") from None
    return job_to_dict(spec)
