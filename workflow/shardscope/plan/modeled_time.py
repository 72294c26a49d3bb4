"""The modeled wall-clock of a GPU plan: every planned job priced by the cost model, plus an assumed start per job.

No job time has been measured on a GPU node here (``benchmarks/pipeline_time.py`` measures CPU runs), so a
GPU plan's estimate comes from the cost model: :func:`shardscope.costmodel.documents.plan_predictions`
predicts the plan's collectives (per op, world size, transport and message size, on the best GPUs for the
world size) and strategies (per strategy, model and world size, at the planned micro-batch and sequence
length, on the best placement) from the topology, the rows the pipeline stores beside the measurements.
Each job is priced from those rows:

- a collective job (and an nccl-tests peer, an all-reduce sweep): per message size of its sweep,
  ``warmup + iters`` calls at the predicted time;
- a training job: ``warmup + steps x repeats`` steps at its strategy's predicted step time; one the model
  says does not fit (DDP of the memory-bound model on 80 GB) only its start, since it stops at its OOM;
- a micro-batch search (plan ``search``, at most its trials) and each best-micro-batch run (plan ``best``):
  ``warmup + steps`` (trials run one repeat) or ``warmup + steps x repeats`` steps of the job it serves, the
  step scaled to the whole per-rank batch it accumulates to (and by 4/3 with activation checkpointing: one
  more forward per step).

Every job also costs :data:`GPU_JOB_START_SECONDS`, an assumption, not a measurement. The placement and
transport of a training job do not change its price (the best placement's step over NVLink is used): on the saved
8-GPU topologies the difference is 1.3 s per job at most (DGX-1 over PCIe), against a start of half a minute.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from shardscope.errors import UserError

#: Seconds each GPU job is assumed to spend outside its modeled collectives or steps: the job runner and torchrun
#: starting one Python process per rank that imports torch (and DeepSpeed), a CUDA context per rank, NCCL's
#: communicator init, building the model (random weights; the Mistral-7B-shaped one is ~7 B parameters) and the
#: framework's wrapping (DDP buckets, FSDP2 sharding, the DeepSpeed engine), and writing the result. Not measured
#: (no GPU here): the same work on this project's 2-core CPU node takes 3 to 6 s per job (``CPU_JOB_SECONDS``,
#: gloo and a tiny model, most of it start); CUDA and NCCL init and the larger models add to that, so 30 s is taken,
#: rounded up. The estimate grows by this much per job; ``benchmarks/pipeline_time.py`` on a GPU node measures it.
GPU_JOB_START_SECONDS = 30.0


def _basis(fixed_seconds: float) -> str:
    return (f"modeled by the cost model, not measured: each job's sweep or steps at their predicted times + an assumed "
            f"{GPU_JOB_START_SECONDS:.0f} s start per job + the {fixed_seconds:.0f} s of the other stages measured on CPU")


def step_scale(job: Mapping[str, Any], entry: Mapping[str, Any]) -> float:
    """How much longer a step of ``entry`` (a search or best run of ``job``) is than the planned job's step."""
    scale = max(1.0, int(entry["per_rank_batch"]) / int(job.get("micro_batch") or 1))
    checkpointing = str(entry.get("activation_checkpointing") or "none")
    return scale * (4.0 / 3.0 if checkpointing not in ("none", "False", "false") else 1.0)


def modeled_seconds(plan: Mapping[str, Any], topology: Mapping[str, Any], searched: list[tuple[Mapping[str, Any], int]],
                    fixed_seconds: float) -> tuple[float | None, str]:
    """(seconds, basis) of a GPU ``plan`` on the machine of ``topology``; (None, why) when the model cannot price it.

    ``searched`` pairs each plan ``search`` entry with its most trials and each ``best`` entry with 1 (as
    :func:`shardscope.plan.summary.estimate` counts them); ``fixed_seconds`` is the stages besides the jobs.
    """
    from shardscope.costmodel.documents import plan_sizes

    priced = _predictions(plan, topology)
    if isinstance(priced, str):
        return None, priced
    doc = priced
    times = {(r["op"], int(r["world_size"]), r["transport"], int(r["size_bytes"])): float(r["time_s"])
             for r in doc["collectives"]}
    step_row = _step_rows(doc)

    def sweep_s(job: Mapping[str, Any], op: str, transport: str) -> float:
        sweep = job["sweep"]
        calls = int(sweep["warmup"]) + int(sweep["iters"])
        try:
            return sum(calls * times[(op, int(job["world_size"]), transport, size)] for size in plan_sizes(sweep))
        except KeyError:
            raise LookupError(f"no predicted {op} at world size {job['world_size']} over {transport} for job "
                              f"{job['job_id']!r}") from None

    try:
        total = fixed_seconds
        for job in plan.get("collectives") or []:
            total += GPU_JOB_START_SECONDS + sweep_s(job, str(job["op"]), str(job["transport"]))
        for job in plan.get("nccl_tests") or []:
            total += GPU_JOB_START_SECONDS + sweep_s(job, "all_reduce", "default")
        training = {job["job_id"]: job for job in plan.get("training") or []}
        for job in training.values():
            total += _training_seconds(job, step_row(job))
        for entry, runs in searched:
            job = training[entry["job_id"]]
            repeats = int(job["repeats"]) if "search_job_id" in entry else 1  # a best run repeats, a trial does not
            step = float(step_row(job)["step_time_s"]) * step_scale(job, entry)
            total += runs * (GPU_JOB_START_SECONDS + (int(job["warmup"]) + int(job["steps"]) * repeats) * step)
    except LookupError as exc:
        return None, f"the cost model cannot price every job: {for_plan(exc.args[0])}"
    return total, _basis(fixed_seconds)


#: The cost model's hint of flags `plan` does not have (``--gpu``, ``--peak-tflops``: advise's and predict's).
_ADVISE_FLAGS = re.compile(r";? *(?:name the GPU with --gpu|pass a known --gpu)\b.*$")


def for_plan(reason: str) -> str:
    """The cost model's ``reason`` with its hint of advise's flags replaced by what a plan's reader can do (issue 32:
    the plan's summary named a ``--gpu`` flag that ``plan`` does not have)."""
    if not _ADVISE_FLAGS.search(reason):
        return reason
    return (_ADVISE_FLAGS.sub("", reason) + "; the topology does not name a GPU model the cost model knows, so "
            "`shardscope advise --topology FILE --gpu NAME` prices the strategies by hand")


def _predictions(plan: Mapping[str, Any], topology: Mapping[str, Any]) -> Mapping[str, Any] | str:
    """The cost model's predictions for the jobs of ``plan``, or why it cannot price them (one sentence)."""
    from shardscope.costmodel.documents import plan_predictions

    if (plan.get("multi_node") or {}).get("collectives") or (plan.get("multi_node") or {}).get("training") \
            or plan.get("emulated"):
        return "the cost model prices single-node GPU jobs only, and this plan has multi-node or emulated jobs"
    try:
        return plan_predictions(topology, plan)
    except (UserError, ValueError) as exc:  # an estimate that cannot be made never stops the plan
        return f"the cost model cannot price this plan ({for_plan(str(exc))})"


def _step_rows(doc: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], Mapping[str, Any]]:
    """The predicted step of a planned training job (a LookupError naming it when the model has none)."""
    steps = {(r["strategy"], r["model"], int(r["gpus"])): r for r in doc["strategies"]}

    def step_row(job: Mapping[str, Any]) -> Mapping[str, Any]:
        row = steps.get((job["strategy"], job["model"], int(job["world_size"])))
        if row is None:
            why = (doc["plan"].get("strategies_note") or
                   f"no predicted step of {job['strategy']} for {job['model']} on {job['world_size']} GPUs")
            raise LookupError(why)
        return row

    return step_row


def _training_seconds(job: Mapping[str, Any], row: Mapping[str, Any]) -> float:
    """One training job: its start and ``warmup + steps x repeats`` predicted steps (only the start when it does
    not fit: it stops at its OOM)."""
    timed = int(job["warmup"]) + int(job["steps"]) * int(job["repeats"])
    return GPU_JOB_START_SECONDS + (0.0 if row["fits"] is False else timed * float(row["step_time_s"]))


def training_job_seconds(plan: Mapping[str, Any], topology: Mapping[str, Any]) -> dict[str, float] | str:
    """Modeled seconds of each training job of a GPU ``plan`` (:func:`modeled_seconds` prices them the same way),
    by job id; or why the cost model cannot price them (one sentence)."""
    priced = _predictions(plan, topology)
    if isinstance(priced, str):
        return priced
    step_row = _step_rows(priced)
    try:
        return {job["job_id"]: _training_seconds(job, step_row(job)) for job in plan.get("training") or []}
    except LookupError as exc:
        return f"the cost model cannot price every training job: {for_plan(exc.args[0])}"
