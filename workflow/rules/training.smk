"""Training runs: one job per planned (strategy, model, world size, placement), run by
`shardscope job run` from the job's entry in the plan (model, sizing, dtype, budget, GPUs); the
training launcher turns a failed run into an outcome row. Input: the job's own spec file, so a
job reruns when, and only when, its spec changes (see collectives.smk).

Rule train runs single- and multi-node jobs alike: with cluster.nodes > 1 the plan's multi-node
jobs (ids ending in -mn) get the Slurm shape of that many nodes (common.smk's job_resources) and
the same command starts srun, one torchrun agent per node."""


rule train:
    input:
        spec=JOB_SPEC,
    output:
        f"{RESULTS}/training/{{job}}.json",
    log:
        f"{RESULTS}/logs/training/{{job}}.log",
    wildcard_constraints:
        job=JOB_ID,
    conda:
        ENVS
    threads: lambda wildcards: job_threads("training", wildcards.job)
    resources:
        **job_resources("training"),
    params:
        run=JOB_RUN,
    shell:
        "{params.run} --id {wildcards.job:q} --out {output:q} --log {log:q}"


rule microbatch_search:
    """Largest micro-batch of one planned training job at the plan's global batch: doubling, then bisection over
    the divisors of the per-rank batch, each trial with its gradient accumulation (shardscope.training.search);
    each trial's result is kept under results/search/trials/ (named by its spec's digest), so a stopped search
    resumes. The plan's search entry is a param: a new limit or global batch reruns the search."""
    input:
        spec=JOB_SPEC,
    output:
        f"{RESULTS}/search/{{job}}.json",
    log:
        f"{RESULTS}/logs/search/{{job}}.log",
    wildcard_constraints:
        job=SINGLE_NODE_JOB,
    conda:
        ENVS
    threads: lambda wildcards: plan_job("training", wildcards.job)["world_size"]
    resources:
        measure=1,
        gpu=lambda wildcards: job_gpus("training", wildcards.job),
    params:
        py=PY,
        plan=PLAN,
        trials=f"{RESULTS}/search/trials",
        entry=lambda wildcards: search_entry_text(wildcards.job),
    shell:
        "{params.py:q} -m shardscope.training.search search --plan {params.plan:q} --id {wildcards.job:q}"
        " --out {output:q}"
        " --trials {params.trials:q} --log {log:q} >> {log:q} 2>&1"


rule train_best:
    """One planned training job at the best micro-batch found by the search that serves it (plan.json best: one
    search per memory-equal job serves every fabric condition), accumulating gradients to the plan's global batch,
    with the job's repeats: an ordinary training result (placement marked @best_microbatch), the run figure 4 and
    the report compare the strategies by, per condition. Reruns when the search's summary changes."""
    input:
        spec=JOB_SPEC,
        search=best_search,
    output:
        f"{RESULTS}/best/{{job}}.json",
    log:
        f"{RESULTS}/logs/best/{{job}}.log",
    wildcard_constraints:
        job=SINGLE_NODE_JOB,
    conda:
        ENVS
    threads: lambda wildcards: plan_job("training", wildcards.job)["world_size"]
    resources:
        measure=1,
        gpu=lambda wildcards: job_gpus("training", wildcards.job),
    params:
        py=PY,
        plan=PLAN,
        entry=lambda wildcards: best_entry_text(wildcards.job),
    shell:
        "{params.py:q} -m shardscope.training.search best --plan {params.plan:q} --id {wildcards.job:q}"
        " --search {input.search:q}"
        " --out {output:q} --log {log:q} >> {log:q} 2>&1"
