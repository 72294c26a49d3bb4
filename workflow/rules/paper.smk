rule paper:
    input:
        figures=rules.figures.output.png,
        template="paper/report.md",
    output:
        report(f"{RESULTS}/paper/report.html", caption="../report/paper.rst", category="Report"),
    log:
        f"{RESULTS}/logs/paper.log",
    params:
        shardscope=SHARDSCOPE,
        db=DB,
        figures=lambda wildcards, input: os.path.dirname(input.figures[0]),
    conda:
        ENVS
    shell:
        "{params.shardscope} paper --db {params.db} --figures {params.figures} --source {input.template} --out {output} > {log} 2>&1"
