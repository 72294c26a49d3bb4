rule topology:
    output:
        json=report(f"{RESULTS}/topology/topology.json", caption="../report/topology.rst", category="Topology"),
    log:
        f"{RESULTS}/logs/topology.log",
    conda:
        ENVS
    resources:
        # with cluster.nodes > 1: an allocation of that many nodes, one probe task on each
        **topology_resources(),
    params:
        shardscope=SHARDSCOPE,
        how=topology_args(),
    shell:
        # topology.json plus raw/ (the probe text) beside it -- and, across nodes, nodes/<node>/
        # with each node's own; the log ends with a human summary.
        f"{{params.shardscope}} {topology_command()} {{params.how}} --out {{output.json:q}} 2> {{log:q}}"
        " && {params.shardscope} topology show {output.json:q} >> {log:q} 2>&1"


from shardscope.plan.planner import planner_config


# The plan also writes one spec file per job (results/plan/jobs/{id}.json, rewritten only when
# that job's spec changes): the job rules' inputs. Its params hold only the config keys the
# planner reads, so an edit elsewhere (a figure option, a disabled stage's settings) re-plans nothing.
checkpoint plan:
    input:
        topology=rules.topology.output.json,
    output:
        json=f"{RESULTS}/plan/plan.json",
    log:
        f"{RESULTS}/logs/plan.log",
    conda:
        ENVS
    params:
        shardscope=SHARDSCOPE,
        config=json.dumps(planner_config(config), sort_keys=True),
        jobs=f"{RESULTS}/plan/jobs",
    shell:
        "{params.shardscope} plan --topology {input.topology:q} --config-json {params.config:q} --out {output.json:q}"
        " --jobs-dir {params.jobs:q} 2> {log:q}"
