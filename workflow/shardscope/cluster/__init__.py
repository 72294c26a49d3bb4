"""Cluster execution: the Slurm allocation a job runs in, and how it launches torchrun there.

- :mod:`shardscope.cluster.slurm` reads the allocation (job id, nodes, CPUs per task) from the
  environment or, where snakemake's job step stripped it, from ``scontrol``.
- :mod:`shardscope.cluster.launch` builds the launch command: ``torchrun --standalone`` on one
  node, ``srun`` + ``torchrun`` with a c10d rendezvous on the allocation's first node otherwise.
- :mod:`shardscope.cluster.topology` probes every node of the allocation (one ``srun`` task
  per node) and combines the per-node topologies into one ``topology.json``.
- :mod:`shardscope.cluster.executor` says whether a Snakemake run may start multi-node jobs
  (only under the Slurm executor).
"""
