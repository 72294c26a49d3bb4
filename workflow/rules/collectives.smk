"""Collective benchmarks: one guarded torchrun job per planned (op, world size, placement, transport),
and nccl-tests' all_reduce_perf as a peer on the same GPUs where the planner found it.

Every job rule runs one command, `shardscope job run --plan plan.json --id JOB`: the job's entry
in the plan holds its sweep, dtype, limits, environment and GPUs. Its input is its own spec file
(results/plan/jobs/JOB.json, rewritten only when that job's spec changes), so a job reruns when,
and only when, its own spec does.

Rule collective runs single- and multi-node jobs alike: with cluster.nodes > 1 the plan's
multi-node jobs (ids ending in -mn) get the Slurm shape of that many nodes (common.smk's
job_resources) and the same command starts srun, one torchrun agent per node, c10d rendezvous
on the first node."""

#: The plan every job rule reads its job from (by path: its mtime changes with any job's spec).
PLAN = f"{RESULTS}/plan/plan.json"
#: One job's spec file, the job rules' input.
JOB_SPEC = f"{RESULTS}/plan/jobs/{{job}}.json"
#: The one command of every job rule; the rule adds --id, --out and --log.
JOB_RUN = f"{SHARDSCOPE} job run --plan {shlex.quote(PLAN)}"


#: Input function of the collect rule: the nccl-tests peer results the planner planned ([] where it skipped them).
nccl_tests_peer_results = lambda wildcards: [
    f"{RESULTS}/collectives/{job['job_id']}.json" for job in plan_doc().get("nccl_tests", [])
]


rule collective:
    input:
        spec=JOB_SPEC,
    output:
        f"{RESULTS}/collectives/{{job}}.json",
    log:
        f"{RESULTS}/logs/collectives/{{job}}.log",
    wildcard_constraints:
        job=rf"(?!nccl-tests-){JOB_ID}",
    conda:
        ENVS
    threads: lambda wildcards: job_threads("collectives", wildcards.job)
    resources:
        **job_resources("collectives"),
    params:
        run=JOB_RUN,
    shell:
        "{params.run} --id {wildcards.job:q} --out {output:q} --log {log:q}"


rule nccl_tests_peer:
    input:
        spec=f"{RESULTS}/plan/jobs/nccl-tests-ws{{n}}-{{placement}}.json",
    output:
        json=f"{RESULTS}/collectives/nccl-tests-ws{{n}}-{{placement}}.json",
        raw=f"{RESULTS}/collectives/raw/all_reduce_perf-ws{{n}}-{{placement}}.txt",
    log:
        f"{RESULTS}/logs/collectives/nccl-tests-ws{{n}}-{{placement}}.log",
    wildcard_constraints:
        n=r"\d+",
        placement=r"[A-Za-z0-9_.]+",
    conda:
        ENVS
    resources:
        measure=1,
        gpu=lambda wildcards: int(wildcards.n),
    params:
        run=JOB_RUN,
        shardscope=SHARDSCOPE,
    shell:
        "{params.run} --id nccl-tests-ws{wildcards.n:q}-{wildcards.placement:q} --out {output.raw:q} --log {log:q}"
        " && {params.shardscope} collectives import {output.raw:q} --placement {wildcards.placement:q}"
        " --transport default --out {output.json:q}"
