"""Activation checkpointing and the optimizer-state variant, run for real: 2 CPU ranks each, measured against the model.

Two short runs of the tiny model (1 warmup + 1 timed step, about 5 s each): FSDP2 with full
checkpointing in fp32, and ZeRO-2 in bf16 with full checkpointing and DeepSpeed's bf16 master
weights and moments (``adamw_bf16_states``). The overhead fraction is the one calibrated on the
session's DDP run (``conftest.strategy_runs``), as in ``test_memory_proof.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shardscope.costmodel.memory_check import compare_job, modeled_for_job
from shardscope.costmodel.memory_peak import StepShape, calibrate_overhead, predict_peak
from shardscope.contracts.models import PRESETS
from tests.training.conftest import run_train

TOLERANCE = 0.10
RUNS = {
    "fsdp_ckpt": ("fsdp", "--activation-checkpointing", "full"),
    "zero2_bf16_states_ckpt": ("zero2", "--dtype", "bfloat16", "--optimizer", "adamw_bf16_states",
                               "--activation-checkpointing", "full"),
}


@pytest.fixture(scope="module")
def knob_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    docs = {}
    for name, (strategy, *flags) in RUNS.items():
        tmp = tmp_path_factory.mktemp(name)
        proc, out, _ = run_train(tmp, strategy, "tiny", name, "--seed", "7", "--steps", "1", *flags)
        assert proc.returncode == 0, proc.stderr[-3000:]
        doc = json.loads(out.read_text())
        assert doc["outcome"] == "ok", doc.get("error")
        docs[name] = doc
    return docs


@pytest.fixture(scope="module")
def overhead_fraction(strategy_runs: dict[str, dict[str, Any]]) -> float:
    doc = strategy_runs["ddp"]["doc"]
    return calibrate_overhead(max(r["tracked_peak_bytes"] for r in doc["ranks"]), modeled_for_job(doc))


@pytest.mark.parametrize("name", RUNS)
def test_every_category_within_10_percent_of_the_model_with_the_knobs(knob_runs: dict[str, dict[str, Any]],
                                                                     overhead_fraction: float, name: str) -> None:
    row = compare_job(knob_runs[name], overhead_fraction)
    off = {k: round(v["ratio"], 3) for k, v in row["categories"].items() if v["ratio"] and abs(v["ratio"] - 1) > TOLERANCE}
    assert not off, f"{name}: measured/modeled outside 10%: {off} (phases {row['measured_phase']}/{row['modeled_phase']})"


def test_the_result_records_the_knobs_and_checkpointing_shrinks_the_activations(
        knob_runs: dict[str, dict[str, Any]], strategy_runs: dict[str, dict[str, Any]]) -> None:
    doc = knob_runs["fsdp_ckpt"]
    assert (doc["job"]["activation_checkpointing"], doc["job"]["optimizer"]) == ("full", "adamw")
    without = strategy_runs["fsdp"]["doc"]
    measured = max(r["activation_peak_bytes"] for r in doc["ranks"])
    assert measured < 0.6 * max(r["activation_peak_bytes"] for r in without["ranks"])
    # the losses do not change: checkpointing recomputes the same numbers
    assert doc["steps"][0]["loss"] == pytest.approx(without["steps"][0]["loss"], rel=1e-5)


def test_bf16_states_halve_deepspeeds_optimizer_bytes(knob_runs: dict[str, dict[str, Any]]) -> None:
    doc = knob_runs["zero2_bf16_states_ckpt"]
    assert doc["job"]["optimizer"] == "adamw_bf16_states"
    assert doc["job"]["deepspeed_config"]["bf16"]["bf16_optimizer_states"] is True
    measured = max(r["optim_bytes"] for r in doc["ranks"])
    n = PRESETS["tiny"].param_count()
    assert measured == pytest.approx(6 * n / 2, rel=0.02)  # bf16 master (2) + two bf16 moments (4), sharded over 2
    default = predict_peak("zero2", PRESETS["tiny"], 2, StepShape(2, 64, "bfloat16"), device="cpu").optim_bytes
    assert measured < 0.55 * default  # AdamW's fp32 master and moments: 12 bytes per parameter


@pytest.mark.parametrize(("flags", "fragment"), [
    (["--activation-checkpointing", "selective"], "--activation-checkpointing is 'selective'; expected one of none, full"),
    (["--optimizer", "adamw_8bit"], "--optimizer is 'adamw_8bit'; expected one of adamw, adamw_bf16_states"),
    (["--optimizer", "adamw_bf16_states"], "runs only under zero1, zero2, zero3 with dtype bfloat16"),
])
def test_bad_knobs_stop_before_torchrun(tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str],
                                        fragment: str) -> None:
    from shardscope.cli import main

    code = main(["train", "--strategy", "ddp", "--model", "tiny", "--nproc", "2", "--cpu", "--out", str(tmp_path / "r.json"),
                 "--log", str(tmp_path / "r.log"), *flags])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.json").exists()
