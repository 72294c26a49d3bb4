"""A GPU plan's wall-clock, modeled by the cost model from the topology (issue 17 item 8): saved real topologies,
each GPU named and sized as ``topology detect`` records it on the node (the data sheet's memory)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from shardscope.plan.machine import MachineProbe
from shardscope.plan.modeled_time import GPU_JOB_START_SECONDS, modeled_seconds
from shardscope.plan.planner import make_plan
from shardscope.plan.summary import CPU_FIXED_SECONDS, estimate, max_trials, summarize, trials_if_right
from shardscope.topology.parse import parse_file
from shardscope.topology.detect import detect_cpu_only
from factories import default_config_path

REPO = Path(__file__).resolve().parents[2]
TOPO = REPO / "tests" / "data" / "topo"
CONFIG = default_config_path()
NO_PEER = MachineProbe(which=lambda name: None, emulated_problem=lambda delay, prefix: None)
GB = 10**9
#: (saved topology, the GPU name nvidia-smi reports there, its memory)
NODES = {
    "nvswitch": ("01-hgx-h200-nvswitch-nv18-12nics.txt", "NVIDIA H200", 141 * GB),
    "nvl_pairs": ("10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt", "NVIDIA H100 NVL", 94 * GB),
    "dgx1": ("08-dgx1-v100-hybrid-cube-mesh-nv1-nv2.txt", "Tesla V100-SXM2-32GB", 32 * GB),
    "pcie_2numa": ("13-8x-pcie-pix-pxb-sys-numa-na.txt", "NVIDIA H100 PCIe", 80 * GB),
    "single": ("18-single-gpu-h100-k8s-pod.txt", "NVIDIA H100 80GB HBM3", 80 * GB),
}


@pytest.fixture()
def config() -> dict[str, Any]:
    return yaml.safe_load(CONFIG.read_text())


def topology(node: str) -> dict[str, Any]:
    name, gpu, memory = NODES[node]
    topo = parse_file(TOPO / name).to_dict()
    for entry in topo["gpus"]:
        entry["name"], entry["memory_bytes"] = gpu, memory
    return topo


@pytest.mark.parametrize("node", sorted(NODES))
def test_the_default_gpu_plan_is_modeled_under_an_hour(node: str, config: dict[str, Any]) -> None:
    topo = topology(node)
    plan = make_plan(topo, config, NO_PEER)
    est = estimate(plan, topo)
    assert est.seconds is not None, est.sentence()
    starts = est.jobs * GPU_JOB_START_SECONDS + CPU_FIXED_SECONDS
    assert starts < est.seconds < 3600, est.sentence()  # the jobs' modeled work adds to their assumed starts
    assert "modeled by the cost model, not measured" in est.basis and f"{GPU_JOB_START_SECONDS:.0f} s start" in est.basis
    # the default searches each strategy's micro-batch on a GPU node (training.search: auto), said beside the jobs
    assert est.sentence().startswith(f"{est.jobs} jobs and {est.search_jobs} micro-batch search trials")
    assert "estimated wall-clock on this node about " in est.sentence()
    assert est.sentence() in summarize(plan, NODES[node][0], est)


def test_the_estimate_follows_the_plan(config: dict[str, Any]) -> None:
    topo = topology("nvl_pairs")
    base = estimate(make_plan(topo, config, NO_PEER), topo).seconds
    more = copy.deepcopy(config)
    more["gpu"]["repeats"] = 6
    longer = estimate(make_plan(topo, more, NO_PEER), topo).seconds
    more["gpu"]["sweep"]["iters"] = 200
    longest = estimate(make_plan(topo, more, NO_PEER), topo).seconds
    assert base is not None and longer is not None and longest is not None
    assert base < longer < longest


def test_a_job_the_model_says_does_not_fit_costs_only_its_start(config: dict[str, Any]) -> None:
    topo = topology("pcie_2numa")  # 80 GB: DDP of the Mistral-7B shape does not fit
    plan = make_plan(topo, config, NO_PEER)
    assert "ddp-mistral-7b-ws8-all" in {j["job_id"] for j in plan["training"]}
    without = dict(plan, training=[j for j in plan["training"] if j["job_id"] != "ddp-mistral-7b-ws8-all"])
    with_oom, _ = modeled_seconds(plan, topo, [], 0.0)
    without_oom, _ = modeled_seconds(without, topo, [], 0.0)
    assert with_oom is not None and without_oom is not None
    assert with_oom - without_oom == pytest.approx(GPU_JOB_START_SECONDS)
    fitting = dict(plan, training=[j for j in plan["training"] if j["job_id"] != "zero3-mistral-7b-ws8-all"])
    assert with_oom - modeled_seconds(fitting, topo, [], 0.0)[0] > GPU_JOB_START_SECONDS + 30  # 33 steps of ~2 s


def test_the_searches_add_their_trials_and_best_runs(config: dict[str, Any]) -> None:
    topo = topology("nvswitch")
    config["training"]["search"] = None
    base = estimate(make_plan(topo, config, NO_PEER), topo)
    config["training"]["search"] = {"limit": 16, "strategies": ["ddp", "zero3"]}
    plan = make_plan(topo, config, NO_PEER)
    searched = estimate(plan, topo)
    # on a GPU node every search starts at the memory model's micro-batch: counted as when the model is right
    assert searched.search_jobs == sum(trials_if_right(e) for e in plan["search"]) + len(plan["best"]) > 0
    assert searched.search_bound == sum(max_trials(e["micro_batches"], e["start_micro_batch"])
                                        for e in plan["search"]) + len(plan["best"])
    assert base.seconds is not None and searched.seconds is not None
    assert searched.seconds > base.seconds + searched.search_jobs * GPU_JOB_START_SECONDS
    assert f"if the memory model's micro-batches are right (at most {searched.search_bound} if not)" \
        in searched.sentence()


def test_the_default_search_on_a_gpu_node_starts_at_the_modeled_micro_batch_and_stays_under_an_hour(
        config: dict[str, Any]) -> None:
    """Issue 32 item 8: training.search auto (the default) compares each strategy at its own best micro-batch on a
    GPU node, from the memory model's largest that fits, and the 8-GPU plan's estimate stays under an hour."""
    config["training"]["search"] = "auto"
    for name in ("nvswitch", "nvl_pairs", "dgx1", "pcie_2numa"):
        topo = topology(name)
        plan = make_plan(topo, config, NO_PEER)
        searched = {e["strategy"] for e in plan["search"]}
        assert searched == set(config["training"]["strategies"])
        assert {e["job_id"].split("-ws")[0].split("-", 1)[1] for e in plan["search"]} == {config["gpu"]["model"]}
        assert all(e["start_micro_batch"] in e["micro_batches"] for e in plan["search"])
        est = estimate(plan, topo)
        assert est.seconds is not None and est.seconds < 3600, est.sentence()
    cpu = make_plan(detect_cpu_only().topology.to_dict(), config, NO_PEER)
    assert cpu["search"] == [] and "searches on GPU nodes only" in cpu["training_conditions"][0]["best_microbatch"][
        "reason"]


def test_an_unknown_gpu_gets_no_estimate_and_says_why(config: dict[str, Any]) -> None:
    topo = parse_file(TOPO / "11-3x-rtx-a6000-nv4-pair-plus-pcie-ansi-header.txt").to_dict()
    est = estimate(make_plan(topo, config, NO_PEER), topo)
    assert est.seconds is None
    assert "no estimated wall-clock: the cost model cannot price every job: strategies not predicted: peak FLOP/s" \
        in est.sentence()


def test_plan_prints_the_modeled_estimate_first_in_its_log_and_in_its_summary(tmp_path: Path) -> None:
    topo = tmp_path / "topology.json"
    nvl = TOPO / NODES["nvl_pairs"][0]
    run = [sys.executable, "-m", "shardscope"]
    assert subprocess.run([*run, "topology", "parse", str(nvl), "--out", str(topo)], cwd=REPO).returncode == 0
    proc = subprocess.run([*run, "plan", "--topology", str(topo), "--config", str(CONFIG), "--out",
                           str(tmp_path / "plan.json")], capture_output=True, text=True, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith("shardscope: plan: ") and "estimated wall-clock on this node about" in first
    assert "modeled by the cost model" in first and first.removeprefix("shardscope: plan: ") in proc.stdout


def test_plan_predictions_time_hpz_and_hsdp_inside_their_planned_islands(config: dict[str, Any]) -> None:
    """On NVL pairs the planner adds hsdp and zero3_hpz with shard size 2; their modeled collectives (inside one pair,
    timed on one pair's GPUs) beat fsdp's and zero3's, which cross PCIe, and their steps are never slower."""
    from shardscope.costmodel.documents import plan_predictions

    topo = topology("nvl_pairs")
    plan = make_plan(topo, config, NO_PEER)
    assert {j.get("shard_size") for j in plan["training"] if j["strategy"] in ("hsdp", "zero3_hpz")} == {2}
    rows = {(r["strategy"], r["model"]): r for r in plan_predictions(topo, plan)["strategies"] if r["gpus"] == 8}
    models = {m for s, m in rows if s == "zero3_hpz"}
    assert models
    for model in models:
        # their collectives take less time; the step is never slower (a small model's step may be bound by the
        # framework's host work, the same for both: then the two tie)
        for grouped, flat in (("zero3_hpz", "zero3"), ("hsdp", "fsdp")):
            assert rows[grouped, model]["comm_time_s"] < rows[flat, model]["comm_time_s"]
            assert rows[grouped, model]["step_time_s"] <= rows[flat, model]["step_time_s"] * (1 + 1e-9)
