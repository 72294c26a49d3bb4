"""Every fabric condition's jobs of a searched strategy train at its best micro-batch; one search per memory-equal job.

A condition changes speed, not memory: the search of the job with the same strategy, model, world size and sizing
serves it, so searches are not multiplied by conditions (pure Python: plans of saved topologies and CPU presets).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from shardscope.errors import UserError
from shardscope.plan.machine import MachineProbe
from shardscope.plan.planner import make_plan
from shardscope.plan.searches import memory_key
from shardscope.plan.summary import estimate, max_trials, trials_if_right
from shardscope.topology.detect import detect_cpu_only
from shardscope.topology.parse import parse_file
from factories import default_config

REPO = Path(__file__).resolve().parents[2]
TOPO = REPO / "tests" / "data" / "topo"
NO_PEER = MachineProbe(which=lambda name: None, emulated_problem=lambda delay, prefix: None)


@pytest.fixture()
def config() -> dict[str, Any]:
    doc = default_config()
    doc["training"]["search"] = {"limit": 8, "strategies": ["ddp", "zero3", "fsdp"]}
    return doc


def _by_job(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["job_id"]: e for e in plan["best"]}


def _check_one_search_per_memory_group(plan: dict[str, Any]) -> None:
    """Each best run's search is a job of the same memory key, and no two searches share one."""
    jobs = {j["job_id"]: j for j in plan["training"]}
    searches = {s["job_id"]: s for s in plan["search"]}
    keys = [memory_key(jobs[s["job_id"]], s["global_batch"]) for s in plan["search"]]
    assert len(keys) == len(set(keys))  # not duplicated per condition
    for entry in plan["best"]:
        search = searches[entry["search_job_id"]]
        assert memory_key(jobs[entry["job_id"]], entry["global_batch"]) == memory_key(jobs[search["job_id"]],
                                                                                      search["global_batch"])
        assert entry["job_id"] in search["serves"] and entry["micro_batches"] == search["micro_batches"]
        assert entry["best_placement"] == jobs[entry["job_id"]]["placement"] + "@best_microbatch"


def test_nvl_pairs_every_condition_trains_each_searched_strategy_at_its_best(config: dict[str, Any]) -> None:
    plan = make_plan(parse_file(TOPO / "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt").to_dict(), config, NO_PEER)
    best = _by_job(plan)
    planned = [c for c in plan["training_conditions"] if c["planned"]]
    assert {c["condition"] for c in planned} >= {"default", "pcie", "one_island", "cross_island"}
    for condition in planned:
        searched = [s for s in condition["strategies"] if s in {"ddp", "zero3", "fsdp"}]
        statement = condition["best_microbatch"]
        assert statement["planned"] is True and sorted(statement["searches"]) == sorted(searched)
        assert [best[j]["best_job_id"] for j in condition["jobs"] if j in best] == statement["jobs"]
    # NVLink off (pcie) is served by the default job's search at world size 8; no search runs over PCIe
    assert best["zero3-gpt2-small-ws8-all-pcie"]["search_job_id"] == "zero3-gpt2-small-ws8-all"
    assert best["ddp-gpt2-small-ws8-all-pcie"]["condition"] == "pcie"
    assert not any(s["job_id"].endswith("-pcie") for s in plan["search"])
    # inside vs across an island (world size 2): one search serves both, its trials inside the island
    inside, across = best["zero3-gpt2-small-ws2-one_island"], best["zero3-gpt2-small-ws2-cross_island"]
    assert inside["search_job_id"] == across["search_job_id"] == "zero3-gpt2-small-ws2-one_island"
    assert inside["global_batch"] == across["global_batch"] == 16  # limit 8 x 2 ranks
    # the memory-bound scale (mistral) is its own search: another model is another memory
    assert best["ddp-mistral-7b-ws8-all"]["search_job_id"] == "ddp-mistral-7b-ws8-all"
    strategies = {(s["strategy"], s["global_batch"], plan_model(plan, s["job_id"])) for s in plan["search"]}
    assert len(strategies) == len(plan["search"])  # per (strategy, model, world size) once
    assert len(plan["search"]) < len(plan["best"])
    _check_one_search_per_memory_group(plan)
    est = estimate(plan)
    # a GPU node's searches start at the memory model's micro-batch: counted as when the model is right, bounded
    assert all(s["start_micro_batch"] in s["micro_batches"] for s in plan["search"])
    assert est.search_jobs == sum(trials_if_right(s) for s in plan["search"]) + len(plan["best"])
    assert est.search_bound == sum(max_trials(s["micro_batches"], s["start_micro_batch"])
                                   for s in plan["search"]) + len(plan["best"])


def plan_model(plan: dict[str, Any], job_id: str) -> tuple[str, int]:
    job = next(j for j in plan["training"] if j["job_id"] == job_id)
    return job["model"], job["world_size"]


def test_dgx1_and_pcie_numa_nodes_get_best_runs_per_condition(config: dict[str, Any]) -> None:
    for name, conditions in (("08-dgx1-v100-hybrid-cube-mesh-nv1-nv2.txt", {"default", "pcie"}),
                             ("13-8x-pcie-pix-pxb-sys-numa-na.txt", {"default", "one_numa", "cross_numa"})):
        plan = make_plan(parse_file(TOPO / name).to_dict(), config, NO_PEER)
        got = {e["condition"] for e in plan["best"]}
        assert conditions <= got, name
        _check_one_search_per_memory_group(plan)


def test_cpu_emulated_presets_share_one_search_per_strategy(config: dict[str, Any]) -> None:
    config["emulated"]["enabled"] = True
    config["emulated"]["presets"] = ["fast", "pcie_like", "nvl_groups"]
    plan = make_plan(detect_cpu_only().topology.to_dict(), config, NO_PEER)
    best = _by_job(plan)
    # default (cpu sizing, seq 64) and the emulated presets (emulated.training, seq 128) differ in memory: two
    # searches per emulated strategy, not one per condition (4 emulated conditions); zero3 trains under default only
    assert sorted(s["job_id"] for s in plan["search"]) == [
        "ddp-tiny-ws2-all-fast", "ddp-tiny-ws2-local", "fsdp-tiny-ws2-all-fast", "fsdp-tiny-ws2-local",
        "zero3-tiny-ws2-local"]
    emulated = [j for j in plan["training"] if j.get("emulated")]
    assert len(emulated) == 8 and all(j["job_id"] in best for j in emulated)
    assert best["fsdp-tiny-ws2-all-pcie_like"]["search_job_id"] == "fsdp-tiny-ws2-all-fast"
    assert best["ddp-tiny-ws2-across_groups-nvl_groups"]["search_job_id"] == "ddp-tiny-ws2-all-fast"
    assert best["fsdp-tiny-ws2-all-pcie_like"]["best_placement"] == "all@pcie_like@best_microbatch"
    assert best["ddp-tiny-ws2-local"]["seq_len"] == 64 and best["ddp-tiny-ws2-all-fast"]["seq_len"] == 128
    by_preset = {c.get("emulated_preset"): c for c in plan["training_conditions"] if c["planned"]}
    pcie_like = by_preset["pcie_like"]["best_microbatch"]
    assert pcie_like["planned"] and pcie_like["global_batch"] == 16 and pcie_like["seq_len"] == 128
    assert "emulated.training" in pcie_like["sizing"] and pcie_like["search_runs_under"] == ["default (emulated fast)"]
    assert "zero3" not in pcie_like["searches"]  # emulated.strategies are ddp and fsdp
    _check_one_search_per_memory_group(plan)


def test_a_condition_without_a_searched_strategy_says_why(config: dict[str, Any]) -> None:
    config["training"]["search"] = {"limit": 4, "strategies": ["zero1"]}
    plan = make_plan(parse_file(TOPO / "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt").to_dict(), config, NO_PEER)
    statements = {c["condition"]: c["best_microbatch"] for c in plan["training_conditions"] if c["planned"]}
    assert statements["pcie"]["planned"] and statements["pcie"]["not_searched"] == ["ddp", "zero3"]
    assert not statements["one_island"]["planned"] and "training.search.strategies" in statements["one_island"]["reason"]
    config["training"]["search"] = {"limit": 4, "global_batch": 12}  # splits over 2 and 4 ranks, not over 8
    with pytest.raises(UserError, match="training.search.global_batch: 12 sequences do not split evenly over the 8 ranks"):
        make_plan(parse_file(TOPO / "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt").to_dict(), config, NO_PEER)


def test_the_default_config_plans_no_search_on_cpu_and_says_so() -> None:
    doc = default_config()
    assert doc["training"]["search"] == "auto"
    plan = make_plan(detect_cpu_only().topology.to_dict(), copy.deepcopy(doc), MachineProbe(which=lambda n: None))
    assert plan["search"] == [] and plan["best"] == []
    assert [j["job_id"] for j in plan["training"]] == [f"{s}-tiny-ws2-local" for s in doc["training"]["strategies"]]
    (default,) = [c for c in plan["training_conditions"] if c["planned"]]
    assert default["best_microbatch"] == {"planned": False, "reason": "config training.search is auto, which searches "
                                                                      "on GPU nodes only: on CPU the jobs run at the "
                                                                      "configured micro-batch only"}
    doc["training"]["search"] = None
    (default,) = [c for c in make_plan(detect_cpu_only().topology.to_dict(), doc,
                                       MachineProbe(which=lambda n: None))["training_conditions"] if c["planned"]]
    assert default["best_microbatch"]["reason"] == ("config training.search is null: the jobs run at the configured "
                                                    "micro-batch only")
    json.dumps(plan)  # plan.json stays JSON
