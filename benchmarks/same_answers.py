"""Do two versions of the code give the same answers? ``plan``, ``advise`` and ``predict``, output for output.

    nice .venv/bin/python benchmarks/same_answers.py REF [--presets hgx-h100,h100-nvl-pairs,pcie-l40s]

Checks REF (any git ref) out into a temporary worktree and runs, with PYTHONPATH pointing at that
tree and then at this working tree, on every saved topology of ``tests/data/topo/`` and a few
machine presets:

- ``shardscope plan --json`` (saved topologies; the pipeline's ``config/config.yaml``),
- ``shardscope advise --json`` (llama-1b on 2 GPUs, mistral-7b on 8),
- ``shardscope predict collectives --json``,
- ``shardscope predict plan --json`` on each version's own plan of the topology.

Both versions read the same input files (this working tree's) and write their plans under the same
relative name, each in its own folder, so only the code differs. Per output (exit status, stdout and stderr together) it prints ``identical`` or the
first line that differs. One field is set aside before comparing and said so: ``created_at`` of a
predictions document (the time it was made). Exit status 1 when any output differs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOPOLOGIES = sorted(p for p in (REPO / "tests" / "data" / "topo").iterdir() if p.suffix == ".txt")
CONFIG = REPO / "config" / "config.yaml"
ADVICE = (("llama-1b", "2"), ("mistral-7b", "8"))
_CREATED_AT = re.compile(r'"created_at": "[^"]*"')


@contextlib.contextmanager
def checked_out(ref: str) -> Iterator[Path]:
    """A temporary worktree of ``ref`` (removed afterwards)."""
    folder = Path(tempfile.mkdtemp(prefix="same-answers."))
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(folder), ref], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(folder)], check=False)


def run(tree: Path, argv: list[str], cwd: Path) -> str:
    """Exit status, stdout and stderr of ``shardscope ARGV`` run from ``tree``'s package, with volatile fields set aside."""
    env = dict(os.environ, PYTHONPATH=str(tree / "workflow"))
    proc = subprocess.run([sys.executable, "-m", "shardscope", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    text = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    return _CREATED_AT.sub('"created_at": "(set aside)"', text)


def cases(presets: list[str]) -> list[tuple[str, list[str]]]:
    """(name, argv) of every output compared; ``{plan}`` in an argv is the version's own plan of that topology."""
    found: list[tuple[str, list[str]]] = []
    for topo in TOPOLOGIES:
        name = topo.stem[:24]
        found.append((f"plan --json {name}", ["plan", "--topology", str(topo), "--config", str(CONFIG), "--json",
                                              "--out", "{plan}"]))
        found.append((f"predict plan {name}", ["predict", "plan", "--topology", str(topo), "--plan", "{plan}",
                                               "--json"]))
    for spec in [str(t) for t in TOPOLOGIES] + [f"preset:{p}" for p in presets]:
        name = Path(spec).stem[:24] if not spec.startswith("preset:") else spec
        for model, gpus in ADVICE:
            found.append((f"advise {model} {gpus} {name}", ["advise", "--model", model, "--gpus", gpus, "--topology",
                                                             spec, "--json"]))
        found.append((f"predict collectives {name}", ["predict", "collectives", "--topology", spec, "--json"]))
    return found


def first_difference(before: str, after: str) -> str:
    """``identical``, or the first line where the two outputs part."""
    if before == after:
        return "identical"
    a, b = before.splitlines(), after.splitlines()
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"differs at line {i + 1}:\n      ref:  {x[:200]}\n      tree: {y[:200]}"
    return f"differs in length: ref {len(a)} lines, tree {len(b)} lines"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ref", help="the git ref to compare this working tree with (e.g. main, 86845de)")
    parser.add_argument("--presets", default="hgx-h100,h100-nvl-pairs,pcie-l40s",
                        help="comma-separated machine presets also compared (advise, predict collectives)")
    args = parser.parse_args()
    todo = cases([p for p in args.presets.split(",") if p])
    differ = 0
    with checked_out(args.ref) as ref_tree, tempfile.TemporaryDirectory(prefix="same-answers-run.") as tmp:
        for label in ("ref", "tree"):
            (Path(tmp) / label).mkdir()
        for name, argv in todo:
            outputs = []
            topo = next((t for t in TOPOLOGIES if t.stem[:24] in name), None)
            plan = f"{topo.stem if topo else 'none'}.plan.json"  # the same relative name in each version's own folder
            for label, tree in (("ref", ref_tree), ("tree", REPO)):
                outputs.append(run(tree, [plan if a == "{plan}" else a for a in argv], Path(tmp) / label))
            verdict = first_difference(*outputs)
            differ += verdict != "identical"
            print(f"{name:<58} {verdict}", flush=True)
    print(f"{len(todo) - differ} of {len(todo)} outputs identical between {args.ref} and the working tree "
          "(created_at of predictions documents set aside)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
