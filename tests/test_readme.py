"""The README's shell blocks, run as a new user runs them, in a copy of the repository.

Every ```bash block of README.md is split into commands (``&&`` chains and ``\\``-continued lines
too) and each command is run, in README order, from a folder that links the repository's files
(Snakefile, workflow/, paper/, profiles/, envs/, .venv) and has its own ``config/config.yaml``
and ``results/``, so nothing is written into the repository. What is not run as written:

* installing (``python3 -m venv``, ``pip install``): .ci/run installs with the same commands,
  and this test runs inside the environment they made;
* ``python -m pytest``: the suite this test belongs to;
* the pipeline (``snakemake --cores all``) runs with a reduced config (one collective, DDP and
  FSDP, a few tiny steps: the same rules and stages as the default config in about a third of
  the time), written to the copy's ``config/config.yaml``, which the Snakefile reads;
* ``--profile profiles/slurm`` runs as a dry run (``-n``): submitting needs a Slurm cluster
  (tests/slurm runs the pipeline through that profile for real, when system tests are on);
* ``sbatch …``: needs a Slurm cluster; tests/slurm/test_real_slurm.py runs the same
  ``shardscope cluster launch`` across two nodes (here its ``--dry-run`` is checked to name
  that need in one sentence).

After the regeneration block, ``snakemake -n`` must have nothing to do: regenerating from the
database leaves the pipeline's own files up to date.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
#: What the copy links from the repository (read-only: the copy writes only config/, results/, .snakemake/).
LINKED = ("Snakefile", "workflow", "paper", "profiles", "envs", "pyproject.toml")

pytestmark = pytest.mark.e2e


def shell_blocks(text: str) -> list[str]:
    """The bodies of the ```bash blocks of a Markdown text, in order."""
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)


def commands(block: str) -> list[list[str]]:
    """The commands of one block: continued lines joined, comments dropped, ``&&`` chains split."""
    joined = re.sub(r"\\\n", " ", block)
    found: list[list[str]] = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        current: list[str] = []
        for word in [*words, "&&"]:
            if word == "&&":
                if current:
                    found.append(current)
                current = []
            else:
                current.append(word)
    return found


def reduced_config(repo: Path) -> dict:
    """The default config with a small CPU sizing: every stage runs, on fewer and shorter jobs."""
    config = yaml.safe_load((repo / "config" / "config.yaml").read_text())
    config["collectives"].update(ops=["all_reduce"], transports=["default"])
    config["training"].update(strategies=["ddp", "fsdp"])
    config["cpu"].update(sweep={"min_bytes": 1024, "max_bytes": 16384, "factor": 16, "warmup": 1, "iters": 2},
                         micro_batch=1, seq_len=16, warmup=1, steps=2)
    return config


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder that looks like a fresh clone with the reduced config, ``.venv`` being this interpreter's environment."""
    folder = tmp_path_factory.mktemp("clone")
    for name in LINKED:
        (folder / name).symlink_to(REPO / name)
    (folder / ".venv").symlink_to(sys.prefix)
    (folder / "config").mkdir()
    (folder / "config" / "config.yaml").write_text(yaml.safe_dump(reduced_config(REPO)))
    return folder


def run(words: list[str], cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(words, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False, env=env)


def how_to_run(words: list[str]) -> tuple[str, list[str] | None]:
    """(what is done with a README command, the command to run or None to leave it out)."""
    tool = Path(words[0]).name
    if tool in ("python3", "pip") or words[1:3] == ["-m", "venv"] or "install" in words[1:2]:
        return "installs (.ci/run does)", None
    if words[1:3] == ["-m", "pytest"]:
        return "is this test suite", None
    if tool == "sbatch":
        wrapped = shlex.split(words[words.index("--wrap") + 1])
        return "needs Slurm: its shardscope command, as a dry run", [*wrapped[:3], "--dry-run", *wrapped[3:]]
    if tool == "snakemake" and "--profile" in words:
        return "dry run (needs Slurm to submit)", [*words, "-n"]
    return "runs as written", words


def test_readme_has_the_commands_this_test_knows() -> None:
    every = [c for block in shell_blocks(README.read_text()) for c in commands(block)]
    tools = [Path(c[0]).name for c in every]
    assert tools.count("snakemake") >= 4 and tools.count("shardscope") >= 2 and "sbatch" in tools, tools


def test_every_readme_command_works_as_written(copy: Path) -> None:
    done: list[str] = []
    for block in shell_blocks(README.read_text()):
        for words in commands(block):
            what, command = how_to_run(words)
            if command is None:
                done.append(f"skipped ({what}): {shlex.join(words)}")
                continue
            proc = run(command, copy)
            output = (proc.stdout + proc.stderr)[-4000:]
            if what.startswith("needs Slurm"):  # outside an allocation: one sentence naming the need, exit 2
                assert proc.returncode == 2 and "needs a Slurm allocation" in proc.stderr, output
            else:
                assert proc.returncode == 0, f"{shlex.join(command)} ({what}) failed:\n{output}"
            done.append(f"{what}: {shlex.join(command)}")
        if "figures_from_db" in block:
            # regenerating from the database leaves the pipeline's files its own: nothing to rerun
            proc = run([str(copy / ".venv" / "bin" / "snakemake"), "-n"], copy)
            assert proc.returncode == 0 and "Nothing to be done" in proc.stdout + proc.stderr, proc.stdout[-3000:]
    print("\n".join(done))
    assert (copy / "results" / "paper" / "report.html").is_file() and (copy / "report.html").is_file()
    assert not list(copy.glob("*.json"))  # the sbatch command's --out was not written by the dry run
