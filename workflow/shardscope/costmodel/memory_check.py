"""Measured memory categories of a training run beside the modeled terms (torch-free).

The tensor tracker (:mod:`shardscope.training.memtrack`) stores, per rank, parameters,
gradients, optimizer state, activations (largest alive during the step) and the buffers alive
at the step's peak; :mod:`shardscope.costmodel.memory_peak` models the same terms for the run's
shape. The rank that decides what fits is the largest; each ratio is measured / modeled.
"""

from __future__ import annotations

from typing import Any

from shardscope.contracts.models import ModelConfig
from shardscope.contracts.names import GROUPED_STRATEGIES, MEMORY_MODELS  # noqa: F401  (MEMORY_MODELS: read here too)
from shardscope.contracts.strategies import WORKER_ADAMW, WORKER_DDP_BUCKET_VIEW
from shardscope.costmodel.answer import job_peak
from shardscope.costmodel.memory_peak import OptimizerAssumption, PeakTerms, StepShape, settings_of_run
from shardscope.costmodel.step import StepAssumptions

#: (measured key in a rank's record, modeled attribute of :class:`PeakTerms`)
CATEGORIES = (("param_bytes", "param_bytes"), ("grad_bytes", "grad_bytes"), ("optim_bytes", "optim_bytes"),
              ("activation_peak_bytes", "activation_peak"), ("buffer_bytes", "buffer_bytes"),
              ("tracked_peak_bytes", "peak_bytes"))


def modeled_for_job(doc: dict[str, Any], overhead_fraction: float = 0.0) -> PeakTerms:
    """The modeled peak of the job a result document describes (its strategy, shape, dtype, world size, settings)."""
    job = doc["job"]
    cfg = _job_model_config(job)
    if cfg is None:
        raise ValueError(f"the job's model {job.get('model')!r} has no recorded dimensions and is not a preset")
    shape = job_shape(job)
    device = "gpu" if on_gpu(doc) else "cpu"
    fair, overlap_comm = settings_of_run(doc.get("settings"))
    return job_peak(job["strategy"], cfg, int(job["world_size"]), question_of(shape), job_shard_group(job),
                    optimizer=job_optimizer(job).name, overhead_fraction=overhead_fraction, device=device, fair=fair,
                    overlap_comm=overlap_comm, basis="allocated")  # as tracked


def question_of(shape: StepShape) -> StepAssumptions:
    """A run's step shape as the question :func:`~shardscope.costmodel.answer.job_peak` answers (advise's, memory's),
    for a run of this project's worker (its DDP's gradients are views of its buckets)."""
    return StepAssumptions(micro_batch=shape.micro_batch, seq_len=shape.seq_len, dtype=shape.dtype,
                           checkpointing=shape.checkpointing, ddp_bucket_view=WORKER_DDP_BUCKET_VIEW,
                           adamw=WORKER_ADAMW)


def job_shape(job: dict[str, Any]) -> StepShape:
    """The step shape a job ran: micro-batch, sequence length, dtype and its activation checkpointing (none before it was recorded)."""
    return StepShape(micro_batch=int(job["micro_batch"]), seq_len=int(job["seq_len"]), dtype=job.get("dtype") or "float32",
                     checkpointing=job.get("activation_checkpointing") or "none")


def job_optimizer(job: dict[str, Any]) -> OptimizerAssumption:
    """The optimizer-state variant a job ran (``adamw`` before the worker recorded it)."""
    return OptimizerAssumption(name=job.get("optimizer") or "adamw")


def job_shard_group(job: dict[str, Any]) -> int | None:
    """HSDP's shard-group size (or ``zero3_hpz``'s partition size) as the job recorded it; None for every other strategy."""
    return int(job["shard_size"]) if job.get("strategy") in GROUPED_STRATEGIES and job.get("shard_size") else None


def _modeled_value(terms: PeakTerms, name: str) -> int:
    if name == "activation_peak":
        return int(terms.assumptions["activation_peak"])
    return int(getattr(terms, name))


def compare_job(doc: dict[str, Any], overhead_fraction: float = 0.0) -> dict[str, Any]:
    """Per category: measured (largest rank), modeled, and their ratio; plus both peaks' phases.

    Buffers are measured at the run's peak, so they are set against the modeled buffers of the
    phase the run peaked in; the whole peak is set against the modeled peak, whatever its phase.
    """
    terms = modeled_for_job(doc, overhead_fraction)
    ranks = doc["ranks"]
    peak_rank = max(ranks, key=lambda r: r.get("tracked_peak_bytes") or 0)
    out: dict[str, Any] = {"strategy": doc["job"]["strategy"], "seq_len": doc["job"]["seq_len"],
                           "model": doc["job"]["model"], "modeled_phase": terms.peak_phase,
                           "measured_phase": peak_rank.get("tracked_peak_phase"), "categories": {}}
    for measured_key, modeled_name in CATEGORIES:
        values = [r[measured_key] for r in ranks if r.get(measured_key) is not None]
        if measured_key == "buffer_bytes":
            values = [peak_rank[measured_key]] if peak_rank.get(measured_key) is not None else []
        if not values:
            continue
        measured, modeled = max(values), _modeled_value(terms, modeled_name)
        if measured_key == "buffer_bytes" and out["measured_phase"] in terms.phases:
            # buffers are compared in the phase the run peaked in (where they were counted); the
            # tracker's "backward" is the model's head ("backward") or blocks ("backward_blocks") part
            names = [n for n in terms.phases if n.split("_")[0] == out["measured_phase"]]
            parts = max((terms.phases[n] for n in names), key=lambda phase: sum(phase.values()))
            modeled = sum(v for k, v in parts.items() if k != "activations")
            if parts.get("reduce_bucket"):
                out["categories"]["buffers_beside_bucket_bytes"] = _beside_bucket(measured, modeled, parts["reduce_bucket"])
        out["categories"][measured_key] = {"measured": measured, "modeled": modeled,
                                           "ratio": measured / modeled if modeled else None}
    return out


def _beside_bucket(measured: int, modeled: int, bucket: int) -> dict[str, Any]:
    """ZeRO's buffers other than its whole reduce bucket: measured and modeled, each less the bucket the run allocated.

    Why: DeepSpeed's bucket (2 GB in fp32 by default) dwarfs everything else a small model's
    ZeRO run holds, so a 10% check of all buffers says nothing about the rest (gathered
    parameters, full gradients, the logits' gradient). The bucket's size is the run's own
    setting (``reduce_bucket_size``, :func:`shardscope.costmodel.memory_peak.zero_reduce_bucket`).
    """
    rest_measured, rest_modeled = measured - bucket, modeled - bucket
    return {"measured": rest_measured, "modeled": rest_modeled, "bucket": bucket,
            "ratio": rest_measured / rest_modeled if rest_modeled > 0 else None}


#: The columns of one stored row of modeled terms (``memory_peak_predictions``), in order.
TERM_COLUMNS = ("param_bytes", "grad_bytes", "optim_bytes", "activation_bytes", "buffer_bytes", "overhead_bytes",
                "peak_bytes")


def _job_model_config(job: dict[str, Any]) -> ModelConfig | None:
    """The job's model dimensions: as the worker recorded them, else a preset's; None when neither is known."""
    from shardscope.contracts.models import resolve_model

    if job.get("model_config"):
        try:
            return ModelConfig(**job["model_config"])
        except (TypeError, ValueError):
            return None
    try:
        return resolve_model(job["model"])[1]
    except (KeyError, TypeError, ValueError):
        return None


def on_gpu(doc: dict[str, Any]) -> bool:
    """Whether the run's devices were GPUs (the step temporaries differ between CPU and GPU AdamW).

    The recorded ``device_type`` (``cuda`` also on ROCm) where the run has one; else the device names.
    """
    env = doc.get("env") or {}
    if env.get("device_type"):
        return env["device_type"] == "cuda"
    return any("cuda" in str(d).lower() or "nvidia" in str(d).lower() for d in doc.get("env", {}).get("devices", []))


def memory_terms_rows(run_id: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every modeled term of the whole peak of one training run, once per model of the states (``MEMORY_MODELS``).

    Computed once when the run is stored (the ``memory_peak_predictions`` table), so figures and
    the report only query them. The ``ZeRO paper`` row puts the paper's bytes per parameter
    under the same activations and buffers as the ``implementation`` row (what this code's
    strategies hold). No rows when the run's model, shape, dtype or strategy is unknown, or
    when a model has no numbers for the strategy and dtype. Overhead 0: it is calibrated on
    measured runs (:func:`shardscope.costmodel.memory_peak.calibrate_overhead`), not stored as a guess.
    """
    from shardscope.costmodel.memory_model import predict_memory

    job = doc.get("job") or {}
    cfg = _job_model_config(job)
    try:
        strategy, gpus, dtype = job["strategy"], int(job["world_size"]), job.get("dtype") or "float32"
        shape = job_shape(dict(job, dtype=dtype))
        optimizer, shard_group = job_optimizer(job), job_shard_group(job)
    except (KeyError, TypeError, ValueError):
        return []
    if cfg is None or gpus < 1:
        return []
    fair, overlap_comm = settings_of_run(doc.get("settings"))
    device = "gpu" if on_gpu(doc) else "cpu"
    rows = []
    for name in MEMORY_MODELS:
        try:
            # the implementation's states come from model_states (the run's optimizer variant, HSDP's shard group)
            states = predict_memory(cfg.param_count(), strategy, gpus, dtype,
                                    hpz_partition=shard_group if strategy == "zero3_hpz" else None) if name == "ZeRO paper" else None
            terms = job_peak(strategy, cfg, gpus, question_of(shape), shard_group, held=states,
                             optimizer=optimizer.name, device=device, fair=fair, overlap_comm=overlap_comm,
                             basis="allocated")
        except ValueError:
            continue
        rows.append({"run_id": run_id, "memory_model": name, "strategy": strategy, "model": job.get("model"),
                     "gpus": gpus, "dtype": dtype, "micro_batch": shape.micro_batch, "seq_len": shape.seq_len,
                     "attention": shape.attention, "checkpointing": shape.checkpointing, "device": device,
                     **{c: int(getattr(terms, c)) for c in TERM_COLUMNS}, "peak_phase": terms.peak_phase,
                     "method": "modeled"})
    return rows
