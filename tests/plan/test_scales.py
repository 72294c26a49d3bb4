"""The two model scales of a GPU plan: gpt2-small (communication-bound) and the seed's Mistral-7B shape, sized
from the GPU memory the probe saw (saved real topologies; the memory is set as the GPU's data sheet gives it)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from shardscope.plan.machine import MachineProbe
from shardscope.plan.planner import make_plan
from shardscope.costmodel.answer import job_peak
from shardscope.costmodel.step import StepAssumptions
from shardscope.contracts.models import PRESETS
from shardscope.plan.scales import USABLE_FRACTION, memory_scale
from shardscope.topology.detect import detect_cpu_only
from shardscope.topology.parse import parse_file
from factories import default_config

REPO = Path(__file__).resolve().parents[2]
TOPO = REPO / "tests" / "data" / "topo"
NO_PEER = MachineProbe(which=lambda name: None, emulated_problem=lambda delay, prefix: None)
GB = 10**9


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return default_config()


def topology(name: str, memory_bytes: int | None) -> dict[str, Any]:
    topo = parse_file(TOPO / name).to_dict()
    for gpu in topo["gpus"]:
        gpu["memory_bytes"] = memory_bytes
    return topo


def memory_jobs(plan: dict[str, Any]) -> list[dict[str, Any]]:
    model = next(s["model"] for s in plan["scales"] if s["scale"] == "memory" and s["planned"])
    return [j for j in plan["training"] if j["model"] == model]


def test_eight_80gb_gpus_train_both_scales_and_ddp_of_the_7b_is_expected_to_oom(config: dict[str, Any]) -> None:
    plan = make_plan(topology("10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt", 80 * GB), config, NO_PEER)
    scales = {s["scale"]: s for s in plan["scales"]}
    assert scales["communication"]["model"] == "gpt2-small" and scales["memory"]["model"] == "mistral-7b"
    assert "does not fit (expect an oom row)" in scales["memory"]["reason"]
    jobs = memory_jobs(plan)
    assert [j["strategy"] for j in jobs] == config["training"]["memory_bound"]["strategies"]
    assert {(j["seq_len"], j["micro_batch"], j["dtype"], j["world_size"]) for j in jobs} == {(4096, 1, "bfloat16", 8)}
    assert {j["job_id"] for j in jobs} >= {"ddp-mistral-7b-ws8-all", "zero3-mistral-7b-ws8-all"}
    assert {j["job_id"] for j in plan["training"] if j["model"] == "gpt2-small"} >= {"ddp-gpt2-small-ws8-all"}


def test_a_single_80gb_gpu_scales_down_and_says_why(config: dict[str, Any]) -> None:
    plan = make_plan(topology("18-single-gpu-h100-k8s-pod.txt", 80 * GB), config, NO_PEER)
    scale = next(s for s in plan["scales"] if s["scale"] == "memory")
    assert scale["model"] == "llama-1b" and scale["reason"].startswith("scaled down to llama-1b: mistral-7b")
    assert {j["seq_len"] for j in memory_jobs(plan)} == {2048}  # llama-1b's longest sequence


def test_small_gpus_scale_down_and_too_small_ones_plan_no_memory_scale(config: dict[str, Any]) -> None:
    dgx1 = make_plan(topology("08-dgx1-v100-hybrid-cube-mesh-nv1-nv2.txt", 16 * GB), config, NO_PEER)
    assert next(s for s in dgx1["scales"] if s["scale"] == "memory")["model"] == "llama-1b"
    tiny = make_plan(topology("18-single-gpu-h100-k8s-pod.txt", 8 * GB), config, NO_PEER)
    scale = next(s for s in tiny["scales"] if s["scale"] == "memory")
    assert not scale["planned"] and "llama-1b would peak at" in scale["reason"]
    assert {j["model"] for j in tiny["training"]} == {"gpt2-small"}


def test_the_whole_zero3_peak_decides_where_the_7b_fits() -> None:
    """The plan sizes with the one whole-peak function (advise's and memory's bytes), not model states alone."""
    section = {"model": "mistral-7b"}
    peak = job_peak("zero3", PRESETS["mistral-7b"], 8, StepAssumptions(seq_len=4096)).device_bytes  # what must fit
    fits = memory_scale({"gpus": [{"memory_bytes": int(peak / USABLE_FRACTION) + 2}] * 8}, section, 8)
    below = memory_scale({"gpus": [{"memory_bytes": int(peak / USABLE_FRACTION) - 2**20}] * 8}, section, 8)
    assert fits.model_name == "mistral-7b" and below.model_name == "llama-1b"


def test_unknown_memory_plans_the_configured_model_and_cpu_plans_none(config: dict[str, Any]) -> None:
    plan = make_plan(topology("13-8x-pcie-pix-pxb-sys-numa-na.txt", None), config, NO_PEER)
    scale = next(s for s in plan["scales"] if s["scale"] == "memory")
    assert scale["model"] == "mistral-7b" and "not detected" in scale["reason"]
    cpu = make_plan(detect_cpu_only().topology.to_dict(), config, NO_PEER)
    assert [s["planned"] for s in cpu["scales"]] == [True, False] and {j["model"] for j in cpu["training"]} == {"tiny"}
    off = copy.deepcopy(config)
    off["training"]["memory_bound"] = None
    assert [s["scale"] for s in make_plan(topology("18-single-gpu-h100-k8s-pod.txt", 80 * GB), off, NO_PEER)["scales"]] == ["communication"]
