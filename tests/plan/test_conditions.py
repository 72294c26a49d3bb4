"""Training under fabric conditions planned from saved real topologies (and the emulated presets on CPU)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from shardscope.contracts.jobs import SpecError, TrainingJob, job_from_dict
from shardscope.errors import UserError
from shardscope.plan.jobs import write_job_files
from shardscope.plan.machine import MachineProbe
from shardscope.plan.planner import make_plan
from shardscope.topology.detect import detect_cpu_only
from shardscope.topology.parse import parse_file
from factories import default_config

REPO = Path(__file__).resolve().parents[2]
TOPO = REPO / "tests" / "data" / "topo"
FILES = {
    "nvswitch": "01-hgx-h200-nvswitch-nv18-12nics.txt",
    "nvl_pairs": "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt",
    "dgx1": "08-dgx1-v100-hybrid-cube-mesh-nv1-nv2.txt",
    "pcie_numa": "13-8x-pcie-pix-pxb-sys-numa-na.txt",
    "single": "18-single-gpu-h100-k8s-pod.txt",
}
NVLINK = ("nvswitch", "nvl_pairs", "dgx1")
SHARDED = {"fsdp", "fsdp_grad_op", "zero1", "zero2", "zero3"}
NO_PEER = MachineProbe(which=lambda name: None, emulated_problem=lambda delay, prefix: None)


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return default_config()


@pytest.fixture(scope="module")
def plans(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {key: make_plan(parse_file(TOPO / name).to_dict(), config, NO_PEER) for key, name in FILES.items()}


def planned(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["condition"]: c for c in plan["training_conditions"] if c["planned"]}


def skipped(plan: dict[str, Any]) -> dict[str, str]:
    return {c["condition"]: c["reason"] for c in plan["training_conditions"] if not c["planned"]}


def jobs_of(plan: dict[str, Any], condition: dict[str, Any]) -> list[dict[str, Any]]:
    by_id = {j["job_id"]: j for j in plan["training"]}
    return [by_id[i] for i in condition["jobs"]]


@pytest.mark.parametrize("key", NVLINK)
def test_nvlink_nodes_train_ddp_and_a_sharded_strategy_under_two_conditions(plans: dict[str, dict[str, Any]], key: str) -> None:
    plan = plans[key]
    conditions = planned(plan)
    both = [name for name, c in conditions.items() if "ddp" in c["strategies"] and SHARDED & set(c["strategies"])]
    assert {"default", "pcie"} <= set(both), conditions.keys()
    for job in jobs_of(plan, conditions["pcie"]):
        assert job["transport"] == "pcie" and job["job_id"].endswith("-pcie")
        assert job["env"]["NCCL_P2P_DISABLE"] == "1" and job["devices"] == list(range(8))
        assert job_from_dict(job).transport == "pcie"
    for job in jobs_of(plan, conditions["default"]):
        assert "NCCL_P2P_DISABLE" not in job["env"] and "transport" not in job  # default: left out of the spec


def test_nvl_pairs_train_inside_one_island_and_across_islands(plans: dict[str, dict[str, Any]]) -> None:
    plan = plans["nvl_pairs"]
    island = {g: i for i, isl in enumerate(plan_topology("nvl_pairs")["islands"]) for g in isl}
    conditions = planned(plan)
    inside, across = conditions["one_island"], conditions["cross_island"]
    assert inside["world_size"] == across["world_size"] == 2  # an NVL pair's size
    assert len({island[g] for g in inside["devices"]}) == 1 and len({island[g] for g in across["devices"]}) == 2
    for condition in (inside, across):
        assert {"ddp", "zero3"} <= set(condition["strategies"])
        assert [j["devices"] for j in jobs_of(plan, condition)] == [condition["devices"]] * len(condition["jobs"])
    assert {j["job_id"] for j in jobs_of(plan, inside)} == {"ddp-gpt2-small-ws2-one_island", "zero3-gpt2-small-ws2-one_island"}
    placements = {(e["world_size"], e["placement"]): e["devices"] for e in plan["placements"]}
    assert placements[(2, "cross_island")] == across["devices"]  # the same GPU set the collectives measure


def plan_topology(key: str) -> dict[str, Any]:
    return parse_file(TOPO / FILES[key]).to_dict()


def test_a_condition_the_node_cannot_offer_is_left_out_with_its_reason(plans: dict[str, dict[str, Any]]) -> None:
    assert "one NVLink island" in skipped(plans["nvswitch"])["cross_island"]
    assert "NVLink" in skipped(plans["pcie_numa"])["pcie"]
    assert set(skipped(plans["single"])) == {"pcie", "one_island", "cross_island", "one_numa", "cross_numa"}
    assert set(planned(plans["single"])) == {"default"}
    for plan in plans.values():
        assert all(reason.strip() for reason in skipped(plan).values())


def test_pcie_box_on_two_numa_nodes_trains_inside_one_and_across(plans: dict[str, dict[str, Any]]) -> None:
    plan = plans["pcie_numa"]
    conditions = planned(plan)
    inside, across = conditions["one_numa"], conditions["cross_numa"]
    assert inside["world_size"] == across["world_size"] == 4
    assert inside["devices"] == [0, 1, 2, 3] and across["devices"] == [0, 1, 4, 5]  # SYS separates 0-3 from 4-7
    describe = {(e["world_size"], e["placement"]): e for e in plan["placements"]}
    assert describe[(4, inside["placement"])]["numa_nodes"] == 1 and describe[(4, "cross_numa")]["numa_nodes"] == 2


def test_config_chooses_the_strategies_of_each_condition(config: dict[str, Any]) -> None:
    chosen = copy.deepcopy(config)
    chosen["training"]["conditions"] = {"pcie": ["zero2"]}
    plan = make_plan(plan_topology("nvl_pairs"), chosen, NO_PEER)
    assert planned(plan)["pcie"]["strategies"] == ["zero2"] and set(planned(plan)) == {"default", "pcie"}
    chosen["training"]["conditions"] = {"one_gpu": ["ddp"]}
    with pytest.raises(UserError, match="training.conditions: unknown key 'one_gpu'"):
        make_plan(plan_topology("nvl_pairs"), chosen, NO_PEER)


def test_default_jobs_keep_their_ids_and_spec_files(config: dict[str, Any], tmp_path: Path) -> None:
    """Adding conditions adds jobs; the default condition's jobs and their spec files stay as they were."""
    topology = plan_topology("nvl_pairs")
    without = copy.deepcopy(config)
    without["training"]["conditions"] = {}
    without["training"]["memory_bound"] = None
    without["training"]["hsdp"] = "off"  # the HSDP job NVL pairs add is a new default job (test_hsdp_is_planned_...)
    without["training"]["hpz"] = "off"  # and so is its zero3_hpz job (test_hpz_is_planned_...)
    before = make_plan(topology, without, NO_PEER)
    assert [j["job_id"] for j in before["training"]] == [f"{s}-gpt2-small-ws8-all" for s in config["training"]["strategies"]]
    names = {f.name for f in dataclasses.fields(TrainingJob) if not f.metadata.get("omit_default")}  # left out at defaults
    assert all(set(j) == names | {"kind"} for j in before["training"])  # the spec form the pipeline had before conditions
    write_job_files(before, tmp_path)
    after = make_plan(topology, {**config, "training": {**config["training"], "hsdp": "off", "hpz": "off"}}, NO_PEER)
    written = {p.stem for p in write_job_files(after, tmp_path)}
    assert written == {j["job_id"] for j in after["training"]} - {j["job_id"] for j in before["training"]}
    assert written and all("gpt2-small-ws8-all" not in name or name.endswith("-pcie") for name in written)


def test_cpu_conditions_come_from_the_emulated_presets(config: dict[str, Any]) -> None:
    topology = detect_cpu_only().topology.to_dict()
    on = copy.deepcopy(config)
    on["emulated"]["enabled"] = True
    plan = make_plan(topology, on, NO_PEER)
    by_preset = {(c.get("emulated_preset"), c["condition"]): c for c in plan["training_conditions"] if c["planned"]}
    assert set(by_preset) == {(None, "default"), ("fast", "default"), ("pcie_like", "pcie"),
                              ("nvl_groups", "one_island"), ("nvl_groups", "cross_island")}
    assert by_preset[("fast", "default")]["strategies"] == by_preset[("pcie_like", "pcie")]["strategies"]
    inside = jobs_of(plan, by_preset[("nvl_groups", "one_island")])
    assert [j["job_id"] for j in inside] == ["ddp-tiny-ws2-in_group-nvl_groups", "fsdp-tiny-ws2-in_group-nvl_groups"]
    assert sum("emulated" in j for j in plan["training"]) == 8  # emulated.strategies [ddp, fsdp] over 4 (preset, placement)s
    assert {(j["micro_batch"], j["seq_len"]) for j in plan["training"] if "emulated" in j} == {(8, 128)}
    assert {(j["micro_batch"], j["seq_len"]) for j in plan["training"] if "emulated" not in j} == {(2, 64)}
    spec = job_from_dict(inside[0])
    assert spec.emulated is not None and spec.emulated["definition"]["placements"]["in_group"] == ["h0", "h1"]
    assert spec.placement == "in_group@nvl_groups" and spec.world_size == 2
    fallback = copy.deepcopy(on)
    fallback["emulated"]["strategies"] = None  # null: the strategies of training.conditions
    by_condition = {(c.get("emulated_preset"), c["condition"]): c["strategies"]
                    for c in make_plan(topology, fallback, NO_PEER)["training_conditions"] if c["planned"]}
    assert by_condition[("fast", "default")] == by_condition[("pcie_like", "pcie")] == config["training"]["conditions"]["pcie"]
    assert by_condition[("nvl_groups", "one_island")] == config["training"]["conditions"]["one_island"]
    no_root = MachineProbe(which=lambda name: None, emulated_problem=lambda delay, prefix: "emulated fabrics need root")
    plan = make_plan(topology, on, no_root)
    assert set(planned(plan)) == {"default"} and not any("emulated" in j for j in plan["training"])
    assert all("need root" in reason for reason in skipped(plan).values()) and "pcie" in skipped(plan)


@pytest.mark.parametrize("training", [{"micro_batch": 0}, {"seq_len": "long"}, {"steps": 4}, [8]])
def test_bad_emulated_training_sizing_names_the_key(config: dict[str, Any], training: Any) -> None:
    on = copy.deepcopy(config)
    on["emulated"]["enabled"] = True
    on["emulated"]["training"] = training
    with pytest.raises(UserError, match=r"config key emulated\.training"):
        make_plan(detect_cpu_only().topology.to_dict(), on, NO_PEER)


def test_hsdp_shards_inside_an_island_and_replicates_across(config: dict[str, Any]) -> None:
    chosen = copy.deepcopy(config)
    chosen["training"]["strategies"] = ["ddp", "hsdp"]
    chosen["training"]["conditions"] = {"cross_island": ["hsdp"]}
    pairs = {j["job_id"]: j for j in make_plan(plan_topology("nvl_pairs"), chosen, NO_PEER)["training"]}
    assert pairs["hsdp-gpt2-small-ws8-all"]["shard_size"] == 2  # 4 NVL pairs: mesh 4 x 2
    assert pairs["hsdp-gpt2-small-ws2-cross_island"]["shard_size"] == 1  # two islands of one rank each: mesh 2 x 1
    assert "shard_size" not in pairs["ddp-gpt2-small-ws8-all"]
    nvswitch = make_plan(plan_topology("nvswitch"), chosen, NO_PEER)["training"]
    assert {j["shard_size"] for j in nvswitch if j["strategy"] == "hsdp"} == {8}  # one island: the node
    bad = dict(pairs["ddp-gpt2-small-ws8-all"], shard_size=2)
    with pytest.raises(SpecError, match="shard_size"):
        job_from_dict(bad)
    with pytest.raises(SpecError, match="shard_size"):
        job_from_dict(dict(pairs["hsdp-gpt2-small-ws8-all"], shard_size=3))


def test_hsdp_is_planned_where_islands_make_a_two_dimensional_mesh(plans: dict[str, dict[str, Any]]) -> None:
    """Default GPU plans train HSDP beside training.strategies only where the ranks span islands of 2+ GPUs."""
    pairs = plans["nvl_pairs"]
    hsdp = [j for j in pairs["training"] if j["strategy"] == "hsdp"]
    assert [(j["job_id"], j["shard_size"]) for j in hsdp] == [("hsdp-gpt2-small-ws8-all", 2)]  # 4 NVL pairs: 4 x 2
    default = next(c for c in pairs["training_conditions"] if c["condition"] == "default")  # the first: gpt2-small
    assert "hsdp" in default["strategies"] and pairs["hsdp"][0]["added"] is True
    for key, why in (("nvswitch", "HSDP would be FSDP"), ("dgx1", "HSDP would be FSDP"),
                     ("pcie_numa", "HSDP would be DDP"), ("single", "one GPU")):
        assert not any(j["strategy"] == "hsdp" for j in plans[key]["training"]), key
        assert plans[key]["hsdp"][0]["added"] is False and why in plans[key]["hsdp"][0]["reason"], key
    cpu = make_plan(detect_cpu_only().topology.to_dict(), default_config(), NO_PEER)
    assert not any(j["strategy"] == "hsdp" for j in cpu["training"])  # the CPU default pipeline keeps its jobs


def test_hpz_is_planned_with_the_island_as_its_partition(plans: dict[str, dict[str, Any]]) -> None:
    """Default GPU plans train zero3_hpz (ZeRO-3, secondary partition inside an island) only where the ranks span
    islands of 2+ GPUs; elsewhere plan.json ``hpz`` says why not, and the CPU default pipeline keeps its jobs."""
    pairs = plans["nvl_pairs"]
    hpz = [j for j in pairs["training"] if j["strategy"] == "zero3_hpz"]
    assert [(j["job_id"], j["shard_size"]) for j in hpz] == [("zero3_hpz-gpt2-small-ws8-all", 2)]  # 4 NVL pairs: partition 2
    job = job_from_dict(hpz[0])
    assert job.shard_size == 2 and job.devices == tuple(range(8))
    why = [w for w in pairs["hpz"] if w["condition"] == "default"]
    assert why[0]["added"] is True and why[0]["shard_size"] == 2 and "partition size 2" in why[0]["reason"]
    for key, reason in (("nvswitch", "would repeat ZeRO-3's own"), ("dgx1", "would repeat ZeRO-3's own"),
                        ("pcie_numa", "hpZ would be ZeRO-3"), ("single", "one GPU")):
        assert not any(j["strategy"] == "zero3_hpz" for j in plans[key]["training"]), key
        assert plans[key]["hpz"][0]["added"] is False and reason in plans[key]["hpz"][0]["reason"], key
    cpu_config = default_config()
    cpu = make_plan(detect_cpu_only().topology.to_dict(), cpu_config, NO_PEER)
    assert [j["strategy"] for j in cpu["training"]] == cpu_config["training"]["strategies"]  # no hsdp, no zero3_hpz
    assert cpu["hpz"][0]["added"] is False and "no islands" in cpu["hpz"][0]["reason"]
    off = copy.deepcopy(cpu_config)
    for value in ("off", False):  # False: an unquoted `hpz: off` in YAML
        off["training"]["hpz"] = value
        planned = make_plan(plan_topology("nvl_pairs"), off, NO_PEER)
        assert not any(j["strategy"] == "zero3_hpz" for j in planned["training"])
        assert "training.hpz is off" in planned["hpz"][0]["reason"]


def test_listed_hpz_is_left_out_where_its_partition_is_degenerate(config: dict[str, Any]) -> None:
    chosen = copy.deepcopy(config)
    chosen["training"]["strategies"] = ["zero3", "zero3_hpz"]
    chosen["training"]["conditions"] = {"cross_island": ["zero3_hpz"]}
    plan = make_plan(plan_topology("nvl_pairs"), chosen, NO_PEER)
    assert [j["job_id"] for j in plan["training"] if j["strategy"] == "zero3_hpz"] == ["zero3_hpz-gpt2-small-ws8-all"]
    cross = next(w for w in plan["hpz"] if w["condition"] == "cross_island")  # 2 ranks in 2 pairs: groups of 1
    assert cross["added"] is False and "hpZ would be ZeRO-3" in cross["reason"]
    cpu = make_plan(detect_cpu_only().topology.to_dict(), chosen, NO_PEER)  # listed on CPU: no islands, left out, said why
    assert [j["strategy"] for j in cpu["training"]] == ["zero3"]
    assert cpu["hpz"][0]["added"] is False and "no islands" in cpu["hpz"][0]["reason"]
    with pytest.raises(SpecError, match="shard_size"):
        job_from_dict(dict(next(j for j in plan["training"] if j["strategy"] == "zero3"), shard_size=2))


def test_an_emulated_fabric_of_two_pairs_trains_hpz_with_the_pair_as_partition(config: dict[str, Any]) -> None:
    """Emulated training takes its strategies from config: over a 4-host placement of two switched pairs (hosts grouped
    like NVL islands) zero3_hpz is planned with partition 2; over nvl_groups' 2-host placements it is left out, saying why."""
    on = copy.deepcopy(config)
    on["emulated"].update(enabled=True, strategies=["zero3", "zero3_hpz"], presets=["nvl_groups", "pairs"])
    nvl = on["emulated"]["fabrics"]["nvl_groups"]
    on["emulated"]["fabrics"]["pairs"] = dict(nvl, placements={"cross_island": ["h0", "h1", "h2", "h3"]})
    plan = make_plan(detect_cpu_only().topology.to_dict(), on, NO_PEER)
    hpz = {j["job_id"]: j for j in plan["training"] if j["strategy"] == "zero3_hpz"}
    assert list(hpz) == ["zero3_hpz-tiny-ws4-cross_island-pairs"] and hpz["zero3_hpz-tiny-ws4-cross_island-pairs"]["shard_size"] == 2
    left_out = {w["placement"]: w["reason"] for w in plan["hpz"] if not w["added"] and "@" in w.get("placement", "")}
    assert "hpZ would be ZeRO-3" in left_out["across_groups@nvl_groups"] and "would repeat" in left_out["in_group@nvl_groups"]
