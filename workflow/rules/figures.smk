"""Figures: every figure from the database, with the reference stage's database attached.

Rule figures runs after collect in a full pipeline and owns the figure files. Rule
figures_from_db (target it by name, `snakemake figures_from_db`) redraws the same files from an
existing database alone and never schedules an experiment: its only inputs are the database and
the reference database (reference.smk's declared output; both ancient, so their age never
forces a rebuild). It declares no outputs, so it runs every time it is asked for, and it
never takes the figure files from rule figures: two rules claiming them would be ambiguous, and
Snakemake would record the redrawn files as another rule's, so the next `snakemake` would
redraw them again (and rerun the report and `all`) for a changed rule.
"""

import os

FIGURE_NAMES = ["busbw_vs_size", "allreduce_peak_vs_gpus", "memory_by_strategy", "speed_vs_ddp", "decision_map"]
FIGURE_LABELS = {
    "busbw_vs_size": "Bus bandwidth vs message size",
    "allreduce_peak_vs_gpus": "All-reduce peak vs GPU count",
    "memory_by_strategy": "Memory per rank by strategy",
    "speed_vs_ddp": "Throughput relative to DDP",
    "decision_map": "Decision map (modeled)",
}
FIGURES_DIR = f"{RESULTS}/figures"
#: Every file `shardscope figures` writes; the PNGs go into Snakemake's report with a caption
#: (question and computed answer) and labels. Each rule gets its own flagged copies.
FIGURE_FILES = {
    "pdf": [f"{FIGURES_DIR}/{name}.pdf" for name in FIGURE_NAMES],
    "data": [f"{FIGURES_DIR}/{name}.csv" for name in FIGURE_NAMES],
    "answers": [f"{FIGURES_DIR}/{name}.answer.rst" for name in FIGURE_NAMES],
    "index": f"{FIGURES_DIR}/figures.json",
}
#: The report category each figure is filed under (with Topology and Report, the categories of `snakemake --report`).
FIGURE_CATEGORIES = {
    "busbw_vs_size": "Collectives",
    "allreduce_peak_vs_gpus": "Collectives",
    "memory_by_strategy": "Memory",
    "speed_vs_ddp": "Training",
    "decision_map": "Model",
}
FIGURE_REPORT_ARGS = [
    dict(
        caption=f"../report/{name}.rst",
        category=FIGURE_CATEGORIES[name],
        # One label only: with two, Snakemake's report turns a second label that has two values in a category of
        # two results into a toggle, and the entry the toggle does not match has no result (Collectives stayed blank:
        # "TypeError ... reading 'mime_type'", issue 32).
        labels={"figure": f"{n}: {FIGURE_LABELS[name]}"},
    )
    for n, name in enumerate(FIGURE_NAMES, start=1)
]
FIGURE_PNGS = [f"{FIGURES_DIR}/{name}.png" for name in FIGURE_NAMES]


rule figures:
    input:
        manifest=rules.collect.output.manifest,
        reference=REFERENCE_DB,
    output:
        **FIGURE_FILES,
        png=[report(png, **args) for png, args in zip(FIGURE_PNGS, FIGURE_REPORT_ARGS)],
    log:
        f"{RESULTS}/logs/figures.log",
    conda:
        ENVS
    params:
        shardscope=SHARDSCOPE,
        db=DB,
        out=lambda wildcards, output: os.path.dirname(output.index),
    shell:
        "{params.shardscope} figures --db {params.db:q} --reference-db {input.reference:q} --manifest"
        " {input.manifest:q} --out {params.out:q} > {log:q} 2>&1"


rule figures_from_db:
    input:
        db=ancient(DB),
        reference=ancient(REFERENCE_DB),
    log:
        f"{RESULTS}/logs/figures_from_db.log",
    # Before paper_from_db when both are asked for, so that the report is written last and is
    # not older than the figures it embeds.
    priority: 10
    conda:
        ENVS
    params:
        shardscope=SHARDSCOPE,
        out=FIGURES_DIR,
    shell:
        "{params.shardscope} figures --db {input.db:q} --reference-db {input.reference:q} --out"
        " {params.out:q} > {log:q} 2>&1"
