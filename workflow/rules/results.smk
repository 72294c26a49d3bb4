rule collect:
    input:
        # the topology.json the plan was made from, loaded with the results (one topology row per node)
        topology=lambda wildcards: checkpoints.topology.get().output.json,
        collectives=collective_results,
        training=training_results,
        emulated=emulated_results,
        peers=nccl_tests_peer_results,
    output:
        manifest=f"{RESULTS}/db/collect.json",
    log:
        f"{RESULTS}/logs/collect.log",
    params:
        shardscope=SHARDSCOPE,
        db=DB,
    conda:
        ENVS
    shell:
        "{params.shardscope} collect --db {params.db} --manifest {output.manifest}"
        " {input.topology} {input.collectives} {input.training} {input.emulated} {input.peers} > {log} 2>&1"
