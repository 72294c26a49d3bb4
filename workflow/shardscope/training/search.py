"""The largest micro-batch each strategy fits at one global batch, then each strategy's run at its own best.

Sharding frees memory; a strategy compared at the micro-batch of another never uses it. So per
memory-equal planned training job the search (plan.json's ``search`` entry, :func:`shardscope.plan.searches.search_section`)
runs the job at micro-batch 1, 2, 4, … until a trial does not fit (a real out-of-memory on a GPU:
outcome ``oom``; on CPU the job's memory budget against the tracked tensor peak: outcome
``over_budget``), then bisects between the largest that fitted and the smallest that did not.

Every strategy is compared at one global batch, so each trial runs micro-batch ``m`` *with* the
gradient accumulation it would train with (per-rank batch / ``m`` micro-batches per optimizer step):
accumulated gradients stay alive while the next micro-batch's activations are built, so a micro-batch
that fits without accumulation may not fit with it. The micro-batches tried are the divisors of the
per-rank batch (up to the search limit); doubling steps to the smallest divisor of at least twice the
last, bisection halves the list between the largest that fitted and the smallest that did not.

Every trial is an ordinary training run through the job's launcher (one repeat, no communication
profile: a trial only has to say whether it fits), its result kept as
``{trials}/{trial job id}-{spec digest}.json`` (non-fitting ones included): a trial whose file exists
is read back, not rerun, so a search that was stopped resumes where it was, and a trial whose spec
changed (another budget, global batch, model) is never read back. A trial that fails for any other
reason stops the search, which says so. The summary (kind ``search``) is collected into the
``search_trials`` table, every trial a row, OOMs included.

:func:`run_best` then trains the job -- and every other planned condition's job that the search serves
(plan.json ``best``: a fabric condition changes speed, not memory, :mod:`shardscope.plan.searches`) -- at
its best micro-batch (micro-batch 1 when none fits, so the row shows the outcome and its reason),
accumulating to the global batch, with the job's repeats: an ordinary training result, its placement marked with
:data:`shardscope.contracts.names.BEST_MICROBATCH_SUFFIX` so figure 4 and the report compare the
strategies at their own best micro-batches. Which micro-batches are tried is the planner's rule
(:func:`shardscope.plan.microbatch_search.search_largest`, the trial injected: the plan's estimate gives it a
rule, this runner a real run); this module only runs the trials.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shardscope.plan.microbatch_search import METHOD, search_largest

if TYPE_CHECKING:
    from shardscope.contracts.jobs import TrainingJob

SCHEMA = "shardscope.microbatch-search/1"


def search_entry(plan: dict[str, Any], job_id: str, where: str) -> dict[str, Any]:
    """The plan's ``search`` entry of job ``job_id``; a :class:`UserError` naming the plan when there is none."""
    from shardscope.errors import UserError

    for entry in plan.get("search") or []:
        if entry.get("job_id") == job_id:
            return entry
    raise UserError(f"{where}: job {job_id!r} has no micro-batch search planned; expected one of the ids under "
                    "`search` (config training.search)")


def trial_spec(job: TrainingJob, entry: dict[str, Any], micro_batch: int) -> TrainingJob:
    """The trial of ``job`` at ``micro_batch``: the accumulation to the entry's per-rank batch, one repeat, no profile."""
    accum = int(entry["per_rank_batch"]) // micro_batch
    return dataclasses.replace(job, job_id=f"{job.job_id}-mb{micro_batch}x{accum}", micro_batch=micro_batch,
                               grad_accum=accum, repeats=1, comm_profile=False, wall_s=_scaled_wall_s(job, entry),
                               activation_checkpointing=entry.get("activation_checkpointing", job.activation_checkpointing))


def _scaled_wall_s(job: TrainingJob, entry: dict[str, Any]) -> float:
    """The job's wall-clock limit scaled as its modeled step is, to the whole per-rank batch a search trial or best
    run accumulates (and a third more with activation checkpointing)."""
    from shardscope.plan.modeled_time import step_scale

    return round(job.wall_s * step_scale(dataclasses.asdict(job), entry), 1)


def spec_digest(job: TrainingJob) -> str:
    """A short digest of a job's whole spec: what names a trial's cached result."""
    from shardscope.contracts.jobs import job_to_dict

    return hashlib.sha256(json.dumps(job_to_dict(job), sort_keys=True).encode()).hexdigest()[:10]


def trial_path(trials: str | Path, spec: TrainingJob) -> Path:
    """Where the result of one trial is kept (the search's cache), named by its id and its spec's digest."""
    return Path(trials) / f"{spec.job_id}-{spec_digest(spec)}.json"


def _planned_job(plan_path: str, job_id: str) -> tuple[TrainingJob, dict[str, Any]]:
    from shardscope.contracts.jobs import TrainingJob
    from shardscope.errors import UserError
    from shardscope.plan.jobs import find_job, load_plan

    plan = load_plan(plan_path)
    job = find_job(plan, job_id, plan_path)
    if not isinstance(job, TrainingJob):
        raise UserError(f"{plan_path}: job {job_id!r} is not a training job; the micro-batch search needs one")
    return job, search_entry(plan, job_id, plan_path)


def _environment(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Where and when the summary was made, with the devices and versions the trials saw."""
    seen = next((d.get("env") for d in reversed(docs) if isinstance(d.get("env"), dict)), None) or {}
    return {"host": seen.get("host") or socket.gethostname(),
            "measured_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds"),
            **{k: seen[k] for k in ("torch", "backend", "device_type", "devices", "deepspeed", "comm_library") if k in seen},
            "git_rev": os.environ.get("SHARDSCOPE_GIT_REV"), "config_hash": os.environ.get("SHARDSCOPE_CONFIG_HASH")}


def _trial_row(doc: dict[str, Any], spec: TrainingJob, path: Path) -> dict[str, Any]:
    summary = doc.get("summary") or {}
    tracked = [r.get("tracked_peak_bytes") for r in doc.get("ranks") or []]
    return {"job_id": spec.job_id, "grad_accum": spec.grad_accum, "peak_memory_bytes": summary.get("peak_memory_bytes"),
            "tokens_per_s": summary.get("tokens_per_s"),
            "tracked_peak_bytes": max((t for t in tracked if t is not None), default=None),
            "error": doc.get("error"), "result": str(path)}


def run_search(plan_path: str, job_id: str, out: str, trials: str, log: str) -> dict[str, Any]:
    """Search the planned training job ``job_id``'s largest micro-batch; write the summary to ``out`` (atomically).

    Each trial is the job at another micro-batch with the accumulation to the planned global batch
    (:func:`trial_spec`), run by the job's launcher (:func:`shardscope.jobs.run.run_training`);
    existing trial files of the same spec are read back.
    """
    from shardscope.fileio import atomic_write_json, read_json
    from shardscope.jobs import run as jobs_run

    job, entry = _planned_job(plan_path, job_id)
    docs: dict[int, dict[str, Any]] = {}
    specs: dict[int, TrainingJob] = {}
    paths: dict[int, Path] = {}

    def trial(m: int) -> str:
        spec = specs[m] = trial_spec(job, entry, m)
        path = paths[m] = trial_path(trials, spec)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            jobs_run.run_training(spec, str(path), log, plan_path)
        docs[m] = read_json(path)
        return str(docs[m].get("outcome"))

    found = search_largest(trial, entry["micro_batches"], entry.get("start_micro_batch"))
    for row in found["trials"]:
        m = row["micro_batch"]
        row.update(_trial_row(docs[m], specs[m], paths[m]))
    best = found["best_micro_batch"]
    summary = {"schema": SCHEMA, "kind": "search",
               "job": {"job_id": job_id, "strategy": job.strategy, "model": job.model, "world_size": job.world_size,
                       "placement": job.placement, "transport": job.transport, "dtype": job.dtype, "seq_len": job.seq_len,
                       "memory_budget_bytes": job.memory_budget_bytes},
               "env": _environment(list(docs.values())),
               "limit": entry["limit"], "global_batch": entry["global_batch"], "per_rank_batch": entry["per_rank_batch"],
               "micro_batches": entry["micro_batches"], "activation_checkpointing": entry["activation_checkpointing"],
               "start_micro_batch": entry.get("start_micro_batch"), "method": METHOD, **found,
               "best_grad_accum": entry["per_rank_batch"] // best if best else None, "best_job_id": entry["best_job_id"]}
    atomic_write_json(out, summary)
    return summary


def best_spec(job: TrainingJob, entry: dict[str, Any], summary: dict[str, Any]) -> TrainingJob:
    """``job`` at the search's best micro-batch (the smallest tried when none fits: its row shows why), accumulating to
    the global batch, with the job's own repeats; its id and placement are the entry's best ones."""
    micro = summary.get("best_micro_batch") or entry["micro_batches"][0]
    return dataclasses.replace(job, job_id=entry["best_job_id"], placement=entry["best_placement"], micro_batch=micro,
                               grad_accum=int(entry["per_rank_batch"]) // micro, wall_s=_scaled_wall_s(job, entry),
                               activation_checkpointing=entry.get("activation_checkpointing", job.activation_checkpointing))


def best_entry(plan: dict[str, Any], job_id: str, where: str) -> dict[str, Any]:
    """The plan's ``best`` entry of job ``job_id`` (its run at the best micro-batch of the search that serves it);
    a :class:`UserError` naming the plan when there is none."""
    from shardscope.errors import UserError

    for entry in plan.get("best") or []:
        if entry.get("job_id") == job_id:
            return entry
    raise UserError(f"{where}: job {job_id!r} has no best-micro-batch run planned; expected one of the ids under "
                    "`best` (config training.search)")


def run_best(plan_path: str, job_id: str, search: str, out: str, log: str) -> int:
    """Train job ``job_id`` at the best micro-batch found by the search that serves it (plan.json ``best``: under
    another fabric condition, the memory-equal job's search); summary file ``search``; the result goes to ``out``."""
    from shardscope.contracts.jobs import TrainingJob
    from shardscope.errors import UserError
    from shardscope.fileio import read_json
    from shardscope.jobs import run as jobs_run
    from shardscope.plan.jobs import find_job, load_plan

    plan = load_plan(plan_path)
    job = find_job(plan, job_id, plan_path)
    if not isinstance(job, TrainingJob):
        raise UserError(f"{plan_path}: job {job_id!r} is not a training job; a best-micro-batch run needs one")
    entry = best_entry(plan, job_id, plan_path)
    searched = entry["search_job_id"]
    summary = read_json(search)
    if not isinstance(summary, dict) or summary.get("schema") != SCHEMA or (summary.get("job") or {}).get("job_id") != searched:
        raise UserError(f"{search}: not the micro-batch search of job {searched!r} (schema {SCHEMA}), which serves job "
                        f"{job_id!r}; rerun its search")
    return jobs_run.run_training(best_spec(job, entry, summary), out, log, plan_path)


def main(argv: list[str] | None = None) -> int:
    """``python -m shardscope.training.search {search,best} --plan P --id JOB --out F --log L ...``."""
    import argparse
    import sys

    from shardscope.errors import UserError

    p = argparse.ArgumentParser(prog="python -m shardscope.training.search", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name, what in (("search", "search the job's largest micro-batch; write the summary"),
                       ("best", "train the job at the best micro-batch its search found")):
        cmd = sub.add_parser(name, help=what)
        cmd.add_argument("--plan", required=True)
        cmd.add_argument("--id", required=True, help="the planned training job (one with a `search` entry in the plan; "
                                                     "for best, one with a `best` entry)")
        cmd.add_argument("--out", required=True, help="the search's summary (search) or the training result (best), JSON")
        cmd.add_argument("--log", required=True)
        if name == "search":
            cmd.add_argument("--trials", required=True, help="folder of the trials' results (the cache a stopped search resumes from)")
        else:
            cmd.add_argument("--search", required=True, help="the summary of the search that serves the job (its `best` "
                                                             "entry's search_job_id)")
    args = p.parse_args(argv)
    try:
        if args.command == "best":
            return run_best(args.plan, args.id, args.search, args.out, args.log)
        found = run_search(args.plan, args.id, args.out, args.trials, args.log)
    except (UserError, ValueError) as exc:
        print(f"shardscope: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"job_id": args.id, "best_micro_batch": found["best_micro_batch"],
                      "best_grad_accum": found["best_grad_accum"], "reason": found["reason"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
