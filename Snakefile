# shardscope: which data-parallel strategy is fastest within memory on this machine, and why.
# Stages and their data contracts: docs/design.md; config keys: config/README.md.

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

min_version("9.19")


# WORKFLOW_SOURCE, and this source's package first on sys.path and the jobs' PYTHONPATH (module use).
include: "workflow/rules/source.smk"


try:
    from shardscope.config import validate_config
    from shardscope.errors import UserError
except ModuleNotFoundError as error:
    if error.name != "shardscope":
        raise
    raise WorkflowError(
        "shardscope: the package is not importable (the workflow source is not a local folder); install it into "
        "Snakemake's environment at the workflow's version: pip install 'shardscope @ git+<repository URL>@<tag>'"
    ) from None


configfile: "config/config.yaml"


# The landing page of `snakemake --report`: what the workflow answers, with links to the report and the figures.
report: "workflow/report/workflow.rst"


if not config:
    raise WorkflowError(
        "shardscope: no config was loaded; copy the workflow's config/ folder next to your Snakefile and load "
        "config/config.yaml (configfile: in a module deployment, or --configfile)"
    )
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
include: "workflow/rules/calibration.smk"
include: "workflow/rules/reference.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/paper.smk"


rule all:
    input:
        search_results,
        rules.paper.output,
        rules.figures.output.pdf,
