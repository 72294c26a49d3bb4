"""The layering contract of the package, read from the code's own imports (ast, nothing is imported).

1. Workers and launchers (collectives, training, emulated, cluster, device) never import the
   figures, the paper or the results database.
2. Figures and the paper import only the results stage, the contracts, errors and fileio
   (and each other: the report embeds the figures and their captions): they query the
   database, they never compute or measure.
3. Planning, parsing, modeling, storing and drawing never import torch or DeepSpeed at module
   level, directly or through another shardscope module (an import inside a function is lazy,
   paid only by the call that needs it, and allowed).
4. Each concept has one home (issue 34): the training worker imports no model module (``costmodel``),
   and the results stage imports neither the training worker nor the collective benchmark (the
   vocabulary they share lives in ``contracts``), lazily or not.
5. The packages form a row of stages: no loop of imports between packages, counting every import
   (lazy ones too: a loop through a function is still two stages that each need the other).

Known violations that other work removes are listed in :data:`PENDING` with the reason; an entry
that no longer occurs fails the test too, so the list only shrinks.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "workflow" / "shardscope"
HEAVY = ("torch", "deepspeed")
WORKERS = ("collectives", "training", "emulated", "cluster", "device")
READERS = ("figures", "paper")
READERS_MAY_IMPORT = ("results", "contracts", "errors", "fileio")
#: Stages that plan, parse, model, store or draw (rule 3).
TORCH_FREE = ("contracts", "plan", "topology", "costmodel", "diagnose", "results", "figures", "paper", "jobs",
              "reference", "config", "settings", "cli", "errors", "fileio", "buildenv")

#: (importer, imported) pairs that break rule 2 today, and what removes them: none left; a new one needs its reason here.
PENDING: dict[tuple[str, str], str] = {}
#: Rule 4: (stage, stages it must never import).
NEVER_IMPORTS = {"training": ("costmodel",), "results": ("training", "collectives")}
#: (importer module, imported module) pairs that break rule 4 today, and what removes them.
PENDING_HOMES: dict[tuple[str, str], str] = {}
#: (importer stage, imported stage) imports that close a loop between packages today (rule 5), and what removes them.
PENDING_LOOPS: dict[tuple[str, str], str] = {
    ("training", "plan"): "training/search.py holds the planner's search rule beside the runner (issue 34, job-spec part)",
    ("training", "jobs"): "training/search.py runs planned jobs through jobs.run (issue 34, job-spec part)",
    ("collectives", "reference"): "`collectives import --reference` labels a log with the reference stage's manifest",
}


@dataclass(frozen=True)
class Import:
    """One import statement of a module: what it names, and whether it runs when the module is imported."""

    module: str
    target: str
    top_level: bool


def module_name(path: Path, root: Path = PACKAGE) -> str:
    """``shardscope.a.b`` for ``root/a/b.py`` (``shardscope.a`` for ``a/__init__.py``)."""
    parts = ["shardscope", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(source: str, module: str) -> list[Import]:
    """Every import in ``source``; ``top_level`` unless inside a function or an ``if TYPE_CHECKING:`` block."""
    found: list[Import] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend(Import(module, alias.name, top) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                found.append(Import(module, child.module, top))
                # `from shardscope.x import y` may name the submodule y
                found.extend(Import(module, f"{child.module}.{alias.name}", top) for alias in child.names
                             if child.module.startswith("shardscope"))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, False)
            elif isinstance(child, ast.If) and _is_type_checking(child):
                visit(child, False)
            else:
                visit(child, top)

    visit(ast.parse(source), True)
    return found


def package_imports(root: Path = PACKAGE) -> dict[str, list[Import]]:
    """The imports of every module of the package, by module name."""
    return {module_name(p, root): imports_of(p.read_text(encoding="utf-8"), module_name(p, root))
            for p in sorted(root.rglob("*.py"))}


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _internal(target: str, modules: dict[str, list[Import]]) -> str | None:
    """The shardscope module an import target names (a name imported from a module maps to that module)."""
    while target.startswith("shardscope"):
        if target in modules:
            return target
        target = target.rpartition(".")[0]
    return None


def worker_violations(modules: dict[str, list[Import]]) -> set[tuple[str, str]]:
    """Rule 1: (worker module, figures/paper/results module) pairs."""
    return {(imp.module, hit) for imps in modules.values() for imp in imps
            if _stage(imp.module) in WORKERS and (hit := _internal(imp.target, modules))
            and _stage(hit) in (*READERS, "results")}


def reader_violations(modules: dict[str, list[Import]]) -> set[tuple[str, str]]:
    """Rule 2: (figures/paper module, module outside results/contracts/errors/fileio) pairs."""
    bad = set()
    for imps in modules.values():
        for imp in imps:
            hit = _internal(imp.target, modules)
            if _stage(imp.module) in READERS and hit and hit != "shardscope" \
                    and _stage(hit) not in (*READERS_MAY_IMPORT, *READERS):
                bad.add((imp.module, hit))
    return bad


def heavy_chain(module: str, modules: dict[str, list[Import]]) -> list[str] | None:
    """Rule 3: the chain of module-level imports from ``module`` to torch or DeepSpeed, or None."""
    seen = {module}
    frontier = [[module]]
    while frontier:
        chain = frontier.pop(0)
        for imp in modules.get(chain[-1], []):
            if not imp.top_level:
                continue
            if imp.target.split(".")[0] in HEAVY:
                return [*chain, imp.target]
            hit = _internal(imp.target, modules)
            if hit and hit not in seen:
                seen.add(hit)
                frontier.append([*chain, hit])
    return None


def home_violations(modules: dict[str, list[Import]]) -> set[tuple[str, str]]:
    """Rule 4: (module, imported module) pairs where a stage imports one it must never import."""
    return {(imp.module, hit) for imps in modules.values() for imp in imps
            if (hit := _internal(imp.target, modules)) and _stage(hit) in NEVER_IMPORTS.get(_stage(imp.module), ())}


def stage_graph(modules: dict[str, list[Import]], leave_out: set[tuple[str, str]] = frozenset()) -> dict[str, set[str]]:
    """Which stage imports which (every import, lazy ones too), less the ``leave_out`` pairs."""
    graph: dict[str, set[str]] = {}
    for imps in modules.values():
        for imp in imps:
            hit = _internal(imp.target, modules)
            edge = (_stage(imp.module), _stage(hit) if hit else "")
            if hit and all(edge) and edge[0] != edge[1] and edge not in leave_out:
                graph.setdefault(edge[0], set()).add(edge[1])
    return graph


def import_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every loop of stages: the strongly connected components of more than one stage (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    loops: list[list[str]] = []

    def visit(stage: str) -> None:
        index[stage] = low[stage] = len(index)
        stack.append(stage)
        for other in sorted(graph.get(stage, ())):
            if other not in index:
                visit(other)
                low[stage] = min(low[stage], low[other])
            elif other in stack:
                low[stage] = min(low[stage], index[other])
        if low[stage] == index[stage]:
            loop = []
            while not loop or loop[-1] != stage:
                loop.append(stack.pop())
            if len(loop) > 1:
                loops.append(sorted(loop))

    for stage in sorted(graph):
        if stage not in index:
            visit(stage)
    return sorted(loops)


MODULES = package_imports()


def test_workers_never_import_figures_paper_or_results() -> None:
    assert worker_violations(MODULES) == set()


def test_figures_and_paper_import_only_results_and_contracts() -> None:
    found = reader_violations(MODULES)
    assert found - set(PENDING) == set(), "new imports that break the layering"
    assert set(PENDING) - found == set(), "PENDING lists imports that are gone: remove them from the list"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _stage(m) in TORCH_FREE))
def test_torch_free_stages_never_import_torch_at_module_level(module: str) -> None:
    assert heavy_chain(module, MODULES) is None, " -> ".join(heavy_chain(module, MODULES) or [])


def test_each_concept_has_one_home() -> None:
    found = home_violations(MODULES)
    assert found - set(PENDING_HOMES) == set(), "a stage imports one it must never import"
    assert set(PENDING_HOMES) - found == set(), "PENDING_HOMES lists imports that are gone: remove them from the list"


def test_no_loop_of_imports_between_packages() -> None:
    assert import_loops(stage_graph(MODULES, set(PENDING_LOOPS))) == []
    present = {(a, b) for a, targets in stage_graph(MODULES).items() for b in targets}
    assert set(PENDING_LOOPS) - present == set(), "PENDING_LOOPS lists imports that are gone: remove them from the list"


def test_the_loop_and_home_checkers_catch_violations(tmp_path: Path) -> None:
    """A loop through a lazy import, and a worker that imports a model, are found (so the tests above can fail)."""
    root = tmp_path / "shardscope"
    for name, text in {
        "__init__.py": "", "costmodel/__init__.py": "", "results/__init__.py": "", "training/__init__.py": "",
        "costmodel/ledger.py": "from shardscope.results.ledger import summarize\n",
        "results/ledger.py": "def f():\n    from shardscope.costmodel import modeled\n",
        "costmodel/modeled.py": "", "training/worker.py": "from shardscope.costmodel.modeled import block\n",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    modules = package_imports(root)
    assert import_loops(stage_graph(modules)) == [["costmodel", "results"]]
    assert import_loops(stage_graph(modules, {("results", "costmodel")})) == []
    assert home_violations(modules) == {("shardscope.training.worker", "shardscope.costmodel.modeled")}


def test_the_checker_catches_violations(tmp_path: Path) -> None:
    """Each rule fails on a module written to break it (so the tests above can fail)."""
    root = tmp_path / "shardscope"
    for name, text in {
        "__init__.py": "",
        "results/__init__.py": "", "results/store.py": "",
        "training/__init__.py": "", "training/worker.py": "from shardscope.results.store import x\n",
        "training/model.py": "import torch\n",
        "figures/__init__.py": "", "figures/plots.py": "def f():\n    from shardscope.training import model\n",
        "plan/__init__.py": "", "plan/planner.py": "from shardscope.training.model import GPT\n",
        "plan/lazy.py": "def f():\n    import torch\n",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    modules = package_imports(root)
    assert worker_violations(modules) == {("shardscope.training.worker", "shardscope.results.store")}
    assert ("shardscope.figures.plots", "shardscope.training.model") in reader_violations(modules)
    assert heavy_chain("shardscope.plan.planner", modules) == [
        "shardscope.plan.planner", "shardscope.training.model", "torch"]
    assert heavy_chain("shardscope.plan.lazy", modules) is None
