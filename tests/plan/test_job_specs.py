"""Typed job specs in plan.json, the per-job spec files, the stages the planner decides, and `job run`'s refusals."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from shardscope.contracts.jobs import CollectiveJob, PeerJob, SpecError, TrainingJob, job_from_dict, job_to_dict
from shardscope.errors import UserError
from shardscope.jobs.run import collective_command
from shardscope.plan.jobs import find_job, planned_jobs, write_job_files
from shardscope.plan.machine import MachineProbe
from shardscope.plan.planner import make_plan, planner_config
from shardscope.topology.detect import detect_cpu_only
from shardscope.topology.parse import parse_file
from factories import default_config

REPO = Path(__file__).resolve().parents[2]
NVSWITCH = REPO / "tests" / "data" / "topo" / "01-hgx-h200-nvswitch-nv18-12nics.txt"
#: A machine without all_reduce_perf, where emulated fabrics could be built.
BARE = MachineProbe(which=lambda name: None, emulated_problem=lambda delay, prefix: None)


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return default_config()


@pytest.fixture(scope="module")
def gpu_topology() -> dict[str, Any]:
    return parse_file(NVSWITCH).to_dict()


@pytest.fixture(scope="module")
def cpu_topology() -> dict[str, Any]:
    return detect_cpu_only().topology.to_dict()


def test_every_planned_job_is_a_complete_spec_that_reads_back_unchanged(config, gpu_topology, cpu_topology):
    cluster = {**config, "cluster": {"nodes": 2, "gpus_per_node": None}}
    for topology in (gpu_topology, cpu_topology):
        plan = make_plan(topology, cluster, BARE)
        jobs = list(planned_jobs(plan))
        assert len(jobs) == len(plan["collectives"]) + len(plan["training"]) + len(
            plan["multi_node"]["collectives"]) + len(plan["multi_node"]["training"])
        for entry in jobs:
            spec = job_from_dict(entry)
            assert job_to_dict(spec) == entry
            assert spec.world_size == spec.nodes * spec.nproc_per_node


def test_collective_and_training_specs_carry_the_config_sizing(config, gpu_topology):
    plan = make_plan(gpu_topology, config, BARE)
    job = job_from_dict(plan["collectives"][0])
    assert isinstance(job, CollectiveJob)
    assert job.sweep.max_bytes == config["gpu"]["sweep"]["max_bytes"] and job.dtype == config["collectives"]["dtype"]
    assert (job.timeout_s, job.wall_s) == (config["collectives"]["timeout_s"], config["collectives"]["job_timeout_s"])
    train = job_from_dict(plan["training"][0])
    assert isinstance(train, TrainingJob)
    assert (train.model_spec, train.dtype, train.steps) == ("gpt2-small", "bfloat16", config["gpu"]["steps"])
    budget = copy.deepcopy(config)
    budget["training"]["memory_budget_gib"] = 80
    assert make_plan(gpu_topology, budget, BARE)["training"][0]["memory_budget_bytes"] == 80 * 2**30


def test_pcie_collective_command_sets_its_transport_and_gpus(config, gpu_topology):
    plan = make_plan(gpu_topology, config, BARE)
    entry = next(j for j in plan["collectives"] if j["transport"] == "pcie" and j["world_size"] == 2)
    command = collective_command(job_from_dict(entry), "out.json")
    assert command[0] == "env" and "NCCL_P2P_DISABLE=1" in command and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in command
    assert f"CUDA_VISIBLE_DEVICES={entry['cuda_visible_devices']}" in command
    assert command[command.index("--nproc-per-node") + 1] == "2" and "--standalone" in command
    assert command[command.index("--op") + 1] == entry["op"] and command[-2:] == ["--out", "out.json"]


def test_a_multinode_job_outside_slurm_is_refused_before_it_starts(config, cpu_topology, monkeypatch):
    for name in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(name)
    plan = make_plan(cpu_topology, {**config, "cluster": {"nodes": 2}}, BARE)
    with pytest.raises(UserError, match="needs a Slurm allocation"):
        collective_command(job_from_dict(plan["multi_node"]["collectives"][0]), "out.json")


def test_the_nccl_tests_peer_is_planned_only_with_gpus_and_all_reduce_perf(config, gpu_topology, cpu_topology):
    found = MachineProbe(which=lambda name: f"/opt/nccl-tests/{name}", emulated_problem=BARE.emulated_problem)
    plan = make_plan(gpu_topology, config, found)
    peers = [job_from_dict(j) for j in plan["nccl_tests"]]
    default = {(j["world_size"], j["placement"]) for j in plan["collectives"] if j["transport"] == "default"}
    assert peers and {(p.world_size, p.placement) for p in peers} == default
    assert all(isinstance(p, PeerJob) and p.binary == "/opt/nccl-tests/all_reduce_perf" for p in peers)
    assert not [s for s in plan["skipped"] if s["stage"] == "nccl_tests"]
    for topology, machine, why in ((gpu_topology, BARE, "all_reduce_perf is not on the PATH"),
                                   (cpu_topology, found, "the plan runs CPU processes")):
        plan = make_plan(topology, config, machine)
        assert plan["nccl_tests"] == []
        assert [s["stage"] for s in plan["skipped"]] == ["nccl_tests"] and why in plan["skipped"][0]["reason"]


def test_emulated_jobs_are_planned_where_they_can_run_and_skipped_with_a_reason(config, cpu_topology):
    on = copy.deepcopy(config)
    on["emulated"]["enabled"] = True
    plan = make_plan(cpu_topology, on, BARE)
    jobs = plan["emulated"]
    assert {(j["preset"], j["op"]) for j in jobs} >= {("fast", "all_reduce"), ("nvl_groups", "all_reduce")}
    assert len({j["job_id"] for j in jobs}) == len(jobs)
    emulated = [job_from_dict(j) for j in plan["training"] if "emulated" in j]  # training over a fabric: typed specs
    assert {(j.emulated["preset"], j.emulated["placement"], j.strategy) for j in emulated} >= {
        ("fast", "all", "ddp"), ("pcie_like", "all", "fsdp"), ("nvl_groups", "in_group", "fsdp"), ("nvl_groups", "across_groups", "ddp")}
    no_root = MachineProbe(which=BARE.which, emulated_problem=lambda delay, prefix: "this process is not root")
    plan = make_plan(cpu_topology, on, no_root)
    assert plan["emulated"] == [] and {"stage": "emulated", "reason": "emulated fabrics skipped: this process is not root"} in plan["skipped"]
    assert not any("emulated" in j for j in plan["training"])
    assert all("this process is not root" in c["reason"] for c in plan["training_conditions"] if not c["planned"])
    assert make_plan(cpu_topology, config, no_root)["emulated"] == []  # off: nothing probed, nothing planned


def test_planner_config_leaves_out_what_the_planner_does_not_read(config):
    edited = copy.deepcopy(config)
    edited["emulated"]["timeout_s"] = 5  # the stage is off
    edited["db"] = "elsewhere.duckdb"
    edited["topology"] = {"file": "saved.txt"}
    assert planner_config(edited) == planner_config(config)
    edited["training"]["strategies"] = ["ddp"]
    assert planner_config(edited) != planner_config(config)


def test_spec_files_are_rewritten_only_when_their_job_changes(config, cpu_topology, tmp_path):
    plan = make_plan(cpu_topology, config, BARE)
    written = write_job_files(plan, tmp_path)
    assert sorted(p.name for p in written) == sorted(f"{j['job_id']}.json" for j in planned_jobs(plan))
    assert write_job_files(plan, tmp_path) == []
    changed = copy.deepcopy(config)
    changed["training"]["strategies"] = ["ddp", "zero3"]
    changed["cpu"]["steps"] = 7
    assert sorted(p.name for p in write_job_files(make_plan(cpu_topology, changed, BARE), tmp_path)) == [
        "ddp-tiny-ws2-local.json", "zero3-tiny-ws2-local.json"]
    assert json.loads((tmp_path / "zero3-tiny-ws2-local.json").read_text())["steps"] == 7
    assert (tmp_path / "zero1-tiny-ws2-local.json").exists()  # kept: planned again unchanged, it need not rerun


@pytest.mark.parametrize(("edit", "field"), [
    (lambda job: job.pop("sweep"), "'sweep' is missing"),
    (lambda job: job.update(world_size="two"), "'world_size' is 'two'; expected an integer"),
    (lambda job: job["sweep"].update(factor=1), "'sweep.factor' is 1"),
    (lambda job: job.update(op="all_reduse"), "'op' is 'all_reduse'"),
    (lambda job: job.update(colour="red"), "'colour' is not a field"),
    (lambda job: job.update(kind="magic"), "'kind' is 'magic'"),
    (lambda job: job.update(env={"NCCL_P2P_DISABLE": 1}), "'env'"),
    (lambda job: job.update(nproc_per_node=4), "'world_size' is 2; expected nodes x nproc_per_node"),
    (lambda job: job["env"].update(LD_PRELOAD="/tmp/evil.so"), "'env.LD_PRELOAD' is not a variable the planner sets"),
    (lambda job: job["env"].update(NCCL_NET_PLUGIN="evil"), "'env.NCCL_NET_PLUGIN' is not a variable the planner sets"),
])
def test_a_hand_edited_job_is_refused_with_its_id_and_field(config, cpu_topology, edit, field):
    plan = make_plan(cpu_topology, config, BARE)
    job_id = plan["collectives"][0]["job_id"]
    edit(plan["collectives"][0])
    with pytest.raises(UserError) as caught:
        find_job(plan, job_id, "plan.json")
    assert str(caught.value).startswith(f"plan.json: job {job_id!r}: field ") and field in str(caught.value)


def test_every_variable_the_planner_writes_is_allowed_in_a_job_env(config, cpu_topology):
    from shardscope.contracts.jobs import PLANNED_ENV
    from shardscope.plan.planner import DEVICE_ORDER_ENV, PCIE_TRANSPORT_ENV

    assert {*DEVICE_ORDER_ENV, *PCIE_TRANSPORT_ENV} <= PLANNED_ENV


def test_a_training_job_with_ld_preload_in_env_is_refused(config, cpu_topology):
    plan = make_plan(cpu_topology, config, BARE)
    job_id = plan["training"][0]["job_id"]
    plan["training"][0]["env"] = {"LD_PRELOAD": "/tmp/evil.so"}
    with pytest.raises(UserError, match=f"plan.json: job {job_id!r}: field 'env.LD_PRELOAD' is not a variable"):
        find_job(plan, job_id, "plan.json")


def test_spec_errors_name_the_field():
    with pytest.raises(SpecError, match="'steps' is 0"):
        TrainingJob(job_id="x", world_size=1, nproc_per_node=1, placement="local", strategy="ddp", model="tiny",
                    model_spec="tiny", dtype="float32", micro_batch=1, seq_len=8, warmup=1, steps=0, timeout_s=300,
                    wall_s=600)


def test_job_run_refuses_an_invalid_plan_with_exit_2_and_writes_nothing(config, cpu_topology, tmp_path):
    plan = make_plan(cpu_topology, config, BARE)
    job_id = plan["training"][0]["job_id"]
    plan["training"][0]["micro_batch"] = -1
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    for wanted, message in ((job_id, f"job {job_id!r}: field 'micro_batch' is -1"), ("nope", "no job 'nope' is planned")):
        proc = subprocess.run([sys.executable, "-m", "shardscope", "job", "run", "--plan", str(tmp_path / "plan.json"),
                               "--id", wanted, "--out", str(tmp_path / "out.json"), "--log", str(tmp_path / "out.log")],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("shardscope: error:") and message in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["plan.json"]
