"""A saved topology (config topology.file) is refused where its GPUs are not: one sentence, before any job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from shardscope.topology.saved import saved_topology_problem
from factories import default_config, snakemake_words, workflow_folder

REPO = Path(__file__).resolve().parents[2]
EIGHT = REPO / "tests" / "data" / "topo" / "01-hgx-h200-nvswitch-nv18-12nics.txt"


def test_eight_saved_gpus_on_a_machine_without_them_is_one_sentence_naming_the_way_out() -> None:
    problem = saved_topology_problem(str(EIGHT), None, local_gpus=lambda: 0)
    assert problem is not None and "\n" not in problem
    for fragment in ("topology.file", str(EIGHT), "8 GPUs", "has 0", "shardscope plan --topology", "advise", "predict"):
        assert fragment in problem, problem


@pytest.mark.parametrize(("path", "executor", "here"), [(None, None, 0), (str(EIGHT), "slurm", 0), (str(EIGHT), None, 8),
                                                       (str(EIGHT), "local", 16)],
                         ids=["no-saved-file", "slurm-runs-on-the-nodes", "same-gpus", "more-gpus"])
def test_no_problem_where_the_jobs_can_run(path: str | None, executor: str | None, here: int) -> None:
    assert saved_topology_problem(path, executor, local_gpus=lambda: here) is None


def test_snakemake_stops_before_any_job(tmp_path: Path) -> None:
    from shardscope.topology.saved import local_gpu_count

    if local_gpu_count() >= 8:
        pytest.skip("this machine has the 8 GPUs the saved topology names")
    config = default_config()
    results = tmp_path / "results"
    config.update(results=str(results), db=str(results / "shardscope.duckdb"), topology={"file": str(EIGHT)})
    run = subprocess.run(snakemake_words("--cores", "1"), cwd=workflow_folder(tmp_path / "workdir", config),
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode != 0
    assert "describes 8 GPUs but this machine has" in run.stderr, run.stderr[-3000:]
    assert not results.exists()
