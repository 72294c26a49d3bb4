"""shardscope deployed the way Snakemake users deploy a workflow, and run end to end from there.

A copy of the repository stands for the user's clone; the README's "Deploy" block (snakedeploy with a
local path, then the module path made absolute) deploys it into a study folder of its own; the study
runs the default pipeline with the e2e test's reduced config, narrowed to one op and two strategies
(CI budget). One module-scoped run feeds the checks: results in the study folder, the package imported
from the workflow's source, `--report` and `--lint` from the study folder. Bad deployments (no config/,
a module given no config, a config failing the schema) stop before any job with one sentence.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from e2e.test_pipeline import reduced_config
from factories import query_db

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
STRATEGIES = ["ddp", "fsdp"]
#: What a clone holds besides the tracked files: never copied into the stand-in clone.
NOT_SOURCE = {".venv", ".git", ".snakemake", "results", "logs", ".pytest_cache", ".ruff_cache", "report.html", "build"}

pytestmark = pytest.mark.e2e


def clone_copy(dest: Path) -> Path:
    """The repository's source (no virtual environment, results or caches) at `dest`: the user's clone."""
    def ignore(folder: str, names: list[str]) -> set[str]:
        top = Path(folder).resolve() == REPO
        return {n for n in names if n == "__pycache__" or n.endswith(".egg-info") or (top and n in NOT_SOURCE)}

    shutil.copytree(REPO, dest, ignore=ignore)
    return dest


def readme_deploy_block() -> str:
    """The bash block of the README's "Deploy" section that the README says this test runs."""
    text = (REPO / "README.md").read_text()
    match = re.search(r"<!-- deploy-local:.*?-->\s*```bash\n(.*?)```", text, re.S)
    assert match, "README.md lost its deploy-local block"
    return match.group(1)


def snakedeploy_env() -> dict[str, str]:
    """The test interpreter's bin folder first on PATH (snakedeploy), no PYTHONPATH (the workflow sets it),
    bytecode written (the proof of where the jobs imported the package from)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def deploy(tmp: Path, clone: Path) -> Path:
    """Run the README's deploy block in `tmp` for the clone at `clone`; the study folder it made."""
    script = readme_deploy_block().replace("/path/to/shardscope", str(clone))
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp, env=snakedeploy_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return tmp / "my-study"


def write_config(study: Path) -> Path:
    """The deployed config/config.yaml with the reduced settings (results relative to the study folder)."""
    configfile = study / "config" / "config.yaml"
    config = yaml.safe_load(configfile.read_text())
    reduced = reduced_config(Path("results"))
    reduced["collectives"]["ops"] = ["all_reduce"]
    reduced["training"]["strategies"] = STRATEGIES
    # the shipped emulated.enabled (auto) builds network namespaces where root, ip and tc allow: a test changes the
    # machine only when asked (tests/emulated), and this one checks the deployment
    reduced["emulated"] = {**config.get("emulated", {}), "enabled": False}
    config.update(reduced)
    configfile.write_text(yaml.safe_dump(config))
    return configfile


def snakemake(study: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([*SNAKEMAKE, *args], cwd=study, env=snakedeploy_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    return clone_copy(tmp_path_factory.mktemp("clone") / "shardscope")


@pytest.fixture(scope="module")
def study(clone, tmp_path_factory) -> Path:
    study = deploy(tmp_path_factory.mktemp("deploy"), clone)
    write_config(study)
    run = snakemake(study, "--cores", "2")
    assert run.returncode == 0, run.stderr[-5000:]
    return study


def test_deploy_block_writes_a_module_of_the_clone(study, clone):
    snakefile = (study / "workflow" / "Snakefile").read_text()
    module = re.search(r'snakefile:\s*"([^"]+)"', snakefile).group(1)
    assert not Path(module).is_absolute()  # so that `snakemake --lint` in the study folder stays clean
    assert (study / "workflow" / module).resolve() == (clone / "workflow" / "Snakefile").resolve()
    assert "use rule * from shardscope" in snakefile
    assert (study / "config" / "README.md").read_text() == (clone / "config" / "README.md").read_text()
    assert (study / "profiles" / "default" / "config.yaml").exists()


def test_pipeline_writes_database_and_figures_in_the_study_folder(study, clone):
    results = study / "results"
    db = results / "shardscope.duckdb"
    assert sorted(r[0] for r in query_db(db, "SELECT strategy FROM training_runs WHERE outcome = 'ok'")) == STRATEGIES
    assert [r[0] for r in query_db(db, "SELECT DISTINCT op FROM collectives")] == ["all_reduce"]
    for name in ("busbw_vs_size", "allreduce_peak_vs_gpus", "memory_by_strategy", "speed_vs_ddp", "decision_map"):
        assert (results / "figures" / f"{name}.png").stat().st_size > 10_000
    assert "<table>" in (results / "paper" / "report.html").read_text()
    assert not (clone / "results").exists() and not (clone / ".snakemake").exists()


def test_jobs_import_the_package_from_the_workflows_source(study, clone):
    package = clone / "workflow" / "shardscope"
    # The copy had no bytecode; the rules' commands, the torchrun workers and the paper job left theirs.
    for sub in ("", "training", "collectives", "paper"):
        assert list((package / sub / "__pycache__").glob("*.pyc")), sub


def test_report_files_every_result_under_its_category_with_a_caption(study):
    run = snakemake(study, "--report", "report.html", timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    html = (study / "report.html").read_text()
    categories = json.loads(re.search(r"var categories = (\{.*?\});\n", html).group(1))
    filed = {category: sorted(Path(f).name for files in sub.values() for f in files) for category, sub in categories.items()}
    assert filed == {
        "Topology": ["topology.json"],
        "Collectives": ["allreduce_peak_vs_gpus.png", "busbw_vs_size.png"],
        "Training": ["speed_vs_ddp.png"],
        "Memory": ["memory_by_strategy.png"],
        "Model": ["decision_map.png"],
        "Report": ["report.html"],
    }
    assert "Figure 3. Memory per rank by strategy" in html and "shardscope measures which data-parallel" in html


def test_lint_is_clean_from_the_study_folder(study):
    run = snakemake(study, "--lint", timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Congratulations, your workflow is in a good condition!" in run.stdout + run.stderr


def module_snakefile(folder: Path, clone: Path, configfile: bool) -> Path:
    """A hand-written module deployment of the clone in `folder` (with or without a `configfile:` line), no config/."""
    load = 'configfile: "config/config.yaml"\n\n\n' if configfile else ""
    (folder / "Snakefile").write_text(
        f'{load}module shardscope:\n    snakefile:\n        "{clone}/workflow/Snakefile"\n    config:\n        config\n\n\n'
        "use rule * from shardscope\n")
    return folder


def test_missing_config_folder_stops_before_any_job_naming_the_file(clone, tmp_path):
    run = snakemake(module_snakefile(tmp_path, clone, configfile=True), "--cores", "1", timeout=300)
    assert run.returncode != 0
    assert "Workflow defines configfile config/config.yaml but it is not present" in run.stderr
    assert not (tmp_path / "results").exists()


def test_module_without_a_config_stops_before_any_job(clone, tmp_path):
    run = snakemake(module_snakefile(tmp_path, clone, configfile=False), "--cores", "1", timeout=300)
    assert run.returncode != 0
    assert "shardscope: no config was loaded; copy the workflow's config/ folder" in run.stderr
    assert not (tmp_path / "results").exists()


def test_config_failing_the_schema_stops_before_any_job_naming_the_key(study, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"results": str(tmp_path / "results"), "cpu": {"ranks": 0}}))
    run = snakemake(study, "--cores", "1", "--configfile", str(bad), timeout=300)
    assert run.returncode != 0
    assert "invalid config key cpu.ranks" in run.stderr
    assert not (tmp_path / "results").exists()
