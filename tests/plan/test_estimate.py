"""The time estimate of a plan and each job's place in it (issue 21, issue 17 item 8)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from shardscope.jobs.run import job_position
from shardscope.plan.summary import CPU_FIXED_SECONDS, CPU_JOB_SECONDS, estimate, job_kind, summarize
from factories import default_config_path

REPO = Path(__file__).resolve().parents[2]


def _plan(device: str) -> dict:
    return {"schema": "shardscope.plan/1", "device": device, "fabric": device, "world_sizes": [2],
            "collectives": [{"job_id": "c1", "op": "all_reduce", "world_size": 2, "transport": "default"}],
            "training": [{"job_id": f"t-{s}", "strategy": s, "world_size": 2} for s in ("ddp", "zero2", "fsdp")],
            "nccl_tests": [{"job_id": "p1", "kind": "nccl_tests", "world_size": 2}], "placements": [], "skipped": []}


def test_a_cpu_plan_counts_its_jobs_and_adds_the_measured_constants():
    est = estimate(_plan("cpu"))
    assert est.jobs == 5
    assert [job_kind(j) for j in _plan("cpu")["training"]] == ["train:ddp", "train:zero", "train:fsdp"]
    expected = CPU_FIXED_SECONDS + sum(CPU_JOB_SECONDS[k] for k in ("collective", "train:ddp", "train:zero", "train:fsdp", "peer"))
    assert est.seconds == expected
    assert est.sentence().startswith("5 jobs; estimated wall-clock on this node about ") and "measured" in est.sentence()
    assert est.sentence() in summarize(_plan("cpu"), "t.json")


def test_a_gpu_plan_without_a_topology_claims_no_time():
    est = estimate(_plan("gpu"))  # the modeled estimate needs the topology (tests/plan/test_modeled_estimate.py)
    assert est.jobs == 5 and est.seconds is None and "no topology was given for the cost model" in est.sentence()


def test_each_job_knows_which_of_how_many_it_is():
    plan = _plan("cpu")
    assert job_position(plan, "c1") == "job 1 of 5 in the plan"
    assert job_position(plan, "t-zero2") == "job 3 of 5 in the plan"


def test_the_plan_log_starts_with_the_estimate(tmp_path):
    topo = tmp_path / "topology.json"
    run = [sys.executable, "-m", "shardscope"]
    assert subprocess.run([*run, "topology", "detect", "--out", str(topo)], capture_output=True, cwd=REPO).returncode == 0
    proc = subprocess.run([*run, "plan", "--topology", str(topo), "--config", str(default_config_path()),
                           "--out", str(tmp_path / "plan.json")], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[0].startswith("shardscope: plan: ") and " jobs; " in proc.stderr.splitlines()[0]
