"""No value from the config reaches a shell unquoted (issue 35): ``$(…)``, backticks and ``;`` in every path key.

The config's path keys (``results``, ``db``, ``topology.file``) all lie under a folder whose name is a
command three ways over. The topology and plan rules really run; then a dry run prints every rule's shell
command, and each must keep the hostile path one word. No marker file may appear.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
HOSTILE = "x$(touch pwned1)`touch pwned2`;touch pwned3;"
MARKERS = ("pwned1", "pwned2", "pwned3")


def _snakemake(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "workflow" / "Snakefile"),
                           "--configfile", "config.yaml", *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          check=False)


def _no_marker(*folders: Path) -> None:
    for folder in folders:
        assert not [m for m in MARKERS if (folder / m).exists()], f"a command in a config path ran in {folder}"


def test_shell_metacharacters_in_every_config_path_run_nothing(tmp_path: Path) -> None:
    folder = tmp_path / HOSTILE
    folder.mkdir()
    detect = subprocess.run([sys.executable, "-m", "shardscope", "topology", "detect", "--out", str(folder / "topo.json")],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert detect.returncode == 0, detect.stderr
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config.update(results=f"{HOSTILE}/results", db=f"{HOSTILE}/db/shardscope.duckdb",
                  topology={**config["topology"], "file": f"{HOSTILE}/topo.json"})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))

    ran = _snakemake(tmp_path, "--cores", "1", f"{HOSTILE}/results/plan/plan.json")
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert (folder / "results" / "plan" / "plan.json").exists()
    _no_marker(tmp_path, REPO)

    dry = _snakemake(tmp_path, "--dry-run", "--printshellcmds", "all")
    assert dry.returncode == 0, dry.stderr[-3000:]
    commands = [line.split("Shell command:", 1)[1] for line in (dry.stdout + dry.stderr).splitlines()
                if "Shell command:" in line and line.split("Shell command:", 1)[1].strip() != "None"]  # None: a run: block
    assert len(commands) >= 5, commands  # the jobs, collect, figures, paper …
    for command in commands:
        words = [w for w in shlex.split(command) if "pwned" in w]
        assert all(HOSTILE in w for w in words), command
    assert any(" collect " in c for c in commands) and any(" paper " in c for c in commands)
    _no_marker(tmp_path, REPO)
