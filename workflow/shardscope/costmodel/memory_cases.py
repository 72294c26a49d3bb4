"""Modeled whole peaks of named cases, written by the predictions stage (torch-free).

Two kinds of case, each strategy and checkpointing mode a row of ``memory_case_predictions``:

``planned``
    every training job of the plan (its strategy, model, world size, micro-batch, sequence
    length and dtype), on the machine's GPU memory where the topology gives it: what the
    pipeline is about to run, modeled before it runs.
``seed_mistral``
    the seed article's case: Mistral-7B on 8 GPUs of 80 GB at seq 4096, micro-batch 1, bf16,
    every strategy without and with full activation checkpointing. The report's table reads it
    (and puts measured runs of the same case beside it where one exists).

Every number is :func:`shardscope.costmodel.answer.job_peak` (advise's and memory's) with the implementation's
model states and no overhead (calibrated, never guessed); ``fits`` compares the whole peak
with the GPU's memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardscope.contracts.names import STRATEGIES
from shardscope.costmodel.memory_check import TERM_COLUMNS
from shardscope.costmodel.answer import job_peak
from shardscope.costmodel.step import StepAssumptions

#: The seed article's question: each strategy without and with full checkpointing (the report's two columns).
SEED_CHECKPOINTING = ("none", "full")
#: The seed article's case (Mistral-7B, 8 x 80 GB, seq 4096).
SEED_CASE = {"model": "mistral-7b", "gpus": 8, "capacity_bytes": 80_000_000_000, "seq_len": 4096, "micro_batch": 1,
             "dtype": "bfloat16"}
#: The seed case's strategies: all but ``zero3_hpz``, whose partition needs islands the seed's node has not
#: (over all 8 GPUs its secondary partition would only repeat ZeRO-3's own).
SEED_STRATEGIES = tuple(s for s in STRATEGIES if s != "zero3_hpz")


def case_row(case: str, strategy: str, model: str | dict[str, Any], model_name: str, gpus: int, seq_len: int,
             micro_batch: int, dtype: str, checkpointing: str, capacity_bytes: int | None,
             device: str = "gpu", shard_group: int | None = None) -> dict[str, Any]:
    """One case's modeled terms, whole peak and whether it fits ``capacity_bytes`` (None: unknown memory), the
    overhead holding the allocator's reserve and the cache it keeps in the room the GPU leaves
    (:func:`~shardscope.costmodel.memory_peak.with_room`); ``shard_group``: an hsdp job's shard group or a zero3_hpz
    job's partition."""
    question = StepAssumptions(micro_batch=micro_batch, seq_len=seq_len, dtype=dtype, checkpointing=checkpointing)
    terms = job_peak(strategy, _config(model), gpus, question, shard_group, device=device,
                     capacity_bytes=capacity_bytes)
    row = {c: int(getattr(terms, c)) for c in TERM_COLUMNS}
    row["overhead_bytes"] += terms.cache_bytes  # the allocator's overhead as the run shows it: reserve and cache
    return {"memory_case": case, "strategy": strategy, "model": model_name, "gpus": gpus, "dtype": dtype, "micro_batch": micro_batch,
            "seq_len": seq_len, "checkpointing": checkpointing, "device": device, **row,
            "peak_phase": terms.peak_phase, "capacity_bytes": capacity_bytes,
            "fits": None if capacity_bytes is None else terms.fits(capacity_bytes), "method": "modeled"}


def _config(spec: str | dict[str, Any]) -> Any:
    from shardscope.contracts.models import resolve_model

    return resolve_model(spec)[1]


def seed_case_rows(strategies: tuple[str, ...] = SEED_STRATEGIES) -> list[dict[str, Any]]:
    """The seed article's Mistral-7B case, per strategy, without and with full checkpointing."""
    c = SEED_CASE
    return [case_row("seed_mistral", s, c["model"], c["model"], c["gpus"], c["seq_len"], c["micro_batch"], c["dtype"], mode,
                     c["capacity_bytes"]) for s in strategies for mode in SEED_CHECKPOINTING]


def planned_case_rows(plan: Mapping[str, Any], capacity_bytes: int | None) -> list[dict[str, Any]]:
    """Each distinct planned training job (strategy, model, world size) at the plan's sizing, no checkpointing.

    A job the model cannot size (an unknown model, a sequence beyond its maximum) is left out:
    the planner reports such jobs itself.
    """
    profile = plan.get("profile") or {}
    device = "cpu" if plan.get("device") == "cpu" else "gpu"
    rows, seen = [], set()
    for job in plan.get("training") or []:
        key = (str(job.get("strategy")), str(job.get("model")), int(job.get("world_size") or 0))
        if key in seen:
            continue
        seen.add(key)
        spec = profile.get("model") if profile.get("model") is not None else job.get("model")
        try:
            rows.append(case_row("planned", key[0], spec, key[1], key[2], int(profile["seq_len"]), int(profile["micro_batch"]),
                                 str(profile.get("dtype") or "bfloat16"), "none", capacity_bytes, device,
                                 job.get("shard_size")))
        except (KeyError, TypeError, ValueError):
            continue
    return rows


def memory_case_rows(plan: Mapping[str, Any], capacity_bytes: int | None) -> list[dict[str, Any]]:
    """The predictions document's ``memory`` rows: the planned jobs, then the seed's Mistral case."""
    return planned_case_rows(plan, capacity_bytes) + seed_case_rows()
