"""Run the unchanged collective and training workers over an emulated fabric.

One ``torchrun`` node per host namespace, one rank per node::

    ip netns exec <ns of host i> python -m torch.distributed.run --nnodes K --node-rank i \
        --nproc-per-node 1 --master-addr <address of the first host> --master-port 29500 \
        -m shardscope.collectives ...

with ``GLOO_SOCKET_IFNAME=eth0``, so the rendezvous and every gloo connection go through the
emulated links. When the workers are done the launcher adds the fabric to the result
(``job.fabric = "emulated:<preset>"``, ``job.fabric_links`` with every link's rate and delay)
by rewriting the file atomically; the workers need no flag for it.
"""

from __future__ import annotations

import ctypes
import glob
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from shardscope.contracts.strategies import uses_deepspeed
from shardscope.emulated import netns
from shardscope.emulated.fabric import DEFAULT_SUBNET, HOST_IFACE, EmulatedFabric, check_subnet
from shardscope.emulated.presets import FabricPreset, host_name
from shardscope.errors import UserError
from shardscope.fileio import atomic_write_json, read_json

#: The rendezvous port inside the first host's namespace (a fresh namespace: always free).
MASTER_PORT = 29500
#: Seconds the other ranks get to finish after one rank failed, before they are killed.
FAIL_GRACE_S = 10.0
#: Environment a rank must not inherit from the launcher's own torchrun or Snakemake job.
_DROP_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR",
             "MASTER_PORT", "LOCAL_SIZE", "GLOO_SOCKET_IFNAME", "TORCHELASTIC_RUN_ID")


@dataclass(frozen=True)
class EmulatedJob:
    """Where one job runs: a preset, one of its placements, and the limits of the run."""

    preset: FabricPreset
    placement: str = "all"
    prefix: str = netns.DEFAULT_PREFIX
    subnet: str = DEFAULT_SUBNET
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if self.placement not in self.preset.placements:
            raise UserError(f"fabric {self.preset.name!r} has no placement {self.placement!r}; expected one of {', '.join(self.preset.placements)}")
        netns.check_prefix(self.prefix)
        check_subnet(self.subnet, self.preset.hosts)
        if not (isinstance(self.timeout_s, (int, float)) and 10 <= self.timeout_s <= 86_400):
            raise UserError(f"emulated.timeout_s must be a number of seconds from 10 to 86400, got {self.timeout_s!r}")

    @property
    def hosts(self) -> tuple[int, ...]:
        """Host indices of the ranks, in rank order."""
        return self.preset.placements[self.placement]

    @property
    def fabric_label(self) -> str:
        """``emulated:<preset>``: the value of ``runs.fabric`` in the database."""
        return f"emulated:{self.preset.name}"

    @property
    def placement_label(self) -> str:
        """``<placement>@<preset>``: keeps baselines and figure curves of different fabrics apart."""
        return f"{self.placement}@{self.preset.name}"

    def job_fields(self) -> dict[str, Any]:
        """What the launcher adds to the result's ``job`` mapping."""
        return {
            "fabric": self.fabric_label,
            "fabric_links": {link.name: {"rate_mbit": link.rate_mbit, "delay_ms": float(link.delay_ms)} for link in self.preset.links},
            "fabric_hosts": [host_name(h) for h in self.hosts],
            "fabric_placement": self.placement,
            "fabric_bottleneck_mbit": self.preset.bottleneck_mbit(self.hosts),
        }


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to SIGTERM the rank's torchrun when the launcher dies (even by SIGKILL)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def rank_env(world_size: int) -> dict[str, str]:
    """Environment of every rank: the launcher's, minus torchrun's variables, plus gloo's interface."""
    env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = str(max(cores // world_size, 1))
    env.update(GLOO_SOCKET_IFNAME=HOST_IFACE, SHARDSCOPE_THREADS_PER_RANK=threads, OMP_NUM_THREADS=threads)
    return env


def rank_command(fabric: EmulatedFabric, hosts: tuple[int, ...], node_rank: int, module: str, worker_args: list[str]) -> list[str]:
    """The command of node ``node_rank``: torchrun with one rank, inside its host's namespace."""
    return ["ip", "netns", "exec", fabric.host_namespace(hosts[node_rank]), sys.executable, "-m", "torch.distributed.run",
            "--nnodes", str(len(hosts)), "--node-rank", str(node_rank), "--nproc-per-node", "1",
            "--master-addr", fabric.host_address(hosts[0]), "--master-port", str(MASTER_PORT), "--max-restarts", "0",
            "-m", module, *worker_args]


def run_ranks(fabric: EmulatedFabric, job: EmulatedJob, module: str, worker_args: list[str], log: IO[str]) -> int:
    """Start every node, wait (bounded by ``job.timeout_s``) and return 0, the first failure's status, or 124."""
    env = rank_env(len(job.hosts))
    procs = []
    for node_rank in range(len(job.hosts)):
        cmd = rank_command(fabric, job.hosts, node_rank, module, worker_args)
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                      preexec_fn=_die_with_parent))  # noqa: PLW1509 - only prctl, no locks
    deadline = time.monotonic() + job.timeout_s
    failed_at: float | None = None
    status = 0
    try:
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes):
                return next((c for c in codes if c != 0), 0)
            now = time.monotonic()
            if failed_at is None and any(c not in (None, 0) for c in codes):
                failed_at = now
            if now > deadline:
                log.write(f"shardscope: the job did not finish within {job.timeout_s:g} s; stopping it\n")
                status = 124
                return status
            if failed_at is not None and now - failed_at > FAIL_GRACE_S:
                status = next(c for c in codes if c not in (None, 0))
                log.write(f"shardscope: a rank failed (status {status}); stopping the others\n")
                return status
            time.sleep(0.2)
    finally:
        if any(p.poll() is None for p in procs):
            netns.kill_processes(fabric.namespaces)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        log.flush()


def label_document(out: str | os.PathLike[str], job: EmulatedJob, fabric: dict[str, Any]) -> dict[str, Any]:
    """Add the fabric to the result at ``out`` (``job`` fields, ``env.emulated_fabric``), atomically."""
    doc = read_json(out)
    doc.setdefault("job", {}).update(job.job_fields())
    doc.setdefault("env", {})["emulated_fabric"] = {**fabric, "preset_definition": job.preset.to_dict(), "placement": job.placement}
    atomic_write_json(out, doc)
    return doc


def _prepare(job: EmulatedJob, out: str, log_path: str) -> None:
    problem = netns.support_problem(job.preset.needs_delay, job.prefix)
    if problem:
        raise UserError(f"cannot build emulated fabric {job.preset.name!r}: {problem}")
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    for stale in [out, *glob.glob(f"{glob.escape(out)}.rank*.error.json")]:
        Path(stale).unlink(missing_ok=True)
    removed = netns.cleanup(job.prefix)
    if removed:
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"shardscope: removed {len(removed)} leftover namespaces of earlier killed jobs: {' '.join(removed)}\n")


def run_collective(job: EmulatedJob, worker_args: list[str], out: str, log_path: str) -> dict[str, Any]:
    """Run ``shardscope.collectives`` over the fabric; UserError naming the log if it fails."""
    _prepare(job, out, log_path)
    with open(log_path, "a", encoding="utf-8") as log, EmulatedFabric(job.preset, job.prefix, job.subnet) as fabric:
        log.write(f"shardscope: fabric {job.fabric_label} up: {fabric.describe()}\n")
        log.flush()
        status = run_ranks(fabric, job, "shardscope.collectives", [*worker_args, "--cpu", "--out", out], log)
        described = fabric.describe()
    if status != 0 or not Path(out).exists():
        Path(out).unlink(missing_ok=True)
        raise UserError(f"collective job on {job.fabric_label} ({job.placement}) failed with status {status}; see {log_path}")
    return label_document(out, job, described)


def run_training(job: EmulatedJob, worker_args: list[str], job_doc: dict[str, Any], out: str, log_path: str) -> dict[str, Any]:
    """Run ``shardscope.training`` over the fabric; a failed run becomes an ``oom``/``failed`` result, as locally."""
    from shardscope.training.launch import failure_document, prebuild_deepspeed_cpu_ops
    from shardscope.training.outcome_files import error_path

    _prepare(job, out, log_path)
    with open(log_path, "a", encoding="utf-8") as log:
        if uses_deepspeed(str(job_doc.get("strategy", ""))):
            prebuild_deepspeed_cpu_ops(log)  # before the fabric is up: no rank races to JIT-build it
        with EmulatedFabric(job.preset, job.prefix, job.subnet) as fabric:
            log.write(f"shardscope: fabric {job.fabric_label} up: {fabric.describe()}\n")
            log.flush()
            status = run_ranks(fabric, job, "shardscope.training", [*worker_args, "--cpu", "--out", out], log)
            described = fabric.describe()
    if status != 0 or not Path(out).exists():
        atomic_write_json(out, failure_document(dict(job_doc, placement=job.placement_label), out, len(job.hosts), status, log_path))
        for rank in range(len(job.hosts)):
            Path(error_path(out, rank)).unlink(missing_ok=True)
    doc = label_document(out, job, described)
    if doc.get("outcome") != "ok":
        print(f"training job {doc['job'].get('job_id')} on {job.fabric_label} ended with outcome {doc.get('outcome')}; log: {log_path}", file=sys.stderr)
    return doc
