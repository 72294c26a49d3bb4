"""Whether a Snakemake run can start multi-node jobs: only through the Slurm executor.

A multi-node job (config ``cluster.nodes`` above 1) needs a Slurm allocation of that many
nodes, which only snakemake-executor-plugin-slurm (``--profile profiles/slurm``) gives it. The
pipeline asks :func:`multinode_problem` in its ``onstart`` handler (workflow/rules/common.smk),
which Snakemake runs once the executor is chosen and the DAG is built but before any job starts;
jobs inside Slurm (the ``slurm-jobstep`` executor) run no ``onstart`` handler.
"""

from __future__ import annotations

#: Executor plugin names that submit jobs to Slurm (the second runs a job inside its allocation).
SLURM_EXECUTORS = ("slurm", "slurm-jobstep")


def multinode_problem(nodes: int, executor: str | None) -> str | None:
    """One sentence saying why ``nodes`` nodes cannot run under ``executor``, or None when they can.

    ``executor`` is the Snakemake executor plugin's name (``workflow.executor_plugin.name``;
    None when there is none).
    """
    if nodes <= 1 or executor in SLURM_EXECUTORS:
        return None
    return (f"config key cluster.nodes is {nodes}, and multi-node jobs need the Slurm profile "
            f"(snakemake --profile profiles/slurm), not the {executor or 'local'} executor; "
            "set cluster.nodes to 1 to run on this machine")
