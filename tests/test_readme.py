"""The README's shell blocks, run as a new user runs them, in a copy of the repository.

Every ```bash block of README.md is split into commands (``&&`` chains and ``\\``-continued lines
too) and each command is run, in README order, from a folder that links the repository's files
(Snakefile, workflow/, paper/, profiles/, envs/, .venv) and has its own ``config/config.yaml``,
so nothing is written into the repository. The run (:func:`run_readme`) is the last test of
tests/e2e/test_pipeline.py: it reuses that module's pipeline run instead of paying for a second
one, the copy's ``results`` being that run's folder. What is not run as written:

* installing (``python3 -m venv``, ``pip install``): .ci/run installs with the same commands,
  and the tests run inside the environment they made;
* ``python -m pytest``: the suite this test belongs to;
* the pipeline, ``snakemake --cores all``, runs with tests/e2e's reduced config (every rule of
  the default config's CPU plan, on tiny sizes) in the copy's ``config/config.yaml``, which the
  Snakefile reads; after the e2e run it has nothing left to do, which it checks;
* ``--profile profiles/slurm`` runs as a dry run (``-n``): submitting needs a Slurm cluster
  (tests/slurm runs the pipeline through that profile for real, with SHARDSCOPE_SYSTEM_TESTS=1);
* ``sbatch …``: needs a Slurm cluster; tests/slurm/test_real_slurm.py runs the same
  ``shardscope cluster launch`` across two nodes by hand; here its ``--dry-run`` must say, in one
  sentence with exit status 2, that it needs an allocation.

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

import yaml
from factories import default_config, merged_config

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
#: What the copy links from the repository (read-only: the copy writes only config/, results/, .snakemake/).
LINKED = ("Snakefile", "workflow", "paper", "profiles", "envs", "pyproject.toml")

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


def make_copy(folder: Path, results: Path, config: dict) -> Path:
    """``folder`` made to look like a fresh clone: the repository's files linked, ``.venv`` this
    interpreter's environment, ``config/config.yaml`` = ``config`` with results in ``results/``
    (a link to ``results``)."""
    for name in LINKED:
        (folder / name).symlink_to(REPO / name)
    (folder / ".venv").symlink_to(sys.prefix)
    (folder / "results").symlink_to(results)
    (folder / "config").mkdir()
    merged = merged_config(default_config(), config)
    merged.update(results="results", db="results/shardscope.duckdb")
    (folder / "config" / "config.yaml").write_text(yaml.safe_dump(merged))
    return folder


def run(words: list[str], cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(words, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False, env=env)


#: The README's deploy block sets shell variables and deploys into a new folder: tests/deploy/test_module.py
#: runs that block as written (with the clone's path filled in), so this test leaves it to that one.
DEPLOY_BLOCK = "the deploy block (tests/deploy/test_module.py runs it as written)"


def how_to_run(words: list[str]) -> tuple[str, list[str] | None]:
    """(what is done with a README command, the command to run or None to leave it out)."""
    tool = Path(words[0]).name
    if "=" in words[0] or tool in ("snakedeploy", "sed"):  # the Deploy section's shell block
        return DEPLOY_BLOCK, None
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
    ran = {how_to_run(c)[0] for c in every}
    assert ran <= {"installs (.ci/run does)", "is this test suite", "runs as written", "dry run (needs Slurm to submit)",
                   "needs Slurm: its shardscope command, as a dry run", DEPLOY_BLOCK}, ran


def test_commands_split_chains_continuations_and_comments() -> None:
    block = "a x && b 'y z' # note\nc \\\n  --flag \"q w\"\n# only a comment\n"
    assert commands(block) == [["a", "x"], ["b", "y z"], ["c", "--flag", "q w"]]


#: Rules that measure: none of them may rerun on a finished pipeline. (The topology probe and the plan may:
#: in the copy their commands name the copy's interpreter, and the planner rewrites no unchanged job spec.)
MEASURING_RULES = {"collective", "train", "nccl_tests_peer",
                   "emulated_collective", "emulated_train"}


def run_readme(folder: Path, results: Path, config: dict) -> list[str]:
    """Run every README command in a copy of the repository whose results are ``results`` (a
    finished pipeline run with ``config``); what was done with each, for the test's output."""
    copy = make_copy(folder, results, config)
    snakemake = str(copy / ".venv" / "bin" / "snakemake")
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
            if command[1:] == ["--cores", "all"]:  # the pipeline: already run by the e2e fixture
                # in this copy the interpreter and the workflow's own files (report template, bundled reference logs)
                # have new absolute paths, so the probe, the plan and the bookkeeping rules may run again; no measurement may
                rerun = re.findall(r"^(?:local)?(?:rule|checkpoint) (\w+):", proc.stdout + proc.stderr, flags=re.M)
                assert not set(rerun) & MEASURING_RULES, output
            done.append(f"{what}: {shlex.join(command)}")
        if "figures_from_db" in block:
            # regenerating from the database leaves the pipeline's files its own: nothing to rerun
            proc = run([snakemake, "-n"], copy)
            assert proc.returncode == 0 and "Nothing to be done" in proc.stdout + proc.stderr, proc.stdout[-3000:]
    assert (copy / "results" / "paper" / "report.html").is_file() and (copy / "report.html").is_file()
    assert not list(copy.glob("*.json"))  # the sbatch command's --out was not written by the dry run
    return done


def test_merge_is_key_by_key() -> None:
    assert merged_config({"a": {"b": 1, "c": 2}, "d": 3}, {"a": {"c": 4}, "e": 5}) == {"a": {"b": 1, "c": 4}, "d": 3, "e": 5}
