"""The micro-batch searches of config ``training.search`` and, per fabric condition, each strategy's run at its best.

A fabric condition (transport, inside vs across an island or NUMA node, an emulated preset) changes how fast
the ranks talk, not what each rank holds: a job's memory depends on its strategy, model, world size, sequence
length, dtype, optimizer, checkpointing and budget, and those are the same under every condition of one world
size. So one search runs per *memory-equal* group of planned jobs (the spec without the fields of
:data:`CONDITION_FIELDS`), its trials under the first condition of the group in plan order (the default one
where it has a job of the group), and every job of the group, under every condition, then trains at that
search's best micro-batch: plan.json ``best`` lists these runs, each naming the search that serves it, and each
``training_conditions`` entry says under ``best_microbatch`` what its best runs use (global batch, sequence
length, which searches) or why it has none. On a GPU NCCL's own buffers can differ by transport by some MiB;
the search's margin is the trial that did not fit.
"""

from __future__ import annotations

import json
from dataclasses import astuple, replace
from typing import TYPE_CHECKING, Any

from shardscope.errors import UserError
from shardscope.plan.specs import positive_int
from shardscope.settings import Search

if TYPE_CHECKING:
    from shardscope.settings import PlannerSettings

#: The fields in which the jobs of one strategy under different fabric conditions differ (where the ranks sit and
#: how they talk: speed, not memory), and the micro-batch, which the search replaces.
CONDITION_FIELDS = ("job_id", "placement", "devices", "cuda_visible_devices", "env", "transport", "emulated",
                    "micro_batch")


def memory_key(job: dict[str, Any], global_batch: int) -> str:
    """What decides a job's memory at one global batch: its spec without :data:`CONDITION_FIELDS`, as sorted JSON."""
    kept = {k: v for k, v in job.items() if k not in CONDITION_FIELDS}
    return json.dumps({**kept, "global_batch": global_batch}, sort_keys=True)


#: What ``training.search: auto`` searches on a GPU node: every strategy of the communication-bound scale (the ``gpu``
#: section's model) at one global batch of ``limit`` sequences per rank. The memory-bound scale keeps its
#: configured micro-batch: its question is which strategy fits at all, and its trials would each cost minutes.
AUTO_SEARCH = Search(limit=64, strategies=None, global_batch=None, activation_checkpointing=None)


def _settings(config: PlannerSettings, on_gpu: bool = False
              ) -> tuple[int, int | None, set[str], str | None, str | None] | None:
    """Config ``training.search`` checked: limit, global batch, strategies, checkpointing and the one model searched
    (None: every model), or None when the key is null (``auto``: :data:`AUTO_SEARCH` on a GPU node, else null)."""
    section = config.training.search
    only_model = None
    if section == "auto":
        if not on_gpu:
            return None
        section, only_model = AUTO_SEARCH, config.gpu.model
    if not isinstance(section, Search):
        return None
    from shardscope.contracts.names import CHECKPOINTING_MODES

    limit = positive_int("training.search.limit", section.limit)
    given = section.global_batch
    if given is not None:
        positive_int("training.search.global_batch", given)
    mode = section.activation_checkpointing
    if mode is not None and mode not in CHECKPOINTING_MODES:
        raise UserError(f"config key training.search.activation_checkpointing: {mode!r} is not a known value; "
                        f"expected one of {', '.join(CHECKPOINTING_MODES)}")
    return limit, given, set(section.strategies or config.training.strategies), mode, only_model


def _label(condition: dict[str, Any]) -> str:
    preset = condition.get("emulated_preset")
    return f"{condition['condition']} (emulated {preset})" if preset else condition["condition"]


def _sizing(job: dict[str, Any], per_rank: int, global_batch: int, config: PlannerSettings) -> str:
    """One sentence: what a best run of ``job`` trains on, beside what its configured job ran."""
    replaced = any(value is not None for value in astuple(config.emulated.training))
    where = "emulated.training" if job.get("emulated") and replaced else (
        "the gpu section" if job.get("devices") else "the cpu section")
    text = (f"{global_batch} sequences of {job['seq_len']} tokens per optimizer step ({per_rank} per rank over "
            f"{job['world_size']} ranks), each strategy at its own micro-batch with the accumulation to it; "
            f"the configured jobs run micro-batch {job['micro_batch']} (seq_len and micro-batch from {where})")
    if job["micro_batch"] != per_rank:
        text += (f", so their step holds {job['micro_batch']} sequences per rank, the best runs' {per_rank}: "
                 "compare tokens/s, not step times")
    return text


def search_memory_bytes(topology: dict[str, Any]) -> int | None:
    """The GPU memory a search's modeled start is sized for: the smallest the probe saw, else the datasheet memory of
    the GPU the topology names (the cost model's spec, as advise assumes it), else None."""
    from shardscope.plan.scales import gpu_memory_bytes

    probed = gpu_memory_bytes(topology)
    if probed is not None or not topology.get("gpus"):
        return probed
    from shardscope.costmodel.hardware import infer_spec

    return infer_spec(topology).memory_bytes


def modeled_start(job: dict[str, Any], candidates: list[int], checkpointing: str,
                  memory_bytes: int | None) -> int | None:
    """The memory model's largest of ``candidates`` whose whole peak (:func:`shardscope.costmodel.answer.job_peak`,
    the one answer advise and ``memory`` give) fits ``memory_bytes``, where a GPU search starts (the smallest when
    none fits); None where the GPU's memory is not known (the search starts at the smallest)."""
    if memory_bytes is None:
        return None
    from shardscope.contracts.models import resolve_model
    from shardscope.costmodel.answer import job_peak, largest_fitting
    from shardscope.contracts.strategies import WORKER_ADAMW, WORKER_DDP_BUCKET_VIEW
    from shardscope.costmodel.step import DEFAULT_USABLE_FRACTION, StepAssumptions

    _, cfg = resolve_model(job.get("model_spec") or job["model"])
    usable = int(memory_bytes * DEFAULT_USABLE_FRACTION)
    step = StepAssumptions(seq_len=min(int(job["seq_len"]), cfg.max_seq_len), dtype=job["dtype"],
                           checkpointing=checkpointing, ddp_bucket_view=WORKER_DDP_BUCKET_VIEW, adamw=WORKER_ADAMW)

    def fits(mb: int) -> bool:
        return job_peak(job["strategy"], cfg, int(job["world_size"]), replace(step, micro_batch=mb),
                        job.get("shard_size")).fits(usable)

    return largest_fitting(fits, candidates) or candidates[0]


def search_section(config: PlannerSettings, training: list[dict[str, Any]], conditions: list[dict[str, Any]],
                   memory_bytes: int | None = None, on_gpu: bool = False
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The searches (plan.json ``search``) and the best-micro-batch runs (``best``) of config ``training.search``;
    both empty when the key is null. Also writes each planned condition's ``best_microbatch`` statement.

    Every strategy is compared at one global batch (``global_batch`` sequences per optimizer step over all
    ranks; default ``limit`` x world size, i.e. the largest micro-batch tried without accumulation), so each
    trial runs micro-batch m with the accumulation it would need to reach it: per-rank batch / m. The
    micro-batches tried are the divisors of the per-rank batch up to ``limit``. One search serves every job of
    its memory-equal group (:func:`memory_key`), whatever the condition. A bound that is not a positive integer,
    or a global batch that does not split evenly over a job's ranks, is a :class:`UserError` naming the key
    (before any job runs). On a GPU node (``on_gpu``) ``training.search: auto`` (the default) searches every strategy
    of the communication-bound scale (:data:`AUTO_SEARCH`), and each search starts at the memory model's largest
    micro-batch that fits ``memory_bytes`` (:func:`modeled_start`): two trials when the model is right."""
    settings = _settings(config, on_gpu)
    planned = [c for c in conditions if c.get("planned")]
    if settings is None:
        why = ("config training.search is auto, which searches on GPU nodes only: on CPU the jobs run at the "
               "configured micro-batch only" if config.training.search == "auto" else
               "config training.search is null: the jobs run at the configured micro-batch only")
        for condition in planned:
            condition["best_microbatch"] = {"planned": False, "reason": why}
        return [], []
    from shardscope.contracts.names import BEST_MICROBATCH_SUFFIX

    limit, given, wanted, mode, only_model = settings
    by_id = {j["job_id"]: j for j in training}
    searches: dict[str, dict[str, Any]] = {}
    best: list[dict[str, Any]] = []
    for condition in planned:
        mine, sizing = [], ""
        for job_id in condition["jobs"]:
            job = by_id[job_id]
            if job["strategy"] not in wanted or (only_model is not None and job["model"] != only_model):
                continue
            n = job["world_size"]
            global_batch = limit * n if given is None else given
            if global_batch % n:
                raise UserError(f"config key training.search.global_batch: {global_batch} sequences do not split evenly "
                                f"over the {n} ranks of job {job_id!r}; expected a multiple of {n}")
            per_rank = global_batch // n
            key = memory_key(job, global_batch)
            search = searches.get(key)
            if search is None:
                search = searches[key] = {
                    "job_id": job_id, "strategy": job["strategy"], "limit": limit, "global_batch": global_batch,
                    "per_rank_batch": per_rank,
                    "micro_batches": [m for m in range(1, min(limit, per_rank) + 1) if per_rank % m == 0],
                    "activation_checkpointing": mode or job.get("activation_checkpointing", "none"),
                    "start_micro_batch": None,
                    "best_job_id": f"{job_id}-best", "best_placement": f"{job['placement']}{BEST_MICROBATCH_SUFFIX}",
                    "trials_under": _label(condition), "serves": []}
            if on_gpu and search["start_micro_batch"] is None:
                search["start_micro_batch"] = modeled_start(job, search["micro_batches"],
                                                            search["activation_checkpointing"], memory_bytes)
            if any(b["job_id"] == job_id for b in best):
                continue  # a job two conditions share (an id planned already) trains at its best once
            search["serves"].append(job_id)
            entry = {"job_id": job_id, "strategy": job["strategy"], "condition": _label(condition),
                     "search_job_id": search["job_id"], "global_batch": global_batch, "per_rank_batch": per_rank,
                     "seq_len": job["seq_len"], "micro_batches": search["micro_batches"],
                     "activation_checkpointing": search["activation_checkpointing"],
                     "best_job_id": f"{job_id}-best", "best_placement": f"{job['placement']}{BEST_MICROBATCH_SUFFIX}"}
            best.append(entry)
            mine.append(entry)
            sizing = sizing or _sizing(job, per_rank, global_batch, config)
        condition["best_microbatch"] = _statement(condition, mine, sizing, searches, wanted)
    return list(searches.values()), best


def _statement(condition: dict[str, Any], mine: list[dict[str, Any]], sizing: str,
               searches: dict[str, dict[str, Any]], wanted: set[str]) -> dict[str, Any]:
    """What a condition's best-micro-batch runs use, or why it has none."""
    if not mine:
        return {"planned": False, "reason": f"none of its strategies ({', '.join(condition['strategies'])}) is in "
                                            "training.search.strategies"}
    trials_under = {s["job_id"]: s["trials_under"] for s in searches.values()}
    left = [s for s in condition["strategies"] if s not in wanted]
    return {"planned": True, "jobs": [e["best_job_id"] for e in mine], "global_batch": mine[0]["global_batch"],
            "seq_len": mine[0]["seq_len"], "sizing": sizing,
            "searches": {e["strategy"]: e["search_job_id"] for e in mine},
            "search_runs_under": sorted({trials_under[e["search_job_id"]] for e in mine}),
            "why_shared": "a fabric condition changes speed, not memory: the search of the memory-equal job "
                          "(same strategy, model, world size, sizing, global batch, checkpointing, budget) serves it",
            **({"not_searched": left} if left else {})}
