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


def training_settings(config: dict[str, Any], profile: dict[str, Any]) -> dict[str, Any]:
    """What every training job of this config shares: the model, its sizing and the memory budget."""
    gib = config["training"].get("memory_budget_gib")
    return {"model_spec": profile["model"], "dtype": profile["dtype"], "micro_batch": int(profile["micro_batch"]),
            "seq_len": int(profile["seq_len"]), "warmup": int(profile["warmup"]), "steps": int(profile["steps"]),
            "memory_budget_bytes": int(gib * 2**30) if gib else None, "seed": 0, "comm_profile": True}


def job_entry(cls: type[CollectiveJob] | type[TrainingJob] | type[PeerJob], fields: dict[str, Any]) -> dict[str, Any]:
    """The plan entry of one job: ``fields`` checked as a spec of ``cls``, in its JSON form.

    A config value no job can run with (the schema lets through, e.g. min_bytes above max_bytes)
    is a :class:`UserError` naming the job and the field."""
    try:
        spec = cls(**{**fields, "sweep": Sweep(**fields["sweep"])} if "sweep" in fields else fields)
    except SpecError as exc:
        raise UserError(f"config: planned job {fields.get('job_id')!r}: {exc}") from None
    return job_to_dict(spec)
