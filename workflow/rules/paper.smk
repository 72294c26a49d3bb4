rule paper:
    input:
        figures=rules.figures.output.png,
        template="paper/report.md",
    output:
        report(f"{RESULTS}/paper/report.html", caption="../report/paper.rst", category="Report"),
    log:
        f"{RESULTS}/logs/paper.log",
    params:
        db=DB,
        figures=f"{RESULTS}/figures",
    conda:
        ENVS
    shell:
        "shardscope paper --db {params.db} --figures {params.figures} --source {input.template} --out {output} > {log} 2>&1"
