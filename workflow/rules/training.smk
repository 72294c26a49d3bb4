"""Training runs: one job per planned (strategy, model, world size, placement), run by
`shardscope job run` from the job's entry in the plan (model, sizing, dtype, budget, GPUs); the
training launcher turns a failed run into an outcome row. Input: the job's own spec file, so a
job reruns when, and only when, its spec changes (see collectives.smk).

With cluster.nodes > 1, rule train_multinode runs the plan's multi-node jobs (ids ending in -mn)
in one Slurm job of that many nodes (srun, one torchrun agent per node)."""


rule train:
    input:
        spec=JOB_SPEC,
    output:
        f"{RESULTS}/training/{{job}}.json",
    log:
        f"{RESULTS}/logs/training/{{job}}.log",
    wildcard_constraints:
        job=SINGLE_NODE_JOB,
    conda:
        ENVS
    threads: lambda wildcards: plan_job("training", wildcards.job)["world_size"]
    resources:
        measure=1,
        gpu=lambda wildcards: job_gpus("training", wildcards.job),
    params:
        run=JOB_RUN,
    shell:
        "{params.run} --id {wildcards.job} --out {output} --log {log}"


rule train_multinode:
    input:
        spec=JOB_SPEC,
    output:
        f"{RESULTS}/training/{{job}}.json",
    log:
        f"{RESULTS}/logs/training/{{job}}.log",
    wildcard_constraints:
        job=MULTINODE_JOB,
    conda:
        ENVS
    threads: lambda wildcards: multinode_job("training", wildcards.job)["nproc_per_node"]
    resources:
        measure=1,
        nodes=lambda wildcards: multinode_job("training", wildcards.job)["nodes"],
        tasks=lambda wildcards: multinode_job("training", wildcards.job)["nodes"],
        mpi="srun",
        tasks_per_gpu=0,
        gres=lambda wildcards: multinode_gres("training", wildcards.job),
    params:
        run=JOB_RUN,
    shell:
        "{params.run} --id {wildcards.job} --out {output} --log {log}"
