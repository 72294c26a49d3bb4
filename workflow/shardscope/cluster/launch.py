"""The command that starts a torchrun job: on one node, or across the nodes of a Slurm job.

One node::

    python -m torch.distributed.run --standalone --nproc-per-node N -m MODULE ARGS

Several nodes (inside a Slurm allocation; one torchrun agent per node, c10d rendezvous on the
allocation's first node)::

    srun --nodes K --ntasks-per-node 1 [--cpus-per-task C] --kill-on-bad-exit=1 \\
        python -m torch.distributed.run --nnodes K --nproc-per-node N \\
        --rdzv-backend c10d --rdzv-endpoint HOST:PORT --rdzv-id JOBID -m MODULE ARGS

``srun`` is given ``--cpus-per-task`` explicitly: Slurm 22.05 to 23.02 do not pass it on from
``sbatch``, and snakemake's job step removes ``SLURM_CPUS_PER_TASK`` anyway.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from shardscope.cluster.slurm import Allocation, node_address
from shardscope.errors import UserError

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
#: Rendezvous ports are drawn from [PORT_BASE, PORT_BASE + PORT_SPAN) by job id.
PORT_BASE = 20000
PORT_SPAN = 20000


@dataclass(frozen=True)
class LaunchSpec:
    """How many torchrun agents and workers a job runs, and where they meet."""

    nproc_per_node: int
    """Worker processes per node (one per GPU on a GPU node)."""
    nodes: int = 1
    """Nodes of the allocation to run on, one torchrun agent each; 1 means no Slurm is needed."""
    port: int | None = None
    """c10d rendezvous port on the first node; default :func:`rendezvous_port` of the job id."""
    python: str = field(default=sys.executable)
    """The interpreter every node runs (the same path: the file system is shared)."""

    def __post_init__(self) -> None:
        if self.nproc_per_node < 1:
            raise UserError(f"--nproc-per-node must be at least 1, not {self.nproc_per_node}")
        if self.nodes < 1:
            raise UserError(f"--nodes must be at least 1, not {self.nodes}")
        if self.port is not None and not 1024 <= self.port <= 65535:
            raise UserError(f"--port must be between 1024 and 65535, not {self.port}")

    @property
    def world_size(self) -> int:
        """Worker processes in all: nodes times processes per node."""
        return self.nodes * self.nproc_per_node


def rendezvous_port(job_id: str) -> int:
    """A rendezvous port that differs between jobs sharing a first node (unless ids are 20000 apart)."""
    return PORT_BASE + int(job_id) % PORT_SPAN


def standalone_command(spec: LaunchSpec, module: str, args: Sequence[str]) -> list[str]:
    """torchrun on this node alone: ``--standalone`` picks a free local rendezvous port."""
    _check_module(module)
    return [spec.python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(spec.nproc_per_node),
            "-m", module, *args]


def multinode_command(spec: LaunchSpec, module: str, args: Sequence[str], allocation: Allocation, endpoint_host: str) -> list[str]:
    """srun starts one torchrun agent per node; the agents meet through c10d at ``endpoint_host``."""
    _check_module(module)
    if len(allocation.nodes) < spec.nodes:
        raise UserError(f"--nodes {spec.nodes} asks for more nodes than Slurm job {allocation.job_id} has "
                        f"({len(allocation.nodes)}: {','.join(allocation.nodes)}); submit it with --nodes {spec.nodes}")
    port = spec.port if spec.port is not None else rendezvous_port(allocation.job_id)
    cmd = ["srun", "--nodes", str(spec.nodes), "--ntasks-per-node", "1"]
    if spec.nodes < len(allocation.nodes):
        # The agent on the first node hosts the rendezvous store, so it must be among them.
        cmd += ["--nodelist", ",".join(allocation.nodes[: spec.nodes])]
    if allocation.cpus_per_task:
        cmd += ["--cpus-per-task", str(allocation.cpus_per_task)]
    cmd += ["--kill-on-bad-exit=1",
            spec.python, "-m", "torch.distributed.run", "--nnodes", str(spec.nodes), "--nproc-per-node", str(spec.nproc_per_node),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{endpoint_host}:{port}", "--rdzv-id", allocation.job_id,
            "-m", module, *args]
    return cmd


def build_launch_command(spec: LaunchSpec, module: str, args: Sequence[str], allocation: Allocation | None,
                         address: Callable[[str], str] = node_address) -> list[str]:
    """The command for ``spec``: standalone torchrun on one node, srun + torchrun on several.

    ``allocation`` is the Slurm job this runs in (:func:`shardscope.cluster.slurm.current_allocation`);
    ``address`` maps the first node's name to the address the other agents connect to.
    """
    if spec.nodes == 1:
        return standalone_command(spec, module, args)
    if allocation is None:
        raise UserError(f"--nodes {spec.nodes} needs a Slurm allocation: run it inside `sbatch`/`salloc --nodes {spec.nodes}` "
                        "or from a rule submitted with the slurm profile")
    return multinode_command(spec, module, args, allocation, address(allocation.first_node))


def _check_module(module: str) -> None:
    if not _MODULE.match(module):
        raise UserError(f"-m must name a Python module such as shardscope.collectives, not {module!r}")
