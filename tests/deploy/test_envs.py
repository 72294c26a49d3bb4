"""The conda environment files work from a deployed module, and their pip part resolves.

Conda cannot be installed here, so the files are checked with what can: their pip requirements are
parsed with `packaging`, compared with pyproject.toml and resolved against the environment the tests
run in (`envs/resolve.py` resolves them against PyPI; conda's own part is not solved, see envs/README.md).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]


def _resolver():
    """envs/resolve.py (a script beside the environment files, not a package module)."""
    spec = importlib.util.spec_from_file_location("envs_resolve", REPO / "envs" / "resolve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pip_requirements = _resolver().pip_requirements
ENV_FILES = sorted((REPO / "envs").glob("*.yaml"))


def test_there_is_an_environment_file():
    assert [p.name for p in ENV_FILES] == ["shardscope.yaml"]


@pytest.mark.parametrize("env_file", ENV_FILES, ids=lambda p: p.name)
def test_no_requirement_is_a_path_relative_to_the_callers_folder(env_file):
    for line in pip_requirements(env_file):
        assert not line.startswith(("-e", ".", "/", "file:", "-r", "-c")), f"{env_file.name}: {line}"
        Requirement(line)  # a name and a version range; a path or URL would not parse as one


#: pyproject.toml's dependencies that run the workflow, not its jobs: the job environment leaves them out.
WORKFLOW_RUNNER_ONLY = ("snakemake", "snakemake-executor-plugin-slurm")


def test_pip_part_is_the_projects_dependencies_less_the_workflow_runner():
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    for_jobs = [r for r in map(Requirement, declared) if r.name not in WORKFLOW_RUNNER_ONLY]
    listed = pip_requirements(REPO / "envs" / "shardscope.yaml")
    assert sorted(map(str, map(Requirement, listed))) == sorted(map(str, for_jobs))
    assert not {Requirement(line).name for line in listed} & set(WORKFLOW_RUNNER_ONLY)


@pytest.mark.parametrize("env_file", ENV_FILES, ids=lambda p: p.name)
def test_every_pip_requirement_is_met_by_the_test_environment(env_file):
    unmet = []
    for line in pip_requirements(env_file):
        requirement = Requirement(line)
        try:
            version = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            unmet.append(f"{line} (not installed)")
            continue
        if not requirement.specifier.contains(version, prereleases=True):
            unmet.append(f"{line} (installed {version})")
    assert not unmet, unmet


def test_pip_requirements_reads_the_pip_section(tmp_path):
    env = tmp_path / "env.yaml"
    env.write_text("channels: [conda-forge]\ndependencies:\n  - python>=3.11\n  - pip\n  - pip:\n      - torch>=2.4\n      - pyyaml>=6\n")
    assert pip_requirements(env) == ["torch>=2.4", "pyyaml>=6"]
    env.write_text("dependencies:\n  - python>=3.11\n")
    assert pip_requirements(env) == []
