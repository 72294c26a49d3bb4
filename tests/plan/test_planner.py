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
from factories import default_config

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
    return default_config()


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


def default_training(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The training jobs of the default condition (training.strategies at training.world_sizes) of the
    profile's model (the communication-bound scale)."""
    ids = {i for c in plan["training_conditions"] if c["condition"] == "default" for i in c["jobs"]}
    return [j for j in plan["training"] if j["job_id"] in ids and j["model_spec"] == plan["profile"]["model"]]


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
            assert job["env"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}  # CUDA numbers GPUs as nvidia-smi does
    ops = config["collectives"]["ops"]
    for ws, places in by_ws.items():
        for name in places:
            jobs = [j for j in plan["collectives"] if j["world_size"] == ws and j["placement"] == name]
            assert sorted((j["op"], j["transport"]) for j in jobs) == sorted((o, t) for o in ops for t in ("default", "pcie"))

    assert {j["world_size"] for j in default_training(plan)} == {8}  # training.world_sizes: max
    # NVL pairs: HSDP (4 islands x 2) and ZeRO-3 with hpZ (partition 2) beside the configured strategies
    # (training.hsdp: auto, training.hpz: auto)
    assert [j["strategy"] for j in default_training(plan)] == [*config["training"]["strategies"], "hsdp", "zero3_hpz"]
    assert {j["model"] for j in plan["training"]} == {config["gpu"]["model"], config["training"]["memory_bound"]["model"]}


def test_pcie_only_plan_has_no_pcie_transport(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    plan = make_plan(topologies["pcie"], config)
    assert plan["world_sizes"] == [2, 4, 8]
    assert plan["collectives"]
    assert {j["transport"] for j in plan["collectives"]} == {"default"}
    assert all(j["env"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"} for j in plan["collectives"])


def test_single_gpu_plan(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    plan = make_plan(topologies["single"], config)
    assert plan["device"] == "gpu"
    assert plan["world_sizes"] == [1]
    assert plan["collectives"] == []  # nothing to communicate with one rank
    assert [j["strategy"] for j in default_training(plan)] == config["training"]["strategies"]
    assert all(j["world_size"] == 1 and j["devices"] == [0] for j in default_training(plan))


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
    assert {j["world_size"] for j in default_training(plan)} == {4}  # the largest planned


def test_explicit_world_sizes_on_one_gpu(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    plan = make_plan(topologies["single"], cfg_with(config, world_sizes=[1, 2]))
    assert plan["world_sizes"] == [1]


def test_training_world_sizes_list(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    plan = make_plan(topologies["nvswitch"], cfg_with(config, training__world_sizes=[2, 8]))
    strategies = config["training"]["strategies"]
    assert sorted(j["world_size"] for j in default_training(plan)) == sorted([2, 8] * len(strategies))
    ws2 = [j for j in default_training(plan) if j["world_size"] == 2]
    assert all(j["placement"] == "one_island" for j in ws2)  # the first (best) placement


def test_only_configured_ops_and_transports(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    cfg = cfg_with(config, collectives__ops=["all_to_all"], collectives__transports=["default"])
    plan = make_plan(topologies["nvl_pairs"], cfg)
    assert {(j["op"], j["transport"]) for j in plan["collectives"]} == {("all_to_all", "default")}


def test_world_sizes_all_above_gpu_count_is_a_user_error(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    with pytest.raises(UserError, match="world_sizes"):
        make_plan(topologies["nvl_pairs"], cfg_with(config, world_sizes=[16]))


def test_training_world_sizes_selecting_nothing_is_a_user_error(config: dict[str, Any],
                                                                topologies: dict[str, dict[str, Any]]) -> None:
    with pytest.raises(UserError, match=r"training\.world_sizes"):
        make_plan(topologies["nvswitch"], cfg_with(config, training__world_sizes=[3, 16]))


def test_world_sizes_error_says_what_was_expected(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    with pytest.raises(UserError) as info:
        make_plan(topologies["single"], cfg_with(config, world_sizes=[2, 4]))
    assert "world_sizes" in str(info.value) and "at most 1" in str(info.value)


# --------------------------------------------------------------------------- placements


ALL_FIXTURES = sorted(p.name for p in TOPO.glob("*.txt"))
PCIE_NAMES = {"same_switch", "cross_switch"}
NVLINK_NAMES = {"one_island", "cross_island"}
DISTANCE = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}


def _pair_codes(topology: dict[str, Any], devices: list[int]) -> set[str]:
    wanted = {(a, b) for a in devices for b in devices if a < b}
    return {link["code"] for link in topology["links"] if (link["a"], link["b"]) in wanted}


def _numa_groups(topology: dict[str, Any], devices: list[int]) -> int:
    """NUMA nodes a set spans: NUMA ids when known, else sockets separated by SYS paths."""
    numa = numa_of(topology)
    if all(numa[g] is not None for g in devices):
        return len({numa[g] for g in devices})
    return 2 if "SYS" in _pair_codes(topology, devices) else 1


def _check_placement(topology: dict[str, Any], name: str, devices: list[int]) -> None:
    """Each placement name means what planner.py's docstring says."""
    island = island_of(topology)
    codes = _pair_codes(topology, devices)
    nvlink_pairs = {(link["a"], link["b"]) for link in topology["links"] if link["nvlinks"]}
    if name == "one_island":
        assert len({island[g] for g in devices}) == 1
    elif name == "cross_island":
        assert len({island[g] for g in devices}) >= 2
    elif name == "same_switch":
        assert codes <= {"PIX", "PXB"}
    elif name == "cross_switch":
        assert codes & {"PHB", "NODE"} and "SYS" not in codes
    elif name == "cross_numa":
        assert _numa_groups(topology, devices) >= 2
    elif name == "all":
        assert devices == [g["index"] for g in topology["gpus"]]
    if name in PCIE_NAMES:
        assert not nvlink_pairs  # switch names only where no NVLink exists
    if name in NVLINK_NAMES:
        assert nvlink_pairs  # island names only where NVLink exists


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_every_placement_means_its_name(config: dict[str, Any], name: str) -> None:
    topology = parse_file(TOPO / name).to_dict()
    plan = make_plan(topology, config)
    seen = set()
    for entry in plan["placements"]:
        _check_placement(topology, entry["placement"], entry["devices"])
        assert entry["cuda_visible_devices"] == ",".join(map(str, entry["devices"]))
        key = (entry["world_size"], tuple(entry["devices"]))
        assert key not in seen  # one name per GPU set
        seen.add(key)
    for job in plan["collectives"] + plan["training"]:
        assert job["cuda_visible_devices"] == ",".join(map(str, job["devices"]))
        assert {"world_size": job["world_size"], "placement": job["placement"], "devices": job["devices"]}.items() <= next(
            e for e in plan["placements"] if (e["world_size"], e["placement"]) == (job["world_size"], job["placement"])
        ).items()


def test_nvl_pairs_small_job_pinned_to_one_nvl_group(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    plan = make_plan(topologies["nvl_pairs"], config)
    by = {(e["world_size"], e["placement"]): e for e in plan["placements"]}
    assert (by[(2, "one_island")]["cuda_visible_devices"], by[(2, "one_island")]["slowest_link"]) == ("0,1", "NV12")
    assert by[(2, "cross_island")]["slowest_link"] == "NODE"  # another island on the same socket
    assert by[(2, "cross_numa")]["slowest_link"] == "SYS"
    assert (4, "one_island") not in by  # islands of 2 cannot hold 4 ranks
    four = by[(4, "cross_island")]
    assert (four["islands"], four["numa_nodes"]) == (2, 1)  # two whole NVL pairs on one NUMA node
    assert [e["placement"] for e in plan["placements"] if e["world_size"] == 8] == ["all"]


def test_pcie_switch_trees_are_named_by_switch_not_island(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    plan = make_plan(topologies["pcie"], config)
    by = {(e["world_size"], e["placement"]): e["devices"] for e in plan["placements"]}
    assert by == {
        (2, "same_switch"): [0, 1],  # the PIX pair, nearer than any PXB pair
        (2, "cross_numa"): [0, 4],  # the two quads sit on different sockets (SYS)
        (4, "same_switch"): [0, 1, 2, 3],
        (4, "cross_numa"): [0, 1, 4, 5],
        (8, "all"): list(range(8)),
    }  # no cross_switch: no pair goes through a host bridge without leaving the socket


def test_pcie_host_bridges_give_cross_switch(config: dict[str, Any]) -> None:
    topology = parse_file(TOPO / "19-7x-gtx10xx-soc-old-driver-ansi.txt").to_dict()
    plan = make_plan(topology, config)
    by = {(e["world_size"], e["placement"]): e["devices"] for e in plan["placements"]}
    assert by[(2, "cross_switch")] == [0, 1] and by[(4, "cross_switch")] == [0, 1, 2, 3]
    assert by[(4, "cross_numa")] == [0, 1, 4, 5]
    assert not any(name in ("same_switch", "one_island", "cross_island") for _, name in by)


def test_nvswitch_cross_numa_spreads_over_all_numa_nodes(config: dict[str, Any]) -> None:
    topology = parse_file(TOPO / "05-dgx-a100-nv12-mlx5-columns-old-format.txt").to_dict()
    by = {(e["world_size"], e["placement"]): e for e in make_plan(topology, config)["placements"]}
    assert by[(4, "one_island")]["devices"] == [0, 1, 2, 3] and by[(4, "one_island")]["numa_nodes"] == 2
    assert by[(4, "cross_numa")]["devices"] == [0, 2, 4, 6] and by[(4, "cross_numa")]["numa_nodes"] == 4


def test_one_gpu_of_several(config: dict[str, Any], topologies: dict[str, dict[str, Any]]) -> None:
    plan = make_plan(topologies["nvswitch"], cfg_with(config, world_sizes=[1], training__world_sizes=[1]))
    assert plan["collectives"] == []
    assert {(j["placement"], j["cuda_visible_devices"]) for j in plan["training"]} == {("one_gpu", "0")}


def test_cpu_jobs_see_no_gpu(config: dict[str, Any]) -> None:
    plan = make_plan(detect_cpu_only().topology.to_dict(), config)
    assert all(j["cuda_visible_devices"] == "" and j["env"] == {} for j in plan["collectives"] + plan["training"])
    assert plan["placements"] == [{"world_size": 2, "placement": "local", "devices": [], "cuda_visible_devices": "",
                                   "islands": 0, "numa_nodes": 0, "slowest_link": None}]


def test_amd_jobs_get_no_cuda_device_order(config: dict[str, Any]) -> None:
    topology = parse_file(TOPO / "22-amd-rocm-smi-showtopo-4x-mi300a.txt").to_dict()
    assert all("CUDA_DEVICE_ORDER" not in j["env"] for j in make_plan(topology, config)["collectives"])


def _synthetic(n: int) -> dict[str, Any]:
    """n GPUs in NVLink pairs, NODE within each half, SYS across, NUMA node per half."""
    from shardscope.topology.model import Gpu, Link, Topology

    half = n // 2
    links = [Link(a, b, "NV12", 12) if a // 2 == b // 2 else Link(a, b, "NODE" if (a < half) == (b < half) else "SYS")
             for a in range(n) for b in range(a + 1, n)]
    gpus = [Gpu(i, numa_node=int(i >= half)) for i in range(n)]
    return Topology(gpus=gpus, links=links, numa_nodes=[], source={"method": "test"}, accelerator="nvidia").to_dict()


def test_many_gpus_use_built_candidates(config: dict[str, Any]) -> None:
    from shardscope.plan import placement

    topology = _synthetic(24)  # C(24, 8) sets exceed MAX_COMBINATIONS
    by = {(e["world_size"], e["placement"]): e for e in make_plan(topology, config)["placements"]}
    assert by[(2, "one_island")]["devices"] == [0, 1]
    assert (by[(8, "cross_island")]["islands"], by[(8, "cross_island")]["numa_nodes"]) == (4, 1)
    assert by[(8, "cross_numa")]["numa_nodes"] == 2
    for (ws, name), entry in by.items():
        _check_placement(topology, name, entry["devices"])
    assert placement.MAX_COMBINATIONS < 735471


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_built_candidates_find_the_same_placement_names(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    from shardscope.plan import placement

    topology = parse_file(TOPO / name).to_dict()
    sizes = range(2, topology["gpu_count"])
    exhaustive = {n: [p.name for p in placement.placements(topology, n)] for n in sizes}
    monkeypatch.setattr(placement, "MAX_COMBINATIONS", 0)
    for n in sizes:
        built = placement.placements(topology, n)
        assert [p.name for p in built] == exhaustive[n]
        for p in built:
            _check_placement(topology, p.name, list(p.devices))
