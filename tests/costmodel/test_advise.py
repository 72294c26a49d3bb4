"""``advise``: ranking, explanation, JSON contract and user errors."""

from __future__ import annotations

import json

import pytest
from costmodel.published import TOPO_FILES, topology
from shardscope.costmodel.advise import DEFAULT_STRATEGIES, advise
from shardscope.costmodel.calibrate import Calibration
from shardscope.costmodel.presets import preset
from shardscope.costmodel.step import StepAssumptions
from shardscope.errors import UserError

JSON_KEYS = {"method", "model", "gpus", "nodes", "fabric", "gpu", "memory_bytes", "placement", "allreduce_busbw_gbps",
             "bottleneck", "ranking", "recommended", "decision", "nvl_groups", "explanation", "assumptions", "notes"}


def test_ranking_puts_fitting_strategies_first_by_step_time() -> None:
    advice = advise(preset("hgx-h100"), "mistral-7b", 8)
    fits = [p.fits for p in advice.ranking]
    assert fits == sorted(fits, key=lambda f: f is False)
    fitting = [p.step_time_s for p in advice.ranking if p.fits]
    assert fitting == sorted(fitting)
    assert {p.strategy for p in advice.ranking} == set(DEFAULT_STRATEGIES)


def test_explanation_is_three_sentences() -> None:
    advice = advise(preset("hgx-h100"), "mistral-7b", 8)
    assert len(advice.explanation) == 3
    assert all(s.endswith(".") for s in advice.explanation)
    assert "communication" in advice.explanation[0] and "GB/s" in advice.explanation[0]


def test_json_contract() -> None:
    out = advise(preset("h100-nvl-pairs"), "llama-1b", 2).to_dict()
    assert set(out) == JSON_KEYS
    assert out["method"] == "modeled" and all(row["method"] == "modeled" for row in out["ranking"])
    assert out["recommended"] == out["decision"]["recommended"] in [row["strategy"] for row in out["ranking"]]
    assert out["decision"]["rule"] == "docs/design.md, 'The decision rule'"
    assert out["nvl_groups"]["inside"]["gpus"] == [0, 1]
    json.dumps(out)


@pytest.mark.parametrize("file", [f for f in TOPO_FILES if "single" not in f])
def test_advise_runs_on_every_real_gpu_topology(file: str) -> None:
    doc = topology(f"topo/{file}")
    advice = advise(doc, "gpt2-small", 2, peak_tflops=100.0, memory_bytes=16 * 2**30)
    assert advice.ranking and len(advice.explanation) == 3


def test_single_gpu_and_multi_node() -> None:
    single = advise(topology("topo/18-single-gpu-h100-k8s-pod.txt"), "gpt2-small", 1, gpu_name="H100")
    assert single.ranking[0].comm_time_s == 0 and "One GPU" in single.explanation[2]
    multi = advise(preset("dgx-a100"), "mistral-7b", 16)
    assert multi.nodes == 2 and "2 nodes" in multi.explanation[2]


def test_memory_unknown_is_said() -> None:
    advice = advise(topology("topo/13-8x-pcie-pix-pxb-sys-numa-na.txt"), "gpt2-small", 4, peak_tflops=100.0)
    assert all(p.fits is None for p in advice.ranking)
    assert "unknown" in advice.explanation[1]


def test_nothing_fits() -> None:
    advice = advise(preset("hgx-h100"), "mistral-7b", 1)
    assert all(p.fits is False for p in advice.ranking) and "Nothing fits" in advice.explanation[1]


def test_calibration_changes_the_communication_time() -> None:
    base = advise(preset("hgx-h100"), "llama-1b", 8)
    slow = {op: Calibration(op, 1e-3, 0.1, 10, 0.0) for op in ("all_reduce", "all_gather", "reduce_scatter")}
    calibrated = advise(preset("hgx-h100"), "llama-1b", 8, calibrations=slow)
    assert min(p.comm_time_s for p in calibrated.ranking) > 5 * min(p.comm_time_s for p in base.ranking)


def test_assumptions_flow_through() -> None:
    a = StepAssumptions(micro_batch=4, seq_len=1024, mfu=0.3, overlap=0.0)
    advice = advise(preset("hgx-h100"), "llama-1b", 8, assumptions=a)
    assert advice.to_dict()["assumptions"]["overlap"] == 0.0
    assert all(p.exposed_comm_time_s == pytest.approx(p.comm_time_s) for p in advice.ranking)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"model": "gpt-9"}, "preset"), ({"strategies": ("zero4",)}, "strategy"), ({"gpus": 12}, "multiple"),
    ({"gpus": 0}, "positive"), ({"gpu_name": "Quantum 9000"}, "--peak-tflops")])
def test_user_errors(kwargs: dict, match: str) -> None:
    args = {"model": "llama-1b", "gpus": 8, **kwargs}
    with pytest.raises(UserError, match=match):
        advise(preset("hgx-h100"), args.pop("model"), args.pop("gpus"), **args)


@pytest.mark.parametrize("gpu", ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5090", "NVIDIA L40S", "NVIDIA A10",
                                 "NVIDIA B200", "NVIDIA B300", "NVIDIA GB200", "AMD Instinct MI300X", "Tesla T4",
                                 "NVIDIA RTX A6000", "NVIDIA H20", "NVIDIA H800"])
def test_a_gpu_known_by_name_never_refuses(gpu: str) -> None:
    advice = advise(preset("hgx-h100"), "llama-1b", 8, gpu_name=gpu)
    assert advice.ranking[0].compute_time_s > 0 and advice.machine.memory_bytes


def test_an_unnamed_gpu_names_the_flags_to_use() -> None:
    doc = preset("pcie-l40s")
    for g in doc["gpus"]:
        g["name"] = None
    with pytest.raises(UserError, match="--gpu.*--peak-tflops"):
        advise(doc, "llama-1b", 2)
    assert advise(doc, "llama-1b", 2, peak_tflops=100.0).ranking


def test_cpu_topology_is_a_user_error() -> None:
    with pytest.raises(UserError, match="no GPUs"):
        advise({"gpus": [], "links": [], "fabric": "cpu"}, "tiny", 2)
