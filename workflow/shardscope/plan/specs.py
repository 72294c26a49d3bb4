"""The parts of a job spec that come from the config: what every collective / training job shares.

:func:`job_entry` turns the fields of one planned job into its ``plan.json`` entry, checked as
its typed spec (:mod:`shardscope.contracts.jobs`) so that a plan never lists a job that cannot run.
"""

from __future__ import annotations

from typing import Any

from shardscope.contracts.jobs import CollectiveJob, PeerJob, SpecError, Sweep, TrainingJob, job_to_dict
from shardscope.errors import UserError


def collective_settings(config: dict[str, Any], profile: dict[str, Any]) -> dict[str, Any]:
    """What every collective job of this config shares: dtype, sweep, data check and limits."""
    section = config["collectives"]
    return {"dtype": section["dtype"], "sweep": dict(profile["sweep"]), "check": bool(section.get("check", True)),
            "timeout_s": float(section.get("timeout_s", 300)), "wall_s": float(section.get("job_timeout_s", 1800))}


def positive_int(key: str, value: Any) -> int:
    """``value`` when it is a positive integer (not a bool); else a :class:`UserError` naming config key ``key``,
    so the plan stops before any job runs."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"config key {key}: {value!r} is not valid; expected a positive integer")
    return value


def training_settings(config: dict[str, Any], profile: dict[str, Any]) -> dict[str, Any]:
    """What every training job of this config shares: the model, its sizing, repeats, reduction dtype, buckets and the memory budget."""
    gib = config["training"].get("memory_budget_gib")
    where = "cpu" if profile is config.get("cpu") else "gpu"
    repeats = positive_int(f"{where}.repeats", profile.get("repeats", 1))
    return {"model_spec": profile["model"], "dtype": profile["dtype"], "micro_batch": int(profile["micro_batch"]),
            "seq_len": int(profile["seq_len"]), "warmup": int(profile["warmup"]), "steps": int(profile["steps"]),
            "memory_budget_bytes": int(gib * 2**30) if gib else None, "seed": 0, "comm_profile": True,
            "repeats": repeats, "reduce_dtype": config["training"].get("reduce_dtype", "auto"),
            "buckets": config["training"].get("buckets", "default"), **memory_knobs(config)}


def memory_knobs(config: dict[str, Any]) -> dict[str, str]:
    """Config ``training.activation_checkpointing`` and ``training.optimizer`` as job fields (left out at their
    defaults, so earlier job specs are unchanged); an unknown value is a :class:`UserError` naming the key."""
    from shardscope.contracts.names import CHECKPOINTING_MODES, WORKER_OPTIMIZERS

    section = config["training"]
    knobs = {"activation_checkpointing": (section.get("activation_checkpointing") or "none", CHECKPOINTING_MODES),
             "optimizer": (section.get("optimizer") or "adamw", WORKER_OPTIMIZERS)}
    for key, (value, allowed) in knobs.items():
        if value not in allowed:
            raise UserError(f"config key training.{key}: {value!r} is not a known value; expected one of {', '.join(allowed)}")
    return {key: value for key, (value, allowed) in knobs.items() if value != allowed[0]}


def check_optimizer_fits(job: dict[str, Any]) -> None:
    """Stop the plan when config ``training.optimizer`` cannot run under this job's strategy and dtype (one sentence)."""
    from shardscope.contracts.optimizers import check_optimizer

    try:
        check_optimizer(job.get("optimizer", "adamw"), job["strategy"], job["dtype"])
    except ValueError as exc:
        raise UserError(f"config key training.optimizer: planned job {job['job_id']!r}: "
                        f"{str(exc).replace('--optimizer ', '').replace('--dtype ', 'dtype ')}") from None


def job_entry(cls: type[CollectiveJob] | type[TrainingJob] | type[PeerJob], fields: dict[str, Any]) -> dict[str, Any]:
    """The plan entry of one job: ``fields`` checked as a spec of ``cls``, in its JSON form.

    A config value no job can run with (the schema lets through, e.g. min_bytes above max_bytes)
    is a :class:`UserError` naming the job and the field."""
    try:
        spec = cls(**{**fields, "sweep": Sweep(**fields["sweep"])} if "sweep" in fields else fields)
    except SpecError as exc:
        raise UserError(f"config: planned job {fields.get('job_id')!r}: {exc}") from None
    if cls is TrainingJob:
        check_optimizer_fits(fields)
    return job_to_dict(spec)
