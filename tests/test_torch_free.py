"""Commands that neither train nor measure run without importing torch or DeepSpeed.

Each command runs through :func:`shardscope.cli.main` in a fresh interpreter; afterwards the
interpreter reports whether ``torch`` or ``deepspeed`` reached ``sys.modules``. A module that
imports torch at its top, anywhere under these commands, fails the test by name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from factories import collective_doc, write_json, default_config_path

REPO = Path(__file__).resolve().parents[1]
TOPO = REPO / "tests" / "data" / "topo" / "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt"
GEN2 = REPO / "tests" / "data" / "nccl-tests" / "all_reduce_perf-gen2-2x8-h100-16ranks.txt"
CONFIG = default_config_path()
HEAVY = ("torch", "deepspeed")

_PROBE = """
import json, sys
from shardscope.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as exit_:  # --help
    rc = exit_.code
print(json.dumps({"rc": rc, "heavy": [m for m in %r if m in sys.modules]}), file=sys.stderr)
""" % (HEAVY,)


def run_torch_free(*argv: str | Path, cwd: Path) -> dict:
    """Run ``shardscope ARGV`` in a fresh interpreter; its exit status and the heavy modules it imported."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, *map(str, argv)], cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.stderr.strip(), proc.stdout
    return json.loads(proc.stderr.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A topology, a plan and an imported nccl-tests log, written by the commands under test."""
    folder = tmp_path_factory.mktemp("torch_free")
    out = {"topology": folder / "topology.json", "plan": folder / "plan.json", "rows": folder / "gen2.json"}
    for argv in (("topology", "parse", TOPO, "--out", out["topology"]),
                 ("plan", "--topology", out["topology"], "--config", CONFIG, "--out", out["plan"]),
                 ("collectives", "import", GEN2, "--out", out["rows"])):
        proc = subprocess.run([sys.executable, "-m", "shardscope", *map(str, argv)], cwd=folder, capture_output=True,
                              text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr
    out["folder"] = folder
    out["job"] = Path(write_json(folder / "all_reduce-ws2-local-default.json", collective_doc()))
    return out


COMMANDS = {
    "help": lambda f: ["--help"],
    "topology show --help": lambda f: ["topology", "show", "--help"],
    "topology parse": lambda f: ["topology", "parse", TOPO, "--out", f["folder"] / "t2.json"],
    "topology show": lambda f: ["topology", "show", f["topology"]],
    "plan": lambda f: ["plan", "--topology", f["topology"], "--config", CONFIG, "--out", f["folder"] / "p2.json"],
    "collectives import": lambda f: ["collectives", "import", GEN2, "--out", f["folder"] / "rows2.json"],
    "collectives report": lambda f: ["collectives", "report", f["job"]],
    "verdict": lambda f: ["verdict", f["rows"], "--topology", f["topology"]],
    "reference": lambda f: ["reference", "--db", f["folder"] / "reference" / "reference.duckdb"],
    "predict plan": lambda f: ["predict", "plan", "--topology", f["topology"], "--plan", f["plan"]],
    "advise": lambda f: ["advise", "--model", "gpt2-small", "--gpus", "8", "--topology", f["topology"]],
    "memory": lambda f: ["memory", "--model", "mistral-7b", "--gpus", "8", "--no-deepspeed-estimate"],
    "db schema": lambda f: ["db", "schema"],
    # the pipeline's doctor rule (its NCCL-variable check read them through the torch-importing device layer)
    "doctor": lambda f: ["doctor", "--no-peer-check", "--topology", f["topology"], "--out", f["folder"] / "doctor.json"],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_imports_neither_torch_nor_deepspeed(name: str, files: dict[str, Path]) -> None:
    result = run_torch_free(*COMMANDS[name](files), cwd=files["folder"])
    assert result["rc"] in (0, None), (name, result)
    assert result["heavy"] == [], f"`shardscope {name}` imported {result['heavy']}"


def test_figures_and_paper_import_neither(sample_db: Path, tmp_path: Path) -> None:
    figures = tmp_path / "figures"
    drawn = run_torch_free("figures", "--db", sample_db, "--out", figures, "--no-reference", cwd=tmp_path)
    assert drawn == {"rc": 0, "heavy": []}
    rendered = run_torch_free("paper", "--db", sample_db, "--figures", figures, "--source", REPO / "paper" / "report.md",
                              "--out", tmp_path / "report.html", "--no-reference", cwd=tmp_path)
    assert rendered == {"rc": 0, "heavy": []}


def test_the_probe_sees_a_heavy_import(tmp_path: Path) -> None:
    """The check can fail: `memory` with DeepSpeed's own estimator does import DeepSpeed (and torch)."""
    result = run_torch_free("memory", "--model", "tiny", "--gpus", "2", cwd=tmp_path)
    assert result["rc"] == 0
    assert "torch" in result["heavy"]


def test_accuracy_imports_neither(sample_db: Path, tmp_path: Path) -> None:
    assert run_torch_free("accuracy", "--db", sample_db, cwd=tmp_path) == {"rc": 0, "heavy": []}
