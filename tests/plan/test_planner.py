"""The experiment plan from a topology and the repository's config/config.yaml."""

from __future__ import annotations

import copy
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from shardscope.errors import UserError
from shardscope.plan.planner import make_plan
from shardscope.topology.detect import detect_cpu_only
from shardscope.topology.parse import parse_file

REPO = Path(__file__).resolve().parents[2]
TOPO = REPO / "tests" / "data" / "topo"
FIXTURES = {
    "nvswitch": "01-hgx-h200-nvswitch-nv18-12nics.txt",
    "nvl_pairs": "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt",
    "pcie": "13-8x-pcie-pix-pxb-sys-numa-na.txt",
    "single": "18-single-gpu-h100-k8s-pod.txt",
}


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


@pytest.fixture(scope="module")
def topologies() -> dict[str, dict[str, Any]]:
    return {key: parse_file(TOPO / name).to_dict() for key, name in FIXTURES.items()}


def cfg_with(config: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(config)
    for dotted, value in changes.items():
        node = out
        *parents, leaf = dotted.split("__")
        for key in parents:
            node = node[key]
        node[leaf] = value
    return out


def placements_by_ws(plan: dict[str, Any]) -> dict[int, dict[str, tuple[int, ...]]]:
    found: dict[int, dict[str, tuple[int, ...]]] = defaultdict(dict)
    for job in plan["collectives"]:
        devices = tuple(job["devices"])
        assert found[job["world_size"]].setdefault(job["placement"], devices) == devices
    return dict(found)


def island_of(topology: dict[str, Any]) -> dict[int, int]:
    return {g: i for i, island in enumerate(topology["islands"]) for g in island}


def numa_of(topology: dict[str, Any]) -> dict[int, int | None]:
    return {g["index"]: g["numa_node"] for g in topology["gpus"]}


# --------------------------------------------------------------------------- CPU


def test_cpu_plan(config: dict[str, Any]) -> None:
    topology = detect_cpu_only().topology.to_dict()
    plan = make_plan(topology, config)
    assert plan["device"] == "cpu"
    assert plan["fabric"] == "cpu"
    assert plan["world_sizes"] == [2]
    assert plan["profile"] == config["cpu"]

    ops = config["collectives"]["ops"]
    assert sorted(j["op"] for j in plan["collectives"]) == sorted(ops)  # one job per op
    for job in plan["collectives"]:
        assert (job["world_size"], job["placement"], job["transport"]) == (2, "local", "default")
        assert job["env"] == {} and job["devices"] == []

    assert [j["strategy"] for j in plan["training"]] == config["training"]["strategies"]
    for job in plan["training"]:
        assert (job["world_size"], job["placement"], job["model"]) == (2, "local", config["cpu"]["model"])


def test_cpu_world_size_comes_from_cpu_ranks(config: dict[str, Any]) -> None:
    plan = make_plan(detect_cpu_only().topology.to_dict(), cfg_with(config, cpu__ranks=3))
    assert plan["world_sizes"] == [3]
    assert {j["world_size"] for j in plan["collectives"] + plan["training"]} == {3}


def test_cpu_plan_with_custom_model_names_it(config: dict[str, Any]) -> None:
    model = {"name": "mini", "preset": "tiny", "n_layers": 1}
    plan = make_plan(detect_cpu_only().topology.to_dict(), cfg_with(config, cpu__model=model))
    assert {j["model"] for j in plan["training"]} == {"mini"}
    assert all(j["job_id"].startswith(f"{j['strategy']}-mini-") for j in plan["training"])


# --------------------------------------------------------------------------- GPU


def test_nvl_pairs_plan(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    topology = topologies["nvl_pairs"]
    assert topology["islands"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    plan = make_plan(topology, config)
    assert plan["device"] == "gpu" and plan["profile"] == config["gpu"]
    assert plan["world_sizes"] == [2, 4, 8]

    by_ws = placements_by_ws(plan)
    island, numa = island_of(topology), numa_of(topology)
    ws2 = by_ws[2]
    assert set(ws2) == {"one_island", "cross_island", "cross_numa"}
    assert len({island[g] for g in ws2["one_island"]}) == 1
    assert len({island[g] for g in ws2["cross_island"]}) == 2
    assert len({numa[g] for g in ws2["cross_numa"]}) == 2
    assert len(set(ws2.values())) == 3  # distinct devices for each placement
    assert "one_island" not in by_ws[4]  # no island holds 4 GPUs
    assert len({numa[g] for g in by_ws[4]["cross_numa"]}) == 2
    assert by_ws[8] == {"all": tuple(range(8))}

    transports = {j["transport"] for j in plan["collectives"]}
    assert transports == {"default", "pcie"}  # NVLink exists, so forcing PCIe is worth measuring
    for job in plan["collectives"]:
        if job["transport"] == "pcie":
            assert job["env"].get("NCCL_P2P_DISABLE") == "1"
        else:
            assert job["env"] == {}
    ops = config["collectives"]["ops"]
    for ws, places in by_ws.items():
        for name in places:
            jobs = [j for j in plan["collectives"] if j["world_size"] == ws and j["placement"] == name]
            assert sorted((j["op"], j["transport"]) for j in jobs) == sorted((o, t) for o in ops for t in ("default", "pcie"))

    assert {j["world_size"] for j in plan["training"]} == {8}  # training.world_sizes: max
    assert [j["strategy"] for j in plan["training"]] == config["training"]["strategies"]
    assert {j["model"] for j in plan["training"]} == {config["gpu"]["model"]}


def test_pcie_only_plan_has_no_pcie_transport(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    plan = make_plan(topologies["pcie"], config)
    assert plan["world_sizes"] == [2, 4, 8]
    assert plan["collectives"]
    assert {j["transport"] for j in plan["collectives"]} == {"default"}
    assert all(j["env"] == {} for j in plan["collectives"])


def test_single_gpu_plan(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    plan = make_plan(topologies["single"], config)
    assert plan["device"] == "gpu"
    assert plan["world_sizes"] == [1]
    assert plan["collectives"] == []  # nothing to communicate with one rank
    assert [j["strategy"] for j in plan["training"]] == config["training"]["strategies"]
    assert all(j["world_size"] == 1 and j["devices"] == [0] for j in plan["training"])


def test_nvswitch_plan(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    topology = topologies["nvswitch"]
    plan = make_plan(topology, config)
    assert plan["world_sizes"] == [2, 4, 8]
    by_ws = placements_by_ws(plan)
    numa = numa_of(topology)
    for ws in (2, 4):
        assert set(by_ws[ws]) == {"one_island", "cross_numa"}  # one island: no cross_island
        assert len({numa[g] for g in by_ws[ws]["one_island"]}) == 1  # packed on one NUMA node
        assert len({numa[g] for g in by_ws[ws]["cross_numa"]}) == 2
    assert set(by_ws[8]) == {"all"}
    assert {j["transport"] for j in plan["collectives"]} == {"default", "pcie"}


@pytest.mark.parametrize("key", sorted(FIXTURES))
def test_job_ids_unique_and_devices_consistent(config: dict[str, Any], topologies: dict[str, dict[str, Any]], key: str) -> None:
    topology = topologies[key]
    plan = make_plan(topology, config)
    gpus = {g["index"] for g in topology["gpus"]}
    for kind in ("collectives", "training"):
        ids = [j["job_id"] for j in plan[kind]]
        assert len(ids) == len(set(ids)), kind
        for job in plan[kind]:
            assert job["world_size"] in plan["world_sizes"]
            assert len(job["devices"]) == job["world_size"]
            assert len(set(job["devices"])) == len(job["devices"])
            assert set(job["devices"]) <= gpus
            assert job["devices"] == sorted(job["devices"])
    assert len({j["job_id"] for j in plan["collectives"]} & {j["job_id"] for j in plan["training"]}) == 0


# --------------------------------------------------------------------------- explicit world sizes


def test_explicit_world_sizes_drop_those_above_the_gpu_count(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    plan = make_plan(topologies["nvl_pairs"], cfg_with(config, world_sizes=[16, 2, 4]))
    assert plan["world_sizes"] == [2, 4]
    assert {j["world_size"] for j in plan["collectives"]} == {2, 4}
    assert {j["world_size"] for j in plan["training"]} == {4}  # the largest planned


def test_explicit_world_sizes_on_one_gpu(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    plan = make_plan(topologies["single"], cfg_with(config, world_sizes=[1, 2]))
    assert plan["world_sizes"] == [1]


def test_training_world_sizes_list(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    plan = make_plan(topologies["nvswitch"], cfg_with(config, training__world_sizes=[2, 8]))
    strategies = config["training"]["strategies"]
    assert sorted(j["world_size"] for j in plan["training"]) == sorted([2, 8] * len(strategies))
    ws2 = [j for j in plan["training"] if j["world_size"] == 2]
    assert all(j["placement"] == "one_island" for j in ws2)  # the first (best) placement


def test_only_configured_ops_and_transports(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    cfg = cfg_with(config, collectives__ops=["all_to_all"], collectives__transports=["default"])
    plan = make_plan(topologies["nvl_pairs"], cfg)
    assert {(j["op"], j["transport"]) for j in plan["collectives"]} == {("all_to_all", "default")}


@pytest.mark.xfail(strict=True, reason="BUG: world_sizes all above the GPU count leave no world size and make_plan "
                                       "crashes with 'max() arg is an empty sequence' instead of a UserError naming world_sizes")
def test_world_sizes_all_above_gpu_count_is_a_user_error(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    with pytest.raises(UserError, match="world_sizes"):
        make_plan(topologies["nvl_pairs"], cfg_with(config, world_sizes=[16]))
