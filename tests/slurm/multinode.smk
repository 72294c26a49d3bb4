# A two-rule workflow that runs shardscope across two Slurm nodes through
# snakemake-executor-plugin-slurm, with the resources a multi-node pipeline rule needs:
#   nodes=K, tasks=K        one task per node (the plugin's MPI path: sbatch --nodes K --ntasks K)
#   mpi="srun"              the plugin then runs the shell in the batch step, without its own
#                           `srun -n1` wrapper, so the rule's `srun` can reach every node
#   tasks_per_gpu=0         never --ntasks-per-gpu (it would start a torchrun per GPU)
# Rule names match the pipeline's, so the slurm profile's set-resources apply to them too.
# Used by tests/slurm/test_real_slurm.py:  --snakefile tests/slurm/multinode.smk --config out=DIR

import sys

OUT = config["out"]
PY = sys.executable
NODES = 2
NPROC = 2


rule all:
    input:
        f"{OUT}/topology.json",
        f"{OUT}/all_reduce-2nodes.json",


rule topology:
    output:
        f"{OUT}/topology.json",
    log:
        f"{OUT}/logs/topology.log",
    resources:
        nodes=NODES,
        tasks=NODES,
        mpi="srun",
        tasks_per_gpu=0,
    shell:
        "{PY} -m shardscope.cluster topology --out {output} 2> {log}"


rule collective:
    output:
        f"{OUT}/all_reduce-2nodes.json",
    log:
        f"{OUT}/logs/all_reduce-2nodes.log",
    threads: NPROC
    resources:
        nodes=NODES,
        tasks=NODES,
        mpi="srun",
        tasks_per_gpu=0,
    shell:
        "{PY} -m shardscope.cluster launch --nodes {resources.nodes} --nproc-per-node {threads}"
        " -m shardscope.collectives --op all_reduce -b 1024 -e 65536 -f 8 -w 1 -n 3 --check"
        " --job-id all_reduce-2nodes --placement nodes2 --out {output} > {log} 2>&1"
