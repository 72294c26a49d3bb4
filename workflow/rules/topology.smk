checkpoint topology:
    output:
        json=f"{RESULTS}/topology/topology.json",
    log:
        f"{RESULTS}/logs/topology.log",
    params:
        shardscope=SHARDSCOPE,
        how=topology_args(),
    conda:
        ENVS
    shell:
        "{params.shardscope} topology {params.how} --out {output.json} 2> {log}"


checkpoint plan:
    input:
        topology=lambda wildcards: checkpoints.topology.get().output.json,
    output:
        json=f"{RESULTS}/plan/plan.json",
    log:
        f"{RESULTS}/logs/plan.log",
    params:
        shardscope=SHARDSCOPE,
        config=json.dumps(config, sort_keys=True),
    conda:
        ENVS
    shell:
        "{params.shardscope} plan --topology {input.topology} --config-json {params.config:q} --out {output.json} 2> {log}"
