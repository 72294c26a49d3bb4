"""Reference runs: the bundled public nccl-tests logs, loaded into their own database with the user's commands.

One rule, reference, runs the whole stage in one process (`shardscope reference`, which runs the
commands shardscope.reference.steps spells, in-process): `collectives import --reference` of each
log, `verdict` of each against the topology runs.json names for it, `predict collectives` on one
topology per fabric class (labelled for figure 2) and one `collect` of them all, so each verdict
links its run. Its log shows each command and what it printed. One job, not one per log: each
`shardscope` start costs about half a second, and the stage is two dozen short commands. Any
bundled file that changes reruns the stage (a few seconds). The database,
results/reference/reference.duckdb, is the stage's declared output; figures and the report
attach it and never build it.
"""

import importlib.resources
import os

from shardscope.results.reference_manifest import load_manifest, load_modeled
from shardscope.reference import steps

#: The bundled public runs, beside the package the rules run (the workflow's own source, or the installed package).
REFERENCE_SOURCE = str(importlib.resources.files("shardscope.figures").joinpath("reference"))
REFERENCE_MANIFEST = f"{REFERENCE_SOURCE}/runs.json"
REFERENCE_DIR_OUT = f"{RESULTS}/reference"
REFERENCE_DB = f"{REFERENCE_DIR_OUT}/reference.duckdb"
#: Runs by the stem of their log, modeled fabrics by the stem of their predictions document.
REFERENCE_RUNS = {run.stem: run for run in load_manifest(REFERENCE_SOURCE)}
REFERENCE_MODELED = {
    steps.modeled_name(fabric).removesuffix(".predictions.json"): fabric for fabric in load_modeled(REFERENCE_SOURCE)
}


localrules:
    reference,


#: The saved topology files the verdicts and the modeled fabrics read (presets read none).
REFERENCE_TOPOLOGIES = sorted(
    {
        path
        for spec in [run.topology for run in REFERENCE_RUNS.values()]
        + [fabric.topology for fabric in REFERENCE_MODELED.values()]
        for path in steps.topology_inputs(spec, REFERENCE_SOURCE)
    }
)


rule reference:
    input:
        manifest=REFERENCE_MANIFEST,
        logs=[f"{REFERENCE_SOURCE}/{run.file}" for run in REFERENCE_RUNS.values()],
        topologies=REFERENCE_TOPOLOGIES,
    output:
        documents=expand(f"{REFERENCE_DIR_OUT}/{{run}}.json", run=REFERENCE_RUNS),
        verdicts=expand(f"{REFERENCE_DIR_OUT}/{{run}}.verdicts.json", run=REFERENCE_RUNS),
        modeled=expand(f"{REFERENCE_DIR_OUT}/{{fabric}}.predictions.json", fabric=REFERENCE_MODELED),
        db=REFERENCE_DB,
        manifest=f"{REFERENCE_DIR_OUT}/collect.json",
    log:
        f"{RESULTS}/logs/reference/reference.log",
    conda:
        ENVS
    params:
        shardscope=SHARDSCOPE,
        source=lambda wildcards, input: os.path.dirname(input.manifest),
        docs=lambda wildcards, output: os.path.dirname(output.db),
    shell:
        "{params.shardscope} reference --db {output.db:q} --docs {params.docs:q} --source {params.source:q}"
        " --manifest {output.manifest:q} > {log:q} 2>&1"
