"""Reference runs: the bundled public nccl-tests logs, loaded into their own database with the user's commands.

One rule per step, each running the command a user runs on their own logs
(shardscope.reference.steps spells them): reference_import (`collectives import --reference`,
one per log), reference_verdict (`verdict` against the topology runs.json names for the run),
reference_modeled (`predict collectives` on one topology per fabric class, labelled for figure
2) and reference_db (one `collect` of them all, so each verdict links its run). The database,
results/reference/reference.duckdb, is the stage's declared output; figures and the report
attach it and never build it.
"""

import importlib.resources
import re
import shlex

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

#: Wildcard constraints: a run or modeled fabric is one of these stems, never another reference file.
REFERENCE_RUN_STEMS = "|".join(re.escape(stem) for stem in sorted(REFERENCE_RUNS))
REFERENCE_MODELED_STEMS = "|".join(re.escape(stem) for stem in sorted(REFERENCE_MODELED))


localrules:
    reference_import,
    reference_verdict,
    reference_modeled,
    reference_db,


rule reference_import:
    input:
        log=lambda wildcards: f"{REFERENCE_SOURCE}/{REFERENCE_RUNS[wildcards.run].file}",
        manifest=REFERENCE_MANIFEST,
    output:
        f"{REFERENCE_DIR_OUT}/{{run}}.json",
    log:
        f"{RESULTS}/logs/reference/{{run}}.import.log",
    wildcard_constraints:
        run=REFERENCE_RUN_STEMS,
    conda:
        ENVS
    params:
        shardscope=SHARDSCOPE,
        command=lambda wildcards, output: shlex.join(
            steps.import_command(REFERENCE_RUNS[wildcards.run], REFERENCE_SOURCE, output[0])
        ),
    shell:
        "{params.shardscope} {params.command} > {log} 2>&1"


rule reference_verdict:
    input:
        document=rules.reference_import.output[0],
        topology=lambda wildcards: steps.topology_inputs(REFERENCE_RUNS[wildcards.run].topology, REFERENCE_SOURCE),
    output:
        f"{REFERENCE_DIR_OUT}/{{run}}.verdicts.json",
    log:
        f"{RESULTS}/logs/reference/{{run}}.verdict.log",
    wildcard_constraints:
        run=REFERENCE_RUN_STEMS,
    conda:
        ENVS
    params:
        shardscope=SHARDSCOPE,
        command=lambda wildcards, input, output: shlex.join(
            steps.verdict_command(REFERENCE_RUNS[wildcards.run], REFERENCE_SOURCE, input.document, output[0])
        ),
    shell:
        "{params.shardscope} {params.command} > {log} 2>&1"


rule reference_modeled:
    input:
        manifest=REFERENCE_MANIFEST,
        topology=lambda wildcards: steps.topology_inputs(REFERENCE_MODELED[wildcards.fabric].topology, REFERENCE_SOURCE),
    output:
        f"{REFERENCE_DIR_OUT}/{{fabric}}.predictions.json",
    log:
        f"{RESULTS}/logs/reference/{{fabric}}.predict.log",
    wildcard_constraints:
        fabric=REFERENCE_MODELED_STEMS,
    conda:
        ENVS
    params:
        shardscope=SHARDSCOPE,
        command=lambda wildcards, output: shlex.join(
            steps.modeled_command(REFERENCE_MODELED[wildcards.fabric], REFERENCE_SOURCE, output[0])
        ),
    shell:
        "{params.shardscope} {params.command} > {log} 2>&1"


rule reference_db:
    input:
        documents=expand(rules.reference_import.output[0], run=REFERENCE_RUNS),
        verdicts=expand(rules.reference_verdict.output[0], run=REFERENCE_RUNS),
        modeled=expand(rules.reference_modeled.output[0], fabric=REFERENCE_MODELED),
    output:
        db=REFERENCE_DB,
        manifest=f"{REFERENCE_DIR_OUT}/collect.json",
    log:
        f"{RESULTS}/logs/reference/collect.log",
    conda:
        ENVS
    params:
        shardscope=SHARDSCOPE,
        command=lambda wildcards, input, output: shlex.join(
            steps.collect_command(output.db, [*input.documents, *input.verdicts, *input.modeled], output.manifest)
        ),
    shell:
        "{params.shardscope} {params.command} > {log} 2>&1"
