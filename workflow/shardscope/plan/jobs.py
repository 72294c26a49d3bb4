"""Every job of a ``plan.json``, looked up by id, and the per-job spec files the rules depend on.

``plan.json`` changes whenever any job does; a job's rule must rerun only when its own spec
does. So the plan command also writes ``jobs/{id}.json`` beside the plan, one file per job,
rewritten only when its content changes (an unchanged job keeps its file's mtime), and each job
rule takes its own file as input. Files of jobs no longer planned are kept: a job planned again
with the same spec then need not rerun.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shardscope.contracts.jobs import JobSpec, SpecError, job_from_dict
from shardscope.errors import UserError
from shardscope.fileio import atomic_write_text, dump_json, read_json

#: The lists of ``plan.json`` that hold jobs, top level; ``multi_node`` holds two more.
JOB_LISTS = ("collectives", "training", "nccl_tests", "emulated")


def planned_jobs(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every job entry of ``plan``: single-node collectives and training, multi-node ones, peers, emulated."""
    for key in JOB_LISTS[:2]:
        yield from plan.get(key, [])
    for key in JOB_LISTS[:2]:
        yield from (plan.get("multi_node") or {}).get(key, [])
    for key in JOB_LISTS[2:]:
        yield from plan.get(key, [])


def write_job_files(plan: dict[str, Any], folder: str | Path) -> list[Path]:
    """Write ``folder/{job_id}.json`` for every job whose file is missing or differs; returns those written."""
    folder = Path(folder)
    written = []
    for job in planned_jobs(plan):
        path = folder / f"{job['job_id']}.json"
        text = dump_json(job)
        try:
            if path.read_text(encoding="utf-8") == text:
                continue
        except OSError:
            pass
        atomic_write_text(path, text)
        written.append(path)
    return written


def load_plan(path: str | Path) -> dict[str, Any]:
    """``plan.json`` read as a mapping; one :class:`UserError` naming the file otherwise."""
    plan = read_json(path)
    if not isinstance(plan, dict) or plan.get("schema") != "shardscope.plan/1":
        raise UserError(f"{path}: not a plan (schema shardscope.plan/1); expected a plan.json written by `shardscope plan`")
    return plan


def find_job(plan: dict[str, Any], job_id: str, where: str) -> JobSpec:
    """The typed spec of job ``job_id``; a :class:`UserError` naming the file, the job and the field when
    the job is not planned or its entry is invalid (e.g. a hand-edited plan)."""
    entries = [job for job in planned_jobs(plan) if isinstance(job, dict) and job.get("job_id") == job_id]
    if not entries:
        raise UserError(f"{where}: no job {job_id!r} is planned; expected one of the job ids of its job lists")
    try:
        return job_from_dict(entries[0])
    except SpecError as exc:
        raise UserError(f"{where}: job {job_id!r}: {exc}") from None
