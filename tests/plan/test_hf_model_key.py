"""A config's model keys take a Hugging Face ``config.json`` path: jobs carry its name and dimensions, never the path."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from shardscope.errors import UserError
from shardscope.plan.machine import MachineProbe
from shardscope.plan.planner import make_plan
from shardscope.topology.parse import parse_file

REPO = Path(__file__).resolve().parents[2]
NO_PEER = MachineProbe(which=lambda name: None, emulated_problem=lambda delay, prefix: None)


def _plan(gpu_model: Any, memory_bound: Any = None) -> dict[str, Any]:
    config = copy.deepcopy(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    config["gpu"]["model"] = gpu_model
    config["training"]["memory_bound"] = memory_bound
    topo = parse_file(REPO / "tests" / "data" / "topo" / "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt").to_dict()
    for gpu in topo["gpus"]:
        gpu["memory_bytes"] = 80 * 10**9
    return make_plan(topo, config, NO_PEER)


def test_gpu_model_from_a_config_json() -> None:
    plan = _plan(str(REPO / "tests" / "data" / "hf" / "gpt2" / "config.json"))
    jobs = plan["training"]
    assert jobs and all(j["model"] == "gpt2" and "/" not in j["job_id"] for j in jobs)
    assert plan["profile"]["model"]["mlp"] == "gelu" and plan["profile"]["model"]["d_ff"] == 3072


def test_memory_bound_model_from_a_config_json() -> None:
    plan = _plan("gpt2-small", {"model": str(REPO / "tests" / "data" / "hf" / "llama-3.2-1b" / "config.json"),
                                "seq_len": 2048})
    scale = next(s for s in plan["scales"] if s["scale"] == "memory")
    assert scale["planned"] and scale["model"] == "llama-3.2-1b"


def test_a_broken_config_json_names_the_key_and_file(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama", "hidden_size": 64}')
    with pytest.raises(UserError, match=r"config key gpu\.model: .*config\.json: the config has no num_hidden_layers"):
        _plan(str(bad))
