"""Issue 32: a config edit is honoured by the next single `snakemake` invocation.

A small pipeline runs once; then the config gains an op, a strategy and (where this machine can build emulated
fabrics: root, `ip`, `tc`, and SHARDSCOPE_SYSTEM_TESTS=1) the emulated stage, and ONE more `snakemake --cores 2`
must exit 0 with every result file the new plan lists on disk and in the database. Before the fix it re-planned,
printed "100% done", exited 0 and left the new jobs unrun (the jobs reading the plan were evaluated against the
old plan.json before the plan checkpoint reran).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from factories import query_db, snakemake_words, workflow_folder

pytestmark = pytest.mark.e2e

SMALL = {"ranks": 2, "sweep": {"min_bytes": 1024, "max_bytes": 16384, "factor": 16, "warmup": 1, "iters": 2},
         "model": "tiny", "dtype": "float32", "micro_batch": 2, "seq_len": 32, "warmup": 1, "steps": 2, "repeats": 2}


def emulated_here() -> bool:
    """Whether this run may build emulated fabrics (as tests/emulated/conftest.py decides)."""
    from shardscope.emulated import netns

    return os.environ.get("SHARDSCOPE_SYSTEM_TESTS") == "1" and not netns.support_problem()


def snakemake(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(snakemake_words("--cores", "2"), cwd=folder, capture_output=True, text=True, timeout=900,
                          check=False)


def planned_results(results: Path) -> list[Path]:
    """Every result file the plan lists (collectives, training, emulated collectives)."""
    plan = json.loads((results / "plan" / "plan.json").read_text())
    files = [results / "collectives" / f"{job['job_id']}.json" for job in plan["collectives"]]
    files += [results / "training" / f"{job['job_id']}.json" for job in plan["training"]]
    files += [results / "emulated" / job["preset"] / "collectives" / job["placement"] / f"{job['op']}.json"
              for job in plan.get("emulated", []) if job["kind"] == "emulated_collective"]
    return files


def test_one_invocation_runs_every_job_a_config_edit_adds(tmp_path: Path) -> None:
    results = tmp_path / "results"
    config = {"results": str(results), "db": str(results / "shardscope.duckdb"),
              "collectives": {"ops": ["all_reduce"], "transports": ["default"]},
              "training": {"strategies": ["ddp"], "conditions": {}, "world_sizes": "max"},
              "cpu": SMALL, "emulated": {"enabled": False}}
    folder = workflow_folder(tmp_path / "workdir", config)
    first = snakemake(folder)
    assert first.returncode == 0, first.stderr[-4000:]

    edited = yaml.safe_load((folder / "config" / "config.yaml").read_text())
    edited["collectives"]["ops"] = ["all_reduce", "broadcast"]
    edited["training"]["strategies"] = ["ddp", "zero1"]
    if emulated_here():
        edited["emulated"].update(enabled=True, presets=["fast"], strategies=["ddp"], ops=["all_reduce"],
                                  training={"micro_batch": 2, "seq_len": 32},
                                  sweep={"min_bytes": 65536, "max_bytes": 65536, "factor": 4, "warmup": 1, "iters": 2})
    (folder / "config" / "config.yaml").write_text(yaml.safe_dump(edited))
    second = snakemake(folder)
    assert second.returncode == 0, second.stderr[-4000:]

    missing = [str(path) for path in planned_results(results) if not path.exists()]
    assert not missing, (missing, second.stderr[-3000:])
    assert (results / "collectives" / "broadcast-ws2-local-default.json").exists()
    assert (results / "training" / "zero1-tiny-ws2-local.json").exists()
    db = results / "shardscope.duckdb"
    assert {op for (op,) in query_db(db, "SELECT DISTINCT op FROM collectives")} >= {"all_reduce", "broadcast"}
    assert {s for (s,) in query_db(db, "SELECT DISTINCT strategy FROM training_runs")} >= {"ddp", "zero1"}
    if emulated_here():
        assert any("@" in p for (p,) in query_db(db, "SELECT DISTINCT placement FROM training_runs"))
