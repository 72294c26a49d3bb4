rule collective:
    input:
        plan=f"{RESULTS}/plan/plan.json",
    output:
        f"{RESULTS}/collectives/{{job}}.json",
    log:
        f"{RESULTS}/logs/collectives/{{job}}.log",
    wildcard_constraints:
        job=r"[A-Za-z0-9_.-]+",
    threads: lambda wildcards: plan_job("collectives", wildcards.job)["world_size"]
    resources:
        measure=1,
        gpu=lambda wildcards: job_gpus("collectives", wildcards.job),
    params:
        torchrun=TORCHRUN,
        env=lambda wildcards: job_env("collectives", wildcards.job),
        job=lambda wildcards: plan_job("collectives", wildcards.job),
        sweep=lambda wildcards: sizing()["sweep"],
        dtype=config["collectives"]["dtype"],
        check="--check" if config["collectives"].get("check", True) else "",
    conda:
        ENVS
    shell:
        "env {params.env} {params.torchrun} --standalone --nproc-per-node {params.job[world_size]}"
        " -m shardscope.collectives --op {params.job[op]} --job-id {wildcards.job}"
        " --placement {params.job[placement]} --transport {params.job[transport]} --dtype {params.dtype}"
        " -b {params.sweep[min_bytes]} -e {params.sweep[max_bytes]} -f {params.sweep[factor]}"
        " -w {params.sweep[warmup]} -n {params.sweep[iters]} {params.check} --out {output} > {log} 2>&1"
