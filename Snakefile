# shardscope: which data-parallel strategy is fastest within memory on this machine, and why.
# Stages and their data contracts: docs/design.md; config keys: config/README.md.

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

from shardscope.config import validate_config
from shardscope.errors import UserError

min_version("9.19")


configfile: "config/config.yaml"


try:
    validate_config(config, workflow.source_path("workflow/schemas/config.schema.yaml"))
except UserError as error:
    raise WorkflowError(str(error)) from None


include: "workflow/rules/common.smk"
include: "workflow/rules/topology.smk"
include: "workflow/rules/collectives.smk"
include: "workflow/rules/training.smk"
include: "workflow/rules/emulated_common.smk"
include: "workflow/rules/emulated.smk"
include: "workflow/rules/predictions.smk"
include: "workflow/rules/diagnose.smk"
include: "workflow/rules/results.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/paper.smk"


rule all:
    input:
        rules.paper.output,
        rules.figures.output.pdf,
