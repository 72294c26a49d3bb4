"""Training runs: one job per planned (strategy, model, world size, placement); `shardscope train`
launches torchrun and turns a failed run into an outcome row.

With cluster.nodes > 1, rule train_multinode runs the plan's multi-node jobs (ids ending in -mn)
in one Slurm job of that many nodes (`shardscope train --nodes K`: srun, one torchrun agent per node)."""


rule train:
    input:
        plan=f"{RESULTS}/plan/plan.json",
    output:
        f"{RESULTS}/training/{{job}}.json",
    log:
        f"{RESULTS}/logs/training/{{job}}.log",
    wildcard_constraints:
        job=SINGLE_NODE_JOB,
    threads: lambda wildcards: plan_job("training", wildcards.job)["world_size"]
    resources:
        measure=1,
        gpu=lambda wildcards: job_gpus("training", wildcards.job),
    params:
        shardscope=SHARDSCOPE,
        env=lambda wildcards: job_env("training", wildcards.job),
        job=lambda wildcards: plan_job("training", wildcards.job),
        model=lambda wildcards: json.dumps(sizing()["model"]) if isinstance(sizing()["model"], dict) else sizing()["model"],
        size=lambda wildcards: sizing(),
        budget=memory_budget_args(),
        fair=lambda wildcards: fair_args(),
    conda:
        ENVS
    shell:
        "env {params.env} {params.shardscope} train --strategy {params.job[strategy]} --model {params.model:q}"
        " --nproc {params.job[world_size]} --placement {params.job[placement]} --job-id {wildcards.job}"
        " --micro-batch {params.size[micro_batch]} --seq-len {params.size[seq_len]} --dtype {params.size[dtype]}"
        " --warmup {params.size[warmup]} --steps {params.size[steps]} {params.budget} {params.fair} --comm-profile"
        " --out {output} --log {log}"


rule train_multinode:
    input:
        plan=f"{RESULTS}/plan/plan.json",
    output:
        f"{RESULTS}/training/{{job}}.json",
    log:
        f"{RESULTS}/logs/training/{{job}}.log",
    wildcard_constraints:
        job=MULTINODE_JOB,
    threads: lambda wildcards: multinode_job("training", wildcards.job)["nproc_per_node"]
    resources:
        measure=1,
        nodes=lambda wildcards: multinode_job("training", wildcards.job)["nodes"],
        tasks=lambda wildcards: multinode_job("training", wildcards.job)["nodes"],
        mpi="srun",
        tasks_per_gpu=0,
        gres=lambda wildcards: multinode_gres("training", wildcards.job),
    params:
        shardscope=SHARDSCOPE,
        env=lambda wildcards: job_env("training", wildcards.job, multinode_job),
        job=lambda wildcards: multinode_job("training", wildcards.job),
        model=lambda wildcards: json.dumps(sizing()["model"]) if isinstance(sizing()["model"], dict) else sizing()["model"],
        size=lambda wildcards: sizing(),
        budget=memory_budget_args(),
        fair=lambda wildcards: fair_args(),
    conda:
        ENVS
    shell:
        "env {params.env} {params.shardscope} train --nodes {resources.nodes} --strategy {params.job[strategy]}"
        " --model {params.model:q} --nproc {params.job[nproc_per_node]} --placement {params.job[placement]}"
        " --job-id {wildcards.job} --micro-batch {params.size[micro_batch]} --seq-len {params.size[seq_len]}"
        " --dtype {params.size[dtype]} --warmup {params.size[warmup]} --steps {params.size[steps]} {params.budget}"
        " {params.fair} --comm-profile --out {output} --log {log}"
