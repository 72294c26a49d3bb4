"""One answer everywhere (issue 31.6): every place that models a run's peak asks :func:`job_peak` the same question
and gets the same bytes, and every place that ranks strategies gets the same order.

The question: Mistral-7B on 8 GPUs of 80 GB (preset hgx-h100), seq 4096, bf16, micro-batch 1 without checkpointing
and micro-batch 2 with full checkpointing. Asked of ``shardscope memory --json``, ``shardscope advise --json``, the
step model behind ``predict plan`` (:func:`whole_peak_bytes`), the decision map's cell, the report's seed case
(``memory_case_predictions``), figure 3's modeled bars (:func:`modeled_for_job`) and the plan's sizing.
Before issue 31 ``memory`` said 73.4 GB for ZeRO-1 where advise and the report said 60.7 GB.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from shardscope.cli import main
from shardscope.contracts.models import PRESETS
from shardscope.costmodel.answer import job_peak
from shardscope.costmodel.decision_map import cell_decision, panel_setup
from shardscope.costmodel.memory_cases import case_row
from shardscope.costmodel.memory_check import modeled_for_job
from shardscope.costmodel.step import StepAssumptions, whole_peak_bytes
from shardscope.plan.scales import USABLE_FRACTION, memory_scale

STRATEGIES = ("ddp", "fsdp", "zero1", "zero2", "zero3")
MODEL, GPUS, SEQ = "mistral-7b", 8, 4096
#: The usable memory every caller is given (preset hgx-h100's 80 GiB): the caching allocator's cache grows into the
#: room it leaves, so the same room gives the same bytes.
USABLE = 80 * 2**30
CFG = PRESETS[MODEL]


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("micro_batch", "checkpointing"), [(1, "none"), (2, "full")])
def test_every_caller_gets_the_same_bytes(capsys: pytest.CaptureFixture[str], micro_batch: int,
                                          checkpointing: str) -> None:
    question = StepAssumptions(micro_batch=micro_batch, seq_len=SEQ, dtype="bfloat16", checkpointing=checkpointing)
    truth = {s: job_peak(s, CFG, GPUS, question, capacity_bytes=USABLE).peak_bytes for s in STRATEGIES}
    shape = ["--model", MODEL, "--gpus", str(GPUS), "--seq-len", str(SEQ), "--micro-batch", str(micro_batch),
             "--activation-checkpointing", checkpointing, "--dtype", "bfloat16"]
    memory = _json(capsys, "memory", *shape, "--json", "--no-deepspeed-estimate", "--gpu-memory-gb", str(USABLE / 1e9))
    assert {r["strategy"]: r["peak"]["peak_bytes"] for r in memory if r["strategy"] in STRATEGIES} == truth
    advice = _json(capsys, "advise", *shape, "--topology", "preset:hgx-h100", "--json")
    assert {r["strategy"]: r["peak_bytes"] for r in advice["ranking"]} == truth
    assert {s: whole_peak_bytes(s, CFG, GPUS, question, capacity_bytes=USABLE) for s in STRATEGIES} == truth
    report = {s: case_row("seed_mistral", s, MODEL, MODEL, GPUS, SEQ, micro_batch, "bfloat16", checkpointing,
                          USABLE)["peak_bytes"] for s in STRATEGIES}
    assert report == truth
    def run(s: str) -> dict:
        return {"job": {"strategy": s, "model": MODEL, "world_size": GPUS, "micro_batch": micro_batch, "seq_len": SEQ,
                        "dtype": "bfloat16", "activation_checkpointing": checkpointing}, "env": {"device_type": "cuda"}}
    # figure 3 sets the modeled bars beside runs that recorded max_memory_allocated: the same question, on that basis,
    # about this project's worker, whose DDP's gradients are views of its buckets (a run that says so: --ddp-bucket-view)
    worker = replace(question, ddp_bucket_view=True)
    allocated = {s: job_peak(s, CFG, GPUS, worker, basis="allocated").peak_bytes for s in STRATEGIES}
    figure = {s: modeled_for_job(run(s)).peak_bytes for s in STRATEGIES}
    assert figure == allocated
    told = _json(capsys, "memory", *shape, "--ddp-bucket-view", "--json", "--no-deepspeed-estimate", "--gpu-memory-gb",
                 str(USABLE / 1e9))
    assert {r["strategy"]: r["peak"]["peak_bytes"] for r in told if r["strategy"] in STRATEGIES} == {
        s: job_peak(s, CFG, GPUS, worker, capacity_bytes=USABLE).peak_bytes for s in STRATEGIES}
    # torch's default DDP holds its buckets beside the gradients: one more copy of the fp32 gradients (autocast)
    copy = job_peak("ddp", CFG, GPUS, question).phases["forward"]["ddp_bucket_copy"]
    assert copy == CFG.param_count() * 4
    assert truth["ddp"] - job_peak("ddp", CFG, GPUS, worker).peak_bytes == pytest.approx(copy, rel=0.04)


def test_advise_and_the_decision_map_rank_alike(capsys: pytest.CaptureFixture[str]) -> None:
    advice = _json(capsys, "advise", "--model", MODEL, "--gpus", str(GPUS), "--topology", "preset:hgx-h100", "--json")
    cell = cell_decision(panel_setup("nvswitch", GPUS), CFG, 80)
    assert [r["strategy"] for r in advice["decision"]["ranking"]] == [r.strategy for r in cell.ranking]
    assert {r["strategy"]: r["peak_bytes"] for r in advice["ranking"]} == \
        {r.strategy: r.peak_bytes for r in cell.ranking}
    assert advice["recommended"] == cell.recommended


def test_the_plan_sizes_with_the_same_peak() -> None:
    terms = job_peak("zero3", CFG, GPUS, StepAssumptions(seq_len=SEQ))
    peak = terms.peak_bytes
    just = memory_scale({"gpus": [{"memory_bytes": int(terms.device_bytes / USABLE_FRACTION) + 10}] * GPUS},
                        {"model": MODEL}, GPUS)
    assert just.model_name == MODEL and f"{peak / 2**30:.1f} GiB" in just.reason
