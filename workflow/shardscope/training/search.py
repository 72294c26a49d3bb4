"""The largest micro-batch each strategy fits: doubling, then bisection, every trial a stored result.

Sharding frees memory; a strategy compared at the micro-batch of another never uses it. So per
planned training job the search runs the same job at micro-batch 1, 2, 4, … until a trial does
not fit (a real out-of-memory on a GPU: outcome ``oom``; on CPU the job's memory budget against
the measured peak: outcome ``over_budget``), then bisects between the largest that fitted and
the smallest that did not. The largest that fits is the strategy's best micro-batch.

Every trial is an ordinary training run through the job's launcher, its result kept as
``{trials}/{job_id}-mb{m}.json`` (non-fitting ones included): a trial whose file exists is read
back, not rerun, so a search that was stopped resumes where it was. A trial that fails for any
other reason stops the search, which says so. ``search_largest`` is the search itself, with the
trial injected (tests give it a rule; the command gives it a real run).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Trial outcomes that mean "does not fit" (the search goes lower); ``ok`` fits; anything else stops it.
NOT_FITTING = ("oom", "over_budget")


def search_largest(trial: Callable[[int], str], limit: int) -> dict[str, Any]:
    """Doubling from 1 (up to ``limit``), then bisection: the largest micro-batch whose trial is ``ok``.

    ``trial(m)`` runs (or reads back) micro-batch ``m`` and returns its outcome. Returns the
    outcomes in the order tried, ``best`` (None when even 1 does not fit, or a trial failed
    first) and ``reason`` (one sentence on how the search ended).
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"search limit must be a positive integer, got {limit!r}")
    tried: dict[int, str] = {}

    def run(m: int) -> str:
        if m not in tried:
            tried[m] = trial(m)
        return tried[m]

    fits, too_big, m = 0, None, 1
    while True:
        outcome = run(m)
        if outcome == "ok":
            fits = m
            if m >= limit:
                break
            m = min(2 * m, limit)
        elif outcome in NOT_FITTING:
            too_big = m
            break
        else:
            return _result(tried, fits or None, f"micro-batch {m} ended with outcome {outcome!r}; the search stopped there")
    while too_big is not None and too_big - fits > 1:
        mid = (fits + too_big) // 2
        outcome = run(mid)
        if outcome == "ok":
            fits = mid
        elif outcome in NOT_FITTING:
            too_big = mid
        else:
            return _result(tried, fits or None, f"micro-batch {mid} ended with outcome {outcome!r}; the search stopped there")
    if not fits:
        return _result(tried, None, f"even micro-batch 1 does not fit (outcome {tried[1]!r})")
    if too_big is None:
        return _result(tried, fits, f"micro-batch {fits} fits, the search limit")
    return _result(tried, fits, f"micro-batch {fits} fits and {too_big} does not ({tried[too_big]})")


def _result(tried: dict[int, str], best: int | None, reason: str) -> dict[str, Any]:
    return {"trials": [{"micro_batch": m, "outcome": o} for m, o in tried.items()], "best_micro_batch": best,
            "reason": reason}


def trial_path(trials: str | Path, job_id: str, micro_batch: int) -> Path:
    """Where the result of one trial is kept (the search's cache)."""
    return Path(trials) / f"{job_id}-mb{micro_batch}.json"


def run_search(plan_path: str, job_id: str, out: str, trials: str, log: str, limit: int) -> dict[str, Any]:
    """Search the planned training job ``job_id``'s largest micro-batch; write the summary to ``out`` (atomically).

    Each trial is the job with another ``micro_batch`` (and its own id), run by the job's launcher
    (:func:`shardscope.jobs.run.run_training`); existing trial files are read back.
    """
    from shardscope.contracts.jobs import TrainingJob
    from shardscope.errors import UserError
    from shardscope.fileio import atomic_write_json, read_json
    from shardscope.jobs.run import run_training
    from shardscope.plan.jobs import find_job, load_plan

    job = find_job(load_plan(plan_path), job_id, plan_path)
    if not isinstance(job, TrainingJob):
        raise UserError(f"{plan_path}: job {job_id!r} is not a training job; the micro-batch search needs one")
    docs: dict[int, dict[str, Any]] = {}

    def trial(m: int) -> str:
        path = trial_path(trials, job_id, m)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            spec = dataclasses.replace(job, job_id=f"{job_id}-mb{m}", micro_batch=m)
            run_training(spec, str(path), log, plan_path)
        docs[m] = read_json(path)
        return str(docs[m].get("outcome"))

    found = search_largest(trial, limit)
    for row in found["trials"]:
        summary = docs[row["micro_batch"]].get("summary") or {}
        tracked = [r.get("tracked_peak_bytes") for r in docs[row["micro_batch"]].get("ranks") or []]
        row.update(peak_memory_bytes=summary.get("peak_memory_bytes"), tokens_per_s=summary.get("tokens_per_s"),
                   tracked_peak_bytes=max((t for t in tracked if t is not None), default=None),
                   error=docs[row["micro_batch"]].get("error"), result=str(trial_path(trials, job_id, row["micro_batch"])))
    summary = {"schema": "shardscope.microbatch-search/1", "job_id": job_id, "strategy": job.strategy, "model": job.model,
               "world_size": job.world_size, "placement": job.placement, "memory_budget_bytes": job.memory_budget_bytes,
               "limit": limit, "method": "doubling from 1, then bisection; a trial fits when its outcome is ok",
               **found}
    atomic_write_json(out, summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    """``python -m shardscope.training.search --plan P --id JOB --out S --trials DIR --log L --limit N``."""
    import argparse
    import sys

    from shardscope.errors import UserError

    p = argparse.ArgumentParser(prog="python -m shardscope.training.search", description=__doc__)
    p.add_argument("--plan", required=True)
    p.add_argument("--id", required=True, help="the planned training job whose micro-batch is searched")
    p.add_argument("--out", required=True, help="the search's summary (JSON)")
    p.add_argument("--trials", required=True, help="folder of the trials' results (the cache a stopped search resumes from)")
    p.add_argument("--log", required=True)
    p.add_argument("--limit", type=int, required=True, help="largest micro-batch tried")
    args = p.parse_args(argv)
    try:
        found = run_search(args.plan, args.id, args.out, args.trials, args.log, args.limit)
    except (UserError, ValueError) as exc:
        print(f"shardscope: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: found[k] for k in ("job_id", "best_micro_batch", "reason")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
