rule collect:
    input:
        # the topology.json the plan was made from, loaded with the results (one topology row per node)
        topology=rules.topology.output.json,
        collectives=collective_results,
        training=training_results,
        # micro-batch searches (table search_trials) and each searched job at its best micro-batch (training runs)
        search=search_results,
        best=best_results,
        emulated=emulated_results,
        peers=nccl_tests_peer_results,
        # modeled numbers for the same jobs (planned, and as they ran), the verdicts and doctor findings
        # (workflow/rules/predictions.smk, diagnose.smk)
        predictions=rules.predictions.output.json,
        run_predictions=rules.run_predictions.output.json,
        diagnose=diagnose_results,
    output:
        manifest=f"{RESULTS}/db/collect.json",
    log:
        f"{RESULTS}/logs/collect.log",
    conda:
        ENVS
    params:
        shardscope=SHARDSCOPE,
        db=DB,
    shell:
        "{params.shardscope} collect --db {params.db:q} --manifest {output.manifest:q}"
        " {input.topology:q} {input.collectives:q} {input.training:q} {input.search:q} {input.best:q}"
        " {input.emulated:q} {input.peers:q}"
        " {input.predictions:q} {input.run_predictions:q} {input.diagnose:q} > {log:q} 2>&1"
