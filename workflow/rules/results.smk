rule collect:
    input:
        collectives=collective_results,
        training=training_results,
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
        "{params.shardscope} collect --db {params.db} --manifest {output.manifest} {input.collectives} {input.training} > {log} 2>&1"
