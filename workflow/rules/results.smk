rule collect:
    input:
        collectives=collective_results,
        training=training_results,
    output:
        manifest=f"{RESULTS}/db/collect.json",
    log:
        f"{RESULTS}/logs/collect.log",
    params:
        db=DB,
    conda:
        ENVS
    shell:
        "shardscope collect --db {params.db} --manifest {output.manifest} {input.collectives} {input.training} > {log} 2>&1"
