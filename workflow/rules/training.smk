rule train:
    input:
        plan=f"{RESULTS}/plan/plan.json",
    output:
        f"{RESULTS}/training/{{job}}.json",
    log:
        f"{RESULTS}/logs/training/{{job}}.log",
    wildcard_constraints:
        job=r"[A-Za-z0-9_.-]+",
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
    conda:
        ENVS
    shell:
        "env {params.env} {params.shardscope} train --strategy {params.job[strategy]} --model {params.model:q}"
        " --nproc {params.job[world_size]} --placement {params.job[placement]} --job-id {wildcards.job}"
        " --micro-batch {params.size[micro_batch]} --seq-len {params.size[seq_len]} --dtype {params.size[dtype]}"
        " --warmup {params.size[warmup]} --steps {params.size[steps]} {params.budget} --comm-profile"
        " --out {output} --log {log}"
