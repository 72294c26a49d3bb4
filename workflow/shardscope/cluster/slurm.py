"""The Slurm allocation this process runs in: job id, node names, CPUs per task, node addresses.

Inside a job submitted by snakemake-executor-plugin-slurm the rule's shell does *not* see the
usual ``SLURM_*`` variables: the plugin's job step removes every one of them except the job
id (so that a nested ``srun`` does not inherit step settings). So the node list and CPUs per
task are read from the environment when present and from ``scontrol show job`` otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from shardscope.errors import UserError

#: Runs a command and returns its stdout; replaced in unit tests.
Runner = Callable[[Sequence[str]], str]

_FIELD = re.compile(r"(\S+?)=(\S*)")


def run_command(cmd: Sequence[str]) -> str:
    """Run a Slurm client command and return its stdout; a failure is a :class:`UserError`."""
    if shutil.which(cmd[0]) is None:
        raise UserError(f"`{cmd[0]}` is not on PATH; cluster commands need the Slurm client tools")
    try:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        raise UserError(f"`{' '.join(cmd)}` did not answer within 60 s; is slurmctld up?") from None
    if done.returncode != 0:
        raise UserError(f"`{' '.join(cmd)}` failed: {done.stderr.strip() or f'exit status {done.returncode}'}")
    return done.stdout


def parse_record(text: str) -> dict[str, str]:
    """The ``Key=Value`` fields of one ``scontrol show … -o`` record (values without spaces)."""
    return {key: value for key, value in _FIELD.findall(text)}


@dataclass(frozen=True)
class Allocation:
    """A Slurm job's allocation, as seen from one of its processes."""

    job_id: str
    """``SLURM_JOB_ID``: also the torchrun rendezvous id, unique per job."""
    nodes: tuple[str, ...]
    """Node names in allocation order; the first one hosts the rendezvous."""
    cpus_per_task: int | None = None
    """``--cpus-per-task`` of the job, to pass on to ``srun`` (which does not inherit it)."""

    def __post_init__(self) -> None:
        if not self.job_id.isdigit():
            raise UserError(f"SLURM_JOB_ID must be a job number, not {self.job_id!r}")
        if not self.nodes:
            raise UserError(f"Slurm job {self.job_id} has no nodes in its allocation")

    @property
    def first_node(self) -> str:
        """The node that hosts the c10d rendezvous (``scontrol show hostnames``' first line)."""
        return self.nodes[0]


def expand_hostlist(hostlist: str, run: Runner = run_command) -> tuple[str, ...]:
    """``vm,gpu[01-03]`` -> each node name, through ``scontrol show hostnames`` (Slurm's own rules)."""
    names = tuple(line.strip() for line in run(["scontrol", "show", "hostnames", hostlist]).splitlines() if line.strip())
    if not names:
        raise UserError(f"`scontrol show hostnames {hostlist}` listed no nodes")
    return names


def current_allocation(env: Mapping[str, str] | None = None, run: Runner = run_command) -> Allocation | None:
    """The allocation this process runs in, or None outside a Slurm job.

    Uses ``SLURM_JOB_NODELIST``/``SLURM_CPUS_PER_TASK`` when set; inside a snakemake job
    step, where only ``SLURM_JOB_ID`` survives, asks ``scontrol show job`` instead.
    """
    env = os.environ if env is None else env
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job_id:
        return None
    hostlist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    cpus = env.get("SLURM_CPUS_PER_TASK")
    if not hostlist or not cpus:
        record = parse_record(run(["scontrol", "show", "job", "-o", job_id]))
        hostlist = hostlist or record.get("NodeList", "")
        cpus = cpus or record.get("CPUs/Task")
        if not hostlist or hostlist == "(null)":
            raise UserError(f"Slurm job {job_id} has no node list yet (`scontrol show job {job_id}`)")
    return Allocation(job_id=job_id, nodes=expand_hostlist(hostlist, run), cpus_per_task=_positive_int(cpus))


def node_address(node: str, run: Runner = run_command) -> str:
    """The address other nodes reach ``node`` at: its ``NodeAddr`` (often the node name itself)."""
    record = parse_record(run(["scontrol", "show", "node", "-o", node]))
    addr = record.get("NodeAddr") or record.get("NodeHostName") or node
    return node if addr in ("", "(null)") else addr


def _positive_int(value: str | None) -> int | None:
    if value is None or not value.strip().isdigit() or int(value) < 1:
        return None
    return int(value)
