"""The report. Rule paper renders it after the figures of a full run and owns the HTML; rule
paper_from_db (target it by name, `snakemake paper_from_db`, usually with figures_from_db) redraws
the figures and renders the report from an existing database alone, without scheduling any
experiment. Like figures_from_db it declares no outputs (it runs every time it is asked for, and
the files stay rule figures' and rule paper's, so the next `snakemake` finds them up to date)."""

#: The report template of this workflow's source (also when it runs as a module from another folder).
PAPER_TEMPLATE = (
    os.path.join(WORKFLOW_SOURCE, "paper", "report.md")
    if WORKFLOW_SOURCE
    else workflow.source_path("../../paper/report.md")
)
PAPER_HTML = f"{RESULTS}/paper/report.html"
PAPER_REPORT_ARGS = dict(caption="../report/paper.rst", category="Report", labels={"document": "shardscope report"})


rule paper:
    input:
        figures=rules.figures.output.png,
        index=rules.figures.output.index,
        manifest=rules.collect.output.manifest,  # names the current plan's runs (shardscope.results.selection)
        template=PAPER_TEMPLATE,
        reference=REFERENCE_DB,
        calibration=rules.step_calibration.output.json,  # the step ledger it shows (calibration.smk)
    output:
        html=report(PAPER_HTML, **PAPER_REPORT_ARGS),
    log:
        f"{RESULTS}/logs/paper.log",
    conda:
        ENVS
    params:
        shardscope=SHARDSCOPE,
        db=DB,
        figures=lambda wildcards, input: os.path.dirname(input.index),
    shell:
        "{params.shardscope} paper --db {params.db:q} --reference-db {input.reference:q} --figures {params.figures:q}"
        " --manifest {input.manifest:q} --source {input.template:q} --out {output.html:q} > {log:q} 2>&1"


rule paper_from_db:
    input:
        db=ancient(DB),
        reference=ancient(REFERENCE_DB),
        template=PAPER_TEMPLATE,
    log:
        f"{RESULTS}/logs/paper_from_db.log",
    conda:
        ENVS
    params:
        shardscope=SHARDSCOPE,
        figures=FIGURES_DIR,
        html=PAPER_HTML,
    shell:
        "( {params.shardscope} figures --db {input.db:q} --reference-db {input.reference:q} --out {params.figures:q}"
        " && {params.shardscope} paper --db {input.db:q} --reference-db {input.reference:q} --figures"
        " {params.figures:q}"
        " --source {input.template:q} --out {params.html:q} ) > {log:q} 2>&1"
