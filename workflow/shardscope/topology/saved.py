"""A saved topology (config ``topology.file``) against the machine the pipeline runs on.

Planning from a saved ``nvidia-smi topo -m`` is for machines one does not sit at: the plan's jobs
pin GPUs by index (``CUDA_VISIBLE_DEVICES``), so running them where those GPUs do not exist
would start the whole GPU plan as CPU processes without a word. The pipeline asks
:func:`saved_topology_problem` before its first job and stops with its sentence.
"""

from __future__ import annotations

from collections.abc import Callable

#: Executors whose jobs run on other machines (compute nodes), not where Snakemake runs.
REMOTE_EXECUTORS = ("slurm", "slurm-jobstep")


def local_gpu_count() -> int:
    """GPUs this machine's probe finds (0 on a CPU-only machine)."""
    from shardscope.topology.detect import detect

    return len(detect().topology.gpus)


def saved_topology_problem(path: str | None, executor: str | None,
                           local_gpus: Callable[[], int] = local_gpu_count) -> str | None:
    """One sentence saying why the saved topology at ``path`` cannot be run here, or None when it can.

    None without a saved topology, under a remote executor (the jobs run on the nodes the file
    describes), and when this machine has at least as many GPUs as the file names.
    """
    if not path or executor in REMOTE_EXECUTORS:
        return None
    from shardscope.topology.parse import parse_file

    wanted = len(parse_file(path).gpus)
    here = local_gpus()
    if wanted == 0 or here >= wanted:
        return None
    return (f"config key topology.file: {path} describes {wanted} GPUs but this machine has {here}, so its jobs cannot "
            f"run here; run the pipeline on that GPU node (or with --profile profiles/slurm), or plan for it from here "
            f"with `shardscope plan --topology {path} --config config/config.yaml`, `shardscope advise` or `shardscope predict`")
