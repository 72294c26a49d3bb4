"""Run one planned job: build its launcher's command from its spec, and start it.

- collective: ``python -m shardscope.collectives`` under torchrun (``--standalone`` on one
  node; srun + one torchrun agent per node across nodes, :mod:`shardscope.cluster.launch`),
  inside the wall-clock guard (:mod:`shardscope.collectives.guard`);
- training: the training launcher (:func:`shardscope.training.launch.launch`), which turns a
  failed run into an outcome row;
- nccl-tests peer: ``all_reduce_perf`` inside the guard; its output (the log) is copied to ``out``.

Each job's environment (GPU numbering, transport knobs, visible GPUs) comes from the spec.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

from shardscope.contracts.jobs import CollectiveJob, JobSpec, PeerJob, TrainingJob
from shardscope.errors import UserError
from shardscope.fileio import atomic_write_bytes
from shardscope.plan.jobs import find_job, load_plan, planned_jobs


def env_words(env: dict[str, str]) -> list[str]:
    """``NAME=value`` words for ``env(1)``, sorted."""
    return [f"{name}={value}" for name, value in sorted(env.items())]


def collective_worker_args(job: CollectiveJob, out: str) -> list[str]:
    """The collective worker's flags for ``job`` (named after nccl-tests' where one exists)."""
    sweep = job.sweep
    args = ["--op", job.op, "--job-id", job.job_id, "--placement", job.placement, "--transport", job.transport,
            "--dtype", job.dtype, "-b", str(sweep.min_bytes), "-e", str(sweep.max_bytes), "-f", str(sweep.factor),
            "-w", str(sweep.warmup), "-n", str(sweep.iters)]
    if job.check:
        args.append("--check")
    return [*args, "--timeout-s", f"{job.timeout_s:g}", "--out", out]


def collective_command(job: CollectiveJob, out: str) -> list[str]:
    """``env VARS torchrun ... -m shardscope.collectives FLAGS``, across the Slurm job's nodes when ``nodes`` > 1."""
    from shardscope.cluster.launch import LaunchSpec, build_launch_command
    from shardscope.cluster.slurm import current_allocation

    spec = LaunchSpec(nproc_per_node=job.nproc_per_node, nodes=job.nodes)
    allocation = current_allocation() if job.nodes > 1 else None
    launch = build_launch_command(spec, "shardscope.collectives", collective_worker_args(job, out), allocation)
    return ["env", *env_words(job.launch_env()), *launch]


def run_collective(job: CollectiveJob, out: str, log: str) -> int:
    """The collective sweep under the guard; the guard's exit status (0, the worker's, or 124 past ``wall_s``).

    The ranks write into a folder private to this launch; the result reaches ``out`` only once the guard
    has seen every process of the job gone, so a rank that outlived a failed job can never write it.
    """
    import shlex

    from shardscope.collectives.guard import run_guarded
    from shardscope.process_tree import private_result, publish

    Path(out).unlink(missing_ok=True)
    with private_result(out) as staged:
        command = collective_command(job, str(staged))
        print(f"shardscope: job {job.job_id}: {shlex.join(command)}", file=sys.stderr, flush=True)  # in the job's log
        status = run_guarded(command, job.job_id, log, job.wall_s)
        if status == 0 and not publish(staged, out):
            raise UserError(f"job {job.job_id!r}: the collective worker ended well but wrote no result; see {log}")
    return status


def run_training(job: TrainingJob, out: str, log: str, where: str) -> int:
    """The training launcher for ``job`` (checked where it was built): always a result at ``out`` (a failed run is an
    outcome row). ``where`` names the plan in messages."""
    from shardscope.training.launch import cuda_available, launch

    os.environ.update(job.launch_env())  # before torch looks for GPUs, and inherited by every rank
    if job.emulated is not None:
        return run_emulated_training(job, out, log)
    return launch(job, out, log, cpu=not cuda_available())


def run_emulated_training(job: TrainingJob, out: str, log: str) -> int:
    """``job`` over its emulated fabric (one network namespace per rank; needs root), a failed run an outcome row."""
    import tempfile

    from shardscope.emulated.launch import EmulatedJob, run_training as run_over_fabric
    from shardscope.emulated.presets import preset_from_config
    from shardscope.training.launch import described, write_spec

    where = job.emulated or {}
    preset = preset_from_config(str(where["preset"]), where["definition"])
    fabric = EmulatedJob(preset, str(where["placement"]), prefix=str(where.get("prefix", "ssfab-")),
                         subnet=str(where.get("subnet", "10.213.0.0/24")), timeout_s=float(where.get("timeout_s", 600)))
    with tempfile.TemporaryDirectory(prefix="shardscope-spec-") as folder:
        spec = write_spec(job, Path(folder))
        run_over_fabric(fabric, ["--spec", str(spec)], described(job), out, log)
    return 0


def run_peer(job: PeerJob, out: str, log: str) -> int:
    """``all_reduce_perf`` with our sweep on the job's GPUs under the guard; its table (the log) copied to ``out``."""
    from shardscope.collectives.guard import run_guarded
    from shardscope.collectives.peer import peer_command

    command = peer_command(job.binary, job.world_size, dataclasses.asdict(job.sweep), job.dtype, job.check)
    status = run_guarded(["env", *env_words(job.launch_env()), *command], job.job_id, log, job.wall_s)
    if status == 0:
        atomic_write_bytes(out, Path(log).read_bytes())
    return status


def run_job(plan_path: str, job_id: str, out: str, log: str) -> int:
    """Run job ``job_id`` of the plan at ``plan_path``; its result goes to ``out``, its output to ``log``.

    A job that is not planned, or whose entry is invalid, is a :class:`UserError` naming the plan,
    the job and the field, before anything starts or is written.
    """
    plan = load_plan(plan_path)
    job: JobSpec = find_job(plan, job_id, plan_path)
    place = job_position(plan, job_id)
    print(f"shardscope: job {job_id}: {place}", file=sys.stderr, flush=True)
    start = time.monotonic()
    if isinstance(job, CollectiveJob):
        status = run_collective(job, out, log)
    elif isinstance(job, TrainingJob):
        status = run_training(job, out, log, plan_path)
    else:
        status = run_peer(job, out, log)
    with open(log, "a", encoding="utf-8") as handle:  # after the launcher: the collective guard starts a fresh log
        handle.write(f"shardscope: job {job_id} ({place}) ended with status {status} after {time.monotonic() - start:.0f} s\n")
    return status


def job_position(plan: dict, job_id: str) -> str:
    """``job 3 of 12 in the plan``: where ``job_id`` stands among every planned job (the plan's order)."""
    ids = [entry.get("job_id") for entry in planned_jobs(plan) if isinstance(entry, dict)]
    return f"job {ids.index(job_id) + 1} of {len(ids)} in the plan"
