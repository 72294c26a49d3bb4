FIGURE_NAMES = ["busbw_vs_size", "allreduce_peak_vs_gpus", "memory_by_strategy", "speed_vs_ddp"]


rule figures:
    input:
        manifest=rules.collect.output.manifest,
    output:
        png=[
            report(f"{RESULTS}/figures/{name}.png", caption=f"../report/{name}.rst", category="Figures")
            for name in FIGURE_NAMES
        ],
        pdf=[f"{RESULTS}/figures/{name}.pdf" for name in FIGURE_NAMES],
        data=[f"{RESULTS}/figures/{name}.csv" for name in FIGURE_NAMES],
    log:
        f"{RESULTS}/logs/figures.log",
    params:
        shardscope=SHARDSCOPE,
        db=DB,
        out=lambda wildcards, output: os.path.dirname(output.png[0]),
    conda:
        ENVS
    shell:
        "{params.shardscope} figures --db {params.db} --out {params.out} > {log} 2>&1"
