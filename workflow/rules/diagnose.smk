"""Diagnosis: verdicts of the measured sweeps and the node's doctor findings, loaded by collect.

Rule verdicts judges every planned collective job, emulated ones included, against the detected topology
(`shardscope verdict`: plateau busbw, size to 90%, latency floor, the busbw the links should
give, ok/low/suspicious/unknown); rule nccl_tests_verdicts does the same for the nccl-tests
peer runs, in their own document so that a peer run is never pooled with our job on the same
GPUs. Rule doctor checks the node the jobs ran on (ACS, IOMMU, PCIe links, NCCL variables, NUMA,
virtualisation) without the per-pair peer check, which `shardscope doctor` runs on demand.
"""

VERDICTS = f"{RESULTS}/diagnose/verdicts.json"
NCCL_TESTS_VERDICTS = f"{RESULTS}/diagnose/verdicts-nccl-tests.json"
DOCTOR = f"{RESULTS}/diagnose/doctor.json"

#: Input function of rule verdicts: every planned collective job's result and every emulated one's (their plateau,
#: size to 90% of it and latency floor; the verdict is unknown, as for every CPU sweep).
judged_collective_results = lambda wildcards: collective_results(wildcards) + emulated_results(wildcards)

#: Input function of the collect rule: the diagnosis documents this plan has something to judge for.
diagnose_results = lambda wildcards: (
    ([VERDICTS] if collective_results(wildcards) else [])
    + ([NCCL_TESTS_VERDICTS] if nccl_tests_peer_results(wildcards) else [])
    + [DOCTOR]
)


localrules:
    verdicts,
    nccl_tests_verdicts,


rule verdicts:
    input:
        topology=rules.topology.output.json,
        results=judged_collective_results,
    output:
        json=VERDICTS,
    log:
        f"{RESULTS}/logs/diagnose/verdicts.log",
    conda:
        ENVS
    params:
        shardscope=SHARDSCOPE,
    shell:
        "{params.shardscope} verdict {input.results:q} --topology {input.topology:q} --out {output.json:q} >"
        " {log:q} 2>&1"


rule nccl_tests_verdicts:
    input:
        topology=rules.topology.output.json,
        results=nccl_tests_peer_results,
    output:
        json=NCCL_TESTS_VERDICTS,
    log:
        f"{RESULTS}/logs/diagnose/verdicts-nccl-tests.log",
    conda:
        ENVS
    params:
        shardscope=SHARDSCOPE,
    shell:
        "{params.shardscope} verdict {input.results:q} --topology {input.topology:q} --out {output.json:q} >"
        " {log:q} 2>&1"


rule doctor:
    input:
        topology=rules.topology.output.json,
    output:
        json=DOCTOR,
    log:
        f"{RESULTS}/logs/diagnose/doctor.log",
    conda:
        ENVS
    resources:
        measure=1,  # never beside a timed job: it reads the kernel log and lspci of the node being measured
    params:
        shardscope=SHARDSCOPE,
    shell:
        "{params.shardscope} doctor --no-peer-check --topology {input.topology:q} --out {output.json:q} > {log:q} 2>&1"
