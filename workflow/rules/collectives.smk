"""Collective benchmarks: one guarded torchrun job per planned (op, world size, placement, transport),
and nccl-tests' all_reduce_perf as a peer on the same GPUs where it is installed.

With cluster.nodes > 1, rule collective_multinode runs the plan's multi-node jobs (ids ending in
-mn) in one Slurm job of that many nodes: `shardscope cluster launch` starts srun, one torchrun
agent per node, c10d rendezvous on the first node."""

import shutil

from shardscope.collectives.peer import peer_result_files, peer_shell_words

#: Every timed job runs under this guard: a wall-clock limit, output in the log, one clear failure line.
GUARD = f"{PY} -m shardscope.collectives.guard"
#: Bound on one collective (passed to init_process_group); a rank that never joins fails the job.
COLLECTIVE_TIMEOUT_S = float(config["collectives"].get("timeout_s", 300))
#: Bound on a whole job, enforced from outside (catches hangs no process-group timeout sees).
COLLECTIVE_WALL_S = float(config["collectives"].get("job_timeout_s", 1800))

#: Input function for the collect rule: the nccl-tests peer results, planned only when the plan
#: runs on GPUs and all_reduce_perf is on the PATH (shutil.which); [] everywhere else.
nccl_tests_peer_results = lambda wildcards: peer_result_files(plan_doc(), RESULTS, shutil.which)


rule collective:
    input:
        plan=f"{RESULTS}/plan/plan.json",
    output:
        f"{RESULTS}/collectives/{{job}}.json",
    log:
        f"{RESULTS}/logs/collectives/{{job}}.log",
    wildcard_constraints:
        job=rf"(?!nccl-tests-){SINGLE_NODE_JOB}",
    threads: lambda wildcards: plan_job("collectives", wildcards.job)["world_size"]
    resources:
        measure=1,
        gpu=lambda wildcards: job_gpus("collectives", wildcards.job),
    params:
        guard=GUARD,
        wall_s=COLLECTIVE_WALL_S,
        timeout_s=COLLECTIVE_TIMEOUT_S,
        torchrun=TORCHRUN,
        env=lambda wildcards: job_env("collectives", wildcards.job),
        job=lambda wildcards: plan_job("collectives", wildcards.job),
        sweep=lambda wildcards: sizing()["sweep"],
        dtype=config["collectives"]["dtype"],
        check="--check" if config["collectives"].get("check", True) else "",
    conda:
        ENVS
    shell:
        "{params.guard} --job-id {wildcards.job} --log {log} --wall-s {params.wall_s} --"
        " env {params.env} {params.torchrun} --standalone --nproc-per-node {params.job[world_size]}"
        " -m shardscope.collectives --op {params.job[op]} --job-id {wildcards.job}"
        " --placement {params.job[placement]} --transport {params.job[transport]} --dtype {params.dtype}"
        " -b {params.sweep[min_bytes]} -e {params.sweep[max_bytes]} -f {params.sweep[factor]}"
        " -w {params.sweep[warmup]} -n {params.sweep[iters]} {params.check} --timeout-s {params.timeout_s}"
        " --out {output}"


rule collective_multinode:
    input:
        plan=f"{RESULTS}/plan/plan.json",
    output:
        f"{RESULTS}/collectives/{{job}}.json",
    log:
        f"{RESULTS}/logs/collectives/{{job}}.log",
    wildcard_constraints:
        job=MULTINODE_JOB,
    threads: lambda wildcards: multinode_job("collectives", wildcards.job)["nproc_per_node"]
    resources:
        measure=1,
        nodes=lambda wildcards: multinode_job("collectives", wildcards.job)["nodes"],
        tasks=lambda wildcards: multinode_job("collectives", wildcards.job)["nodes"],
        mpi="srun",
        tasks_per_gpu=0,
        gres=lambda wildcards: multinode_gres("collectives", wildcards.job),
    params:
        guard=GUARD,
        wall_s=COLLECTIVE_WALL_S,
        timeout_s=COLLECTIVE_TIMEOUT_S,
        shardscope=SHARDSCOPE,
        env=lambda wildcards: job_env("collectives", wildcards.job, multinode_job),
        job=lambda wildcards: multinode_job("collectives", wildcards.job),
        sweep=lambda wildcards: sizing()["sweep"],
        dtype=config["collectives"]["dtype"],
        check="--check" if config["collectives"].get("check", True) else "",
    conda:
        ENVS
    shell:
        "{params.guard} --job-id {wildcards.job} --log {log} --wall-s {params.wall_s} --"
        " env {params.env} {params.shardscope} cluster launch --nodes {resources.nodes}"
        " --nproc-per-node {params.job[nproc_per_node]}"
        " -m shardscope.collectives --op {params.job[op]} --job-id {wildcards.job}"
        " --placement {params.job[placement]} --transport {params.job[transport]} --dtype {params.dtype}"
        " -b {params.sweep[min_bytes]} -e {params.sweep[max_bytes]} -f {params.sweep[factor]}"
        " -w {params.sweep[warmup]} -n {params.sweep[iters]} {params.check} --timeout-s {params.timeout_s}"
        " --out {output}"


rule nccl_tests_peer:
    input:
        plan=f"{RESULTS}/plan/plan.json",
    output:
        json=f"{RESULTS}/collectives/nccl-tests-ws{{n}}-{{placement}}.json",
        raw=f"{RESULTS}/collectives/raw/all_reduce_perf-ws{{n}}-{{placement}}.txt",
    log:
        f"{RESULTS}/logs/collectives/nccl-tests-ws{{n}}-{{placement}}.log",
    wildcard_constraints:
        n=r"\d+",
        placement=r"[A-Za-z0-9_.]+",
    resources:
        measure=1,
        gpu=lambda wildcards: int(wildcards.n),
    params:
        guard=GUARD,
        wall_s=COLLECTIVE_WALL_S,
        shardscope=SHARDSCOPE,
        command=lambda wildcards: peer_shell_words(
            plan_doc(), shutil.which, int(wildcards.n), wildcards.placement, sizing()["sweep"],
            config["collectives"]["dtype"], bool(config["collectives"].get("check", True))),
    conda:
        ENVS
    shell:
        "{params.guard} --job-id nccl-tests-ws{wildcards.n}-{wildcards.placement} --log {log} --wall-s {params.wall_s}"
        " -- env {params.command}"
        " && cp {log} {output.raw}"
        " && {params.shardscope} collectives import {output.raw} --placement {wildcards.placement}"
        " --transport default --out {output.json}"
