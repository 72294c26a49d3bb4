"""``shardscope train``: launch one training job under torchrun and make its outcome data.

On one node the ranks start under ``torchrun --standalone``; with ``nodes`` above 1 (inside a
Slurm allocation) ``srun`` starts one torchrun agent per node that meet through a c10d
rendezvous (:func:`shardscope.cluster.launch.build_launch_command`).

A job that fails (out of memory, a strategy that breaks) must not stop the pipeline: the
launcher reads the error files the ranks left, writes a result with outcome ``oom`` or
``failed`` and the error text, and returns 0. Only a launcher that cannot write any result
returns non-zero.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from shardscope.buildenv import environment_first_on_path, extensions_dir
from shardscope.fileio import atomic_write_json, read_json
from shardscope.process_tree import OwnedRun, private_result, publish, run_owned
from shardscope.training.outcome_files import SCHEMA

if TYPE_CHECKING:
    from shardscope.cluster.slurm import Allocation
    from shardscope.contracts.jobs import TrainingJob


#: DeepSpeed's CPU shared-memory comm op: the one C++ extension a CPU ZeRO job builds.
SHM_OP = "deepspeed_shm_comm"


def ops_env(cpu: bool) -> dict[str, str]:
    """The environment of a training job: this environment's extension cache and build tools (and DeepSpeed's CPU accelerator on CPU).

    This environment's ``bin`` folder comes first on ``PATH`` so that torch's JIT build always runs
    the same ``ninja`` (the ``ninja`` package DeepSpeed installs): ninja versions record build commands
    differently (seen here: pip's 1.13 against Debian's 1.11), and a job started with another
    ``PATH`` then finds every command "changed" and rebuilds the op from scratch (65 s on 2 cores).
    """
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(extensions_dir()))
    env["PATH"] = environment_first_on_path(env.get("PATH", ""))
    if cpu:
        env.setdefault("DS_ACCELERATOR", "cpu")
    else:  # a rank whose NCCL collective timed out aborts its communicator instead of hanging in it
        env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    return env


def shm_op_built(folder: Path | None = None) -> bool:
    """True when the shared-memory comm op is already built in ``folder`` (this environment's cache by default)."""
    folder = folder or extensions_dir()
    return (folder / SHM_OP / f"{SHM_OP}.so").is_file()


#: A build lock older than this is left by a killed build (the build itself takes well under a minute).
STALE_LOCK_S = 600.0


def clear_stale_build_lock(build_dir: Path, log: Any, max_age_s: float = STALE_LOCK_S) -> bool:
    """Remove torch's build lock in ``build_dir`` when it is older than ``max_age_s``; say so in the log.

    torch's file baton is only a file: a build killed mid-way leaves it behind, and every later
    build in this environment then waits on it forever. Builds run one at a time here (the prebuild,
    before the ranks start), so a lock that old belongs to no live build.
    """
    lock = build_dir / "lock"
    try:
        age_s = time.time() - lock.stat().st_mtime
    except OSError:
        return False
    if age_s < max_age_s:
        return False
    lock.unlink(missing_ok=True)
    log.write(f"shardscope: removed a stale build lock {lock} ({age_s:.0f} s old, left by a killed build)\n")
    return True


def prebuild_deepspeed_cpu_ops(log: Any, env: dict[str, str] | None = None) -> bool:
    """Build DeepSpeed's shared-memory comm op once per environment, before the ranks start.

    Skipped (no DeepSpeed import, seconds saved per job) when the op is already in this
    environment's cache; otherwise one process builds it, so ranks only load it and never race
    to JIT-build it. Returns whether a build ran.
    """
    env = dict(env or ops_env(cpu=True), DS_ACCELERATOR="cpu")
    if shm_op_built(Path(env["TORCH_EXTENSIONS_DIR"])):
        return False
    clear_stale_build_lock(Path(env["TORCH_EXTENSIONS_DIR"]) / SHM_OP, log)
    code = "from deepspeed.comm.torch import build_shm_op; build_shm_op()"
    subprocess.run([sys.executable, "-c", code], env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    return True


def failure_document(job: dict[str, Any], out: str, nproc: int, returncode: int, log_path: str,
                     run: OwnedRun | None = None, wall_s: float | None = None, log_text: str = "") -> dict[str, Any]:
    """The result of a job whose ranks failed: outcome ``oom`` if any rank ran out of memory.

    The error is that of the first rank that ran out of memory (the other ranks' errors are
    mostly their peers vanishing), named by rank, with the memory snapshot it saved, if any.
    Otherwise it names the cause first: the wall-clock limit, a rank seen stopped (``run``), a rank
    that died without a report of its own (torchrun's summary in ``log_text``), then what a
    surviving rank reported.
    """
    reports = [read_json(p) for p in sorted(glob.glob(f"{glob.escape(out)}.rank*.error.json"))]
    oom_reports = [r for r in reports if r.get("oom")]
    if oom_reports:
        report = oom_reports[0]
        snapshot = report.get("memory_snapshot")
        first = (f"rank {report.get('rank')}: {report['error']}"
                 + (f" (memory snapshot: {snapshot})" if snapshot else " (no memory snapshot: not a CUDA run)"))
    else:
        first = "; ".join(failure_causes(reports, returncode, log_path, run, wall_s, log_text))
    return {
        "schema": SCHEMA,
        "kind": "training",
        "job": dict(job, world_size=nproc),
        "env": {},
        "outcome": "oom" if oom_reports else "failed",
        "error": first[:2000],
        "summary": {},
        "steps": [],
        "ranks": [],
    }


#: One failed rank in torchrun's closing summary: its rank and exit code (negative: the signal that ended it).
_TORCHRUN_FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


def failure_causes(reports: list[dict[str, Any]], returncode: int, log_path: str, run: OwnedRun | None,
                   wall_s: float | None, log_text: str) -> list[str]:
    """Why the job failed, cause first: the limit, the ranks that stopped or died, then the survivors' errors."""
    causes = []
    if run is not None and run.timed_out:
        causes.append(f"the job ran past its wall-clock limit of {wall_s:g} s and was stopped")
    reported = {r.get("rank") for r in reports}
    stopped = sorted(run.stopped_ranks) if run is not None else []
    causes += [f"rank {rank} was stopped (SIGSTOP or a tracer) and never answered its peers" for rank in stopped]
    for rank, code in sorted({int(r): int(c) for r, c in _TORCHRUN_FAILURE.findall(log_text)}.items()):
        if code < 0 and rank not in reported and rank not in stopped:
            causes.append(f"rank {rank} died ({_signal_name(-code)}) without an error of its own")
    causes += [(f"rank {r['rank']}: " if r.get("rank") is not None else "") + r["error"] for r in reports[:1]]
    if not causes:
        causes.append(f"torchrun exited with status {returncode}; see {log_path}")
    return causes


def _signal_name(number: int) -> str:
    try:
        return f"signal {number}, {signal.Signals(number).name}"
    except ValueError:
        return f"signal {number}"


def described(job: TrainingJob) -> dict[str, Any]:
    """What a failure result says about ``job`` (the worker's own result says all of it)."""
    return {"job_id": job.job_id, "strategy": job.strategy, "model": job.model, "placement": job.placement,
            "transport": job.transport}


def write_spec(job: TrainingJob, folder: Path, log: IO[str] | None = None) -> Path:
    """``job``'s spec, whole, as the JSON file the worker reads (:func:`shardscope.contracts.jobs.job_from_dict`);
    the same JSON on one line of ``log``, so the log says what ran after the file is gone."""
    from shardscope.contracts.jobs import job_to_dict

    path = folder / "spec.json"
    atomic_write_json(path, job_to_dict(job))
    if log is not None:
        log.write(f"# spec: {json.dumps(job_to_dict(job), sort_keys=True)}\n")
    return path


def torch_built_for_gpus() -> bool:
    """Whether the installed torch was built for CUDA or ROCm, read from its ``version.py`` without importing torch.

    A CPU-only build can never see a GPU, so the launcher need not pay a torch import (about two
    seconds per job on a small CPU node) to learn that. True when the file cannot be read (then
    torch itself is asked).
    """
    import importlib.util

    spec = importlib.util.find_spec("torch")
    folders = list(spec.submodule_search_locations or []) if spec else []
    if not folders:
        return True
    version_spec = importlib.util.spec_from_file_location("_shardscope_torch_version", Path(folders[0]) / "version.py")
    if version_spec is None or version_spec.loader is None:
        return True
    module = importlib.util.module_from_spec(version_spec)
    try:
        version_spec.loader.exec_module(module)
    except (OSError, SyntaxError, ImportError):
        return True
    return getattr(module, "cuda", None) is not None or getattr(module, "hip", None) is not None


def cuda_available() -> bool:
    """Whether this process sees a CUDA device (the job then trains on GPUs); torch is imported only for a GPU build."""
    if not torch_built_for_gpus():
        return False
    import torch

    return torch.cuda.is_available()


def launch_command(nproc: int, nodes: int, worker_args: list[str], allocation: Allocation | None = None,
                   address: Callable[[str], str] | None = None) -> list[str]:
    """torchrun of the training worker: standalone on this node, or srun + torchrun on ``nodes`` nodes of a Slurm job.

    ``allocation`` defaults to the job this process runs in and ``address`` to the first node's
    ``NodeAddr`` (both from ``scontrol``). Raises :class:`~shardscope.errors.UserError` for
    ``nodes`` above 1 outside a Slurm allocation.
    """
    from shardscope.cluster.launch import LaunchSpec, build_launch_command
    from shardscope.cluster.slurm import current_allocation, node_address

    spec = LaunchSpec(nproc_per_node=nproc, nodes=nodes)
    if nodes > 1 and allocation is None:
        allocation = current_allocation()
    return build_launch_command(spec, "shardscope.training", worker_args, allocation, address or node_address)


#: torchrun's template of the prefix of each line a rank prints (``${rank}``: the global rank).
RANK_PREFIX_ENV = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank ${rank}] "}


def with_rank_prefixes(cmd: list[str], log_dir: str) -> list[str]:
    """``cmd`` with torchrun told to tee every rank's stdout and stderr (``--tee 3``) through ``log_dir``.

    torchrun then forwards each line a rank prints with the prefix of :data:`RANK_PREFIX_ENV`
    (``[rank 3] ...``), C++ and NCCL output included, so the job's log says which rank said what;
    the per-rank files it keeps in ``log_dir`` are removed after the run.
    """
    at = cmd.index("torch.distributed.run") + 1
    return [*cmd[:at], "--tee", "3", "--log-dir", log_dir, *cmd[at:]]


def launch(job: TrainingJob, out: str, log_path: str, cpu: bool) -> int:
    """Run ``job`` on its ranks; always leave a result at ``out`` unless unwritable.

    The worker reads the spec whole from a file (``--spec``), so it trains exactly the checked job. The
    command is built before anything is written, so a launch that cannot start (``nodes`` above 1 outside
    Slurm) is a :class:`~shardscope.errors.UserError` that leaves no files. The ranks write into a folder
    private to this launch; the result is published (or the failure written) only after every process the
    launch started is gone (:func:`run_owned`), past ``job.wall_s`` ended by force, so it is written once and
    never replaced. ``cpu`` forces gloo on CPU processes even where GPUs exist.
    """
    flags = ["--cpu"] if cpu else []
    launch_command(job.nproc_per_node, job.nodes, flags)  # a launch that cannot start stops here, before any file
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    for stale in [out, *glob.glob(f"{glob.escape(out)}.rank*.error.json")]:  # error files beside it: older runs'
        Path(stale).unlink(missing_ok=True)
    env = ops_env(cpu)
    with private_result(out) as staged, open(log_path, "a", encoding="utf-8") as log:
        spec = write_spec(job, staged.parent, log)
        cmd = launch_command(job.nproc_per_node, job.nodes, ["--spec", str(spec), *flags, "--out", str(staged)])
        if cpu and job.strategy.startswith("zero"):
            prebuild_deepspeed_cpu_ops(log, env)
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        log_start = os.path.getsize(log_path)
        rank_logs = tempfile.mkdtemp(prefix="shardscope-ranks-")
        try:
            run = run_owned(with_rank_prefixes(cmd, rank_logs), env={**env, **RANK_PREFIX_ENV}, stdout=log,
                            wall_s=job.wall_s)
        finally:
            shutil.rmtree(rank_logs, ignore_errors=True)
        if run.returncode == 0 and not run.timed_out and publish(staged, out):
            return 0
        log.flush()
        log_text = _read_from(log_path, log_start)
        atomic_write_json(out, failure_document(described(job), str(staged), job.world_size, run.returncode, log_path,
                                                run, job.wall_s, log_text))
    print(f"training job {job.job_id} ended with outcome {read_json(out)['outcome']}; log: {log_path}", file=sys.stderr)
    return 0


def _read_from(path: str, offset: int) -> str:
    """The text of ``path`` from byte ``offset`` (what this launch appended to the log)."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.read().decode("utf-8", errors="replace")
