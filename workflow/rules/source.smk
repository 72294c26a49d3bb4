"""Where this workflow's own source lives, also when another folder uses it as a module.

WORKFLOW_SOURCE is the repository root as a local path (None where Snakemake reads the source from a
git host). Its package, workflow/shardscope, goes first on sys.path (for the Snakefile's imports) and
on PYTHONPATH (inherited by every job's shell and by jobs that re-read the Snakefile on another node),
so the rules run this source's code whether or not the package is installed."""

import os
import sys

from snakemake.sourcecache import LocalSourceFile

_RULES_DIR = workflow.current_basedir
WORKFLOW_SOURCE = (
    os.path.dirname(os.path.dirname(os.fspath(_RULES_DIR))) if isinstance(_RULES_DIR, LocalSourceFile) else None
)
if WORKFLOW_SOURCE:
    _PACKAGE_ROOT = os.path.join(WORKFLOW_SOURCE, "workflow")
    if _PACKAGE_ROOT not in sys.path:
        sys.path.insert(0, _PACKAGE_ROOT)
    _paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != _PACKAGE_ROOT]
    os.environ.update(PYTHONPATH=os.pathsep.join([_PACKAGE_ROOT, *_paths]))
