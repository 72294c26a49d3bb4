"""``emulated.enabled: auto``, the shipped default (issue 32 item 9): the quick start on a machine without GPUs runs
the emulated fabrics where the machine allows, else the plan says in one sentence why not; a GPU node runs none."""

from __future__ import annotations

from pathlib import Path

import yaml

from shardscope.config import validate_config
from shardscope.plan.machine import MachineProbe
from shardscope.plan.planner import make_plan
from shardscope.topology.detect import detect_cpu_only
from shardscope.topology.parse import parse_file
from factories import default_config

REPO = Path(__file__).resolve().parents[2]
ABLE = MachineProbe(which=lambda name: None, emulated_problem=lambda delay, prefix: None)
UNABLE = MachineProbe(which=lambda name: None, emulated_problem=lambda delay, prefix: "needs root (ip netns)")


def _auto() -> dict:
    config = default_config()
    config["emulated"]["enabled"] = "auto"
    return config


def _reasons(plan: dict) -> list[str]:
    return [s["reason"] for s in plan["skipped"] if s["stage"] == "emulated"]


def test_the_shipped_config_asks_for_auto_and_the_schema_takes_it() -> None:
    shipped = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert shipped["emulated"]["enabled"] == "auto"
    validate_config(_auto(), REPO / "workflow" / "schemas" / "config.schema.yaml")


def test_auto_on_a_cpu_machine_that_can_build_fabrics_plans_them() -> None:
    plan = make_plan(detect_cpu_only().topology.to_dict(), _auto(), ABLE)
    assert plan["emulated"] and not _reasons(plan)
    assert any(job.get("emulated") for job in plan["training"])


def test_auto_where_the_machine_cannot_build_them_skips_with_one_sentence() -> None:
    plan = make_plan(detect_cpu_only().topology.to_dict(), _auto(), UNABLE)
    assert not plan["emulated"] and not any(job.get("emulated") for job in plan["training"])
    assert _reasons(plan) == ["emulated fabrics skipped: needs root (ip netns)"]


def test_auto_on_a_gpu_node_runs_no_emulated_fabric_and_says_so() -> None:
    topology = parse_file(REPO / "tests" / "data" / "topo" / "01-hgx-h200-nvswitch-nv18-12nics.txt").to_dict()
    plan = make_plan(topology, _auto(), ABLE)
    assert not plan["emulated"] and not any(job.get("emulated") for job in plan["training"])
    (reason,) = _reasons(plan)
    assert "GPU node measures its real fabrics" in reason and "emulated.enabled: auto" in reason
    on = default_config()
    on["emulated"]["enabled"] = True
    assert make_plan(topology, on, ABLE)["emulated"]  # true still runs them there


def test_false_plans_none_and_says_nothing() -> None:
    config = default_config()
    assert config["emulated"]["enabled"] is False  # the tests' default (tests/factories.py)
    plan = make_plan(detect_cpu_only().topology.to_dict(), config, ABLE)
    assert not plan["emulated"] and not _reasons(plan)
