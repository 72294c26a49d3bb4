"""pyproject.toml declares what the package imports, and imports what it declares.

Each third-party module the package imports (read with ast from workflow/shardscope, imports inside
functions included) belongs to a declared distribution (found through the installed packages'
metadata, so ``yaml`` is PyYAML and ``pynvml`` nvidia-ml-py); each declared distribution is imported
somewhere, or is one of :data:`NOT_IMPORTED`, each with the reason it is needed all the same.
"""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "workflow" / "shardscope"

#: Declared, never imported by the package, and why they are needed all the same.
NOT_IMPORTED = {
    "snakemake": "runs the workflow (Snakefile, workflow/rules)",
    "snakemake-executor-plugin-slurm": "Snakemake loads it for --profile profiles/slurm",
    "ninja": "the build tool torch runs to compile DeepSpeed's CPU ops (training/launch.py)",
}


def imported_modules(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Top-level third-party module -> the files that import it (absolute imports; stdlib and shardscope left out)."""
    found: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("shardscope", "__future__"):
                    found.setdefault(top, set()).add(str(path.relative_to(root)))
    return found


def declared() -> set[str]:
    """The canonical names of pyproject.toml's dependencies."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return {canonicalize_name(Requirement(d).name) for d in deps}


def test_every_third_party_import_is_declared() -> None:
    distributions = importlib.metadata.packages_distributions()
    undeclared = {}
    for module, files in imported_modules().items():
        names = {canonicalize_name(d) for d in distributions.get(module, [module])}
        if not names & declared():
            undeclared[module] = sorted(files)
    assert not undeclared, f"imported, not in pyproject.toml's dependencies: {undeclared}"


def test_every_declared_dependency_is_imported_or_says_why_not() -> None:
    distributions = importlib.metadata.packages_distributions()
    imported = {canonicalize_name(d) for module in imported_modules() for d in distributions.get(module, [module])}
    unused = declared() - imported - {canonicalize_name(n) for n in NOT_IMPORTED}
    assert not unused, f"declared in pyproject.toml, imported nowhere in workflow/shardscope: {sorted(unused)}"
    assert {canonicalize_name(n) for n in NOT_IMPORTED} <= declared()


def test_the_import_reader_finds_imports_inside_functions(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("import os\nfrom shardscope import x\ndef f():\n    import numpy.linalg\n")
    assert set(imported_modules(tmp_path)) == {"numpy"}
