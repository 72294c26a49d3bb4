"""Multi-node jobs in the plan (config ``cluster``): planned beside the single-node ones, only with cluster.nodes > 1."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from shardscope.cluster.executor import multinode_problem
from shardscope.config import validate_config
from shardscope.errors import UserError
from shardscope.plan.multinode import JOB_SUFFIX, MULTINODE_JOB, SINGLE_NODE_JOB
from shardscope.plan.planner import make_plan
from shardscope.topology.detect import detect_cpu_only
from shardscope.topology.parse import parse_file
from factories import default_config

REPO = Path(__file__).resolve().parents[2]
TOPO = REPO / "tests" / "data" / "topo"
NVL_PAIRS = TOPO / "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt"
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return default_config()


@pytest.fixture(scope="module")
def cpu_topology() -> dict[str, Any]:
    return detect_cpu_only().topology.to_dict()


@pytest.fixture(scope="module")
def gpu_topology() -> dict[str, Any]:
    return parse_file(NVL_PAIRS).to_dict()  # 8x H100 NVL: NVLink pairs, two NUMA nodes


def with_cluster(config: dict[str, Any], **cluster: Any) -> dict[str, Any]:
    out = copy.deepcopy(config)
    out["cluster"] = cluster
    return out


def all_jobs(plan: dict[str, Any]) -> list[dict[str, Any]]:
    section = plan.get("multi_node", {})
    return [*plan["collectives"], *plan["training"], *section.get("collectives", []), *section.get("training", [])]


def test_the_default_config_plans_one_node_exactly_as_without_a_cluster_section(config, cpu_topology, gpu_topology):
    assert config["cluster"]["nodes"] == 1
    without = {k: v for k, v in config.items() if k != "cluster"}
    for topology in (cpu_topology, gpu_topology):
        plan = make_plan(topology, config)
        assert "multi_node" not in plan
        assert plan == make_plan(topology, without)
        assert not any(j["job_id"].endswith(JOB_SUFFIX) for j in all_jobs(plan))


def test_cpu_two_nodes_add_one_rank_per_node_jobs_beside_the_single_node_ones(config, cpu_topology):
    cfg = with_cluster(config, nodes=2)
    plan = make_plan(cpu_topology, cfg)
    single = make_plan(cpu_topology, config)
    assert {k: v for k, v in plan.items() if k != "multi_node"} == single  # single-node jobs unchanged

    section = plan["multi_node"]
    assert (section["nodes"], section["nproc_per_node"], section["world_size"]) == (2, 1, 2)
    assert (section["node_placement"], section["devices"], section["cuda_visible_devices"]) == ("local", [], "")
    assert [j["op"] for j in section["collectives"]] == config["collectives"]["ops"]
    assert [j["strategy"] for j in section["training"]] == config["training"]["strategies"]
    for job in section["collectives"] + section["training"]:
        assert (job["placement"], job["nodes"], job["nproc_per_node"], job["world_size"]) == ("multi_node", 2, 1, 2)
        assert job["env"] == {} and job["devices"] == [] and job["job_id"].endswith(JOB_SUFFIX)
    assert {j["transport"] for j in section["collectives"]} == {"default"}
    assert section["collectives"][0]["job_id"] == f"{config['collectives']['ops'][0]}-ws2-2x1-multi_node-default-mn"
    assert section["training"][0]["job_id"] == f"{config['training']['strategies'][0]}-tiny-ws2-2x1-multi_node-mn"


def test_cpu_processes_per_node_come_from_gpus_per_node(config, cpu_topology):
    section = make_plan(cpu_topology, with_cluster(config, nodes=3, gpus_per_node=2))["multi_node"]
    assert (section["nodes"], section["nproc_per_node"], section["world_size"]) == (3, 2, 6)
    assert {j["job_id"].split("-")[2] for j in section["collectives"]} == {"3x2"}


def test_gpu_two_nodes_use_every_gpu_of_each_node_by_default(config, gpu_topology):
    plan = make_plan(gpu_topology, with_cluster(config, nodes=2))
    section = plan["multi_node"]
    assert (section["nodes"], section["nproc_per_node"], section["world_size"]) == (2, 8, 16)
    assert section["node_placement"] == "all" and section["devices"] == list(range(8))
    assert section["cuda_visible_devices"] == "0,1,2,3,4,5,6,7"
    assert (section["islands"], section["numa_nodes"]) == (4, 2)
    for job in section["collectives"] + section["training"]:
        assert job["world_size"] == 16 and job["placement"] == "multi_node"
        assert job["env"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}  # NVIDIA numbering; no NCCL PCIe knobs
    assert {j["transport"] for j in section["collectives"]} == {"default"}  # not pcie, though NVLink exists
    assert {j["model"] for j in section["training"]} == {config["gpu"]["model"]}
    # the single-node plan keeps its world sizes and pcie transport
    assert plan["world_sizes"] == [2, 4, 8] and {j["transport"] for j in plan["collectives"]} == {"default", "pcie"}


def test_gpu_fewer_ranks_per_node_take_the_tightest_gpus(config, gpu_topology):
    section = make_plan(gpu_topology, with_cluster(config, nodes=4, gpus_per_node=2))["multi_node"]
    assert (section["world_size"], section["node_placement"], section["devices"]) == (8, "one_island", [0, 1])
    assert section["slowest_link"] == "NV12"
    assert all(j["cuda_visible_devices"] == "0,1" for j in section["collectives"] + section["training"])


def test_every_job_id_is_unique_and_routed_to_exactly_one_kind_of_rule(config, cpu_topology, gpu_topology):
    for topology in (cpu_topology, gpu_topology):
        plan = make_plan(topology, with_cluster(config, nodes=2))
        ids = [j["job_id"] for j in all_jobs(plan)]
        assert len(ids) == len(set(ids))
        multi = {j["job_id"] for j in plan["multi_node"]["collectives"] + plan["multi_node"]["training"]}
        for job_id in ids:
            assert bool(re.fullmatch(MULTINODE_JOB, job_id)) == (job_id in multi), job_id
            assert bool(re.fullmatch(SINGLE_NODE_JOB, job_id)) == (job_id not in multi), job_id


def test_more_gpus_per_node_than_a_node_has_is_a_user_error(config, gpu_topology):
    with pytest.raises(UserError, match=r"config key cluster\.gpus_per_node: 16 exceeds the 8 GPU\(s\).*at most 8"):
        make_plan(gpu_topology, with_cluster(config, nodes=2, gpus_per_node=16))


def test_a_topology_probed_on_other_nodes_than_configured_is_a_user_error(config, cpu_topology):
    probed = dict(cpu_topology, node_count=2, nodes=[])
    assert "multi_node" in make_plan(probed, with_cluster(config, nodes=2))
    with pytest.raises(UserError, match=r"config key cluster\.nodes: 4, but the topology was probed on 2 node\(s\)"):
        make_plan(probed, with_cluster(config, nodes=4))
    assert "multi_node" not in make_plan(probed, config)  # one-node jobs on one node of it are fine


@pytest.mark.parametrize(("cluster", "valid"), [
    ({"nodes": 2}, True),
    ({"nodes": 2, "gpus_per_node": None}, True),
    ({"nodes": 2, "gpus_per_node": 4}, True),
    ({"nodes": 0}, False),
    ({"nodes": 2, "gpus_per_node": 0}, False),
    ({"nodes": 2, "hosts": 3}, False),
])
def test_the_config_schema_checks_the_cluster_section(config, cluster, valid):
    cfg = with_cluster(config, **cluster)
    if valid:
        validate_config(cfg, SCHEMA)
    else:
        with pytest.raises(UserError, match=r"invalid config key cluster"):
            validate_config(cfg, SCHEMA)


def test_multinode_runs_need_the_slurm_executor():
    assert multinode_problem(1, "local") is None and multinode_problem(1, None) is None
    assert multinode_problem(2, "slurm") is None and multinode_problem(2, "slurm-jobstep") is None
    message = multinode_problem(2, "local")
    assert message is not None and message.count(". ") == 0 and "--profile profiles/slurm" in message
    assert "cluster.nodes is 2" in message and "local executor" in message
    assert "local executor" in (multinode_problem(3, None) or "")
