"""One answer everywhere: ``advise``, the decision map, its caption and the report's table come from ``decide``.

The map is read back from a database: the predictions stage's cells (``decision_map_cells``), collected.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from shardscope.costmodel.advise import advise
from shardscope.costmodel.decision import MODEL_TIE_MARGIN, Evidence, MeasuredSpeed, decide
from shardscope.costmodel.decision_map import FABRIC_PRESET, decision_map_rows
from shardscope.costmodel.documents import predictions_document
from shardscope.costmodel.machine import build_machine
from shardscope.costmodel.presets import preset
from shardscope.figures.captions import answer_decision
from shardscope.results.sources import open_results
from shardscope.figures.style import format_params
from shardscope.paper.context import _decision_table
from shardscope.results.queries_decision import decision_map
from shardscope.results.store import collect

MODELS = ("gpt2-small", "llama-1b", "mistral-7b")
GPU_COUNTS = (2, 4, 8)


@pytest.fixture(scope="module")
def map_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database holding one predictions document with the presets' cells at 80 GB on 2, 4 and 8 GPUs."""
    topology = preset("hgx-h100")
    doc = predictions_document(topology, build_machine(topology, source="preset:hgx-h100"),
                               created_at="2026-12-01T00:00:00+00:00")
    doc["decision_map"] = [row for gpus in GPU_COUNTS
                           for row in decision_map_rows(gpus=gpus, memories_gb=(80,), presets_only=True)]
    folder = tmp_path_factory.mktemp("decision_map")
    (folder / "predictions.json").write_text(json.dumps(doc))
    collect(folder / "map.duckdb", [str(folder / "predictions.json")])
    return folder / "map.duckdb"


def stored_map(db: Path, gpus: int) -> pd.DataFrame:
    """The figure's rows of ``db`` on ``gpus`` GPUs, as figure 5 queries them."""
    with open_results(db) as con:
        return decision_map(con, gpus)


class P:
    """The fields ``decide`` reads of a StepPrediction."""

    def __init__(self, strategy: str, step: float, peak: float) -> None:
        self.strategy, self.step_time_s, self.memory_total_bytes = strategy, step, int(peak)


@pytest.mark.parametrize("gpus", GPU_COUNTS)
def test_map_report_caption_and_advise_agree(gpus: int, map_db: Path) -> None:
    memory_gb = 80
    grid = stored_map(map_db, gpus)
    assert set(grid["gpus"]) == {gpus} and set(grid["method"]) == {"modeled"}
    table = _decision_table(grid)
    caption = answer_decision(grid)
    checked = 0
    for fabric in ("nvswitch", "pcie"):
        for model in MODELS:
            cell = grid[(grid["panel"] == fabric) & (grid["preset"] == model)].iloc[0]
            advice = advise(preset(FABRIC_PRESET[fabric]), model, gpus, memory_bytes=memory_gb * 10**9)
            assert advice.decision.recommended == (None if cell["strategy"] == "none" else cell["strategy"]), (fabric, model)
            assert advice.decision.label() == cell["pick"]
            assert advice.to_dict()["recommended"] == advice.decision.recommended
            row = table[(table["panel"] == cell["title"]) & table["model"].str.startswith(model + " ")].iloc[0]
            assert row[f"{memory_gb} GB x {gpus}"] == cell["pick"]
            assert f"{model} ({format_params(cell['n_params'])}) {cell['pick']}" in caption
            checked += 1
    assert checked == 6


def test_a_tie_goes_to_the_least_memory_and_prints_its_margin() -> None:
    d = decide([P("zero2", 1.00, 60e9), P("fsdp", 1.01, 49e9), P("ddp", 0.90, 160e9)], 80 * 10**9, 0.9)
    assert d.fastest == "zero2" and d.recommended == "fsdp" and d.tied == ("zero2", "fsdp")
    assert d.label() == "fsdp (tie with zero2 within 1.0%)" and "5% margin" in d.tie_sentence()
    assert [r.fits for r in d.ranking] == [True, True, False]


def test_outside_the_margin_is_a_ranking_not_a_tie() -> None:
    d = decide([P("ddp", 1.0, 10e9), P("zero1", 1.0 + 2 * MODEL_TIE_MARGIN, 5e9)], 80 * 10**9)
    assert d.recommended == "ddp" and d.tied == () and d.tie_sentence() is None


def test_fits_is_the_whole_peak_within_the_usable_fraction() -> None:
    preds = [P("ddp", 1.0, 75e9), P("zero3", 1.5, 30e9)]
    assert decide(preds, 80 * 10**9, 0.9).recommended == "zero3"  # 75 GB > 72 GB usable
    assert decide(preds, 80 * 10**9, 1.0).recommended == "ddp"
    assert decide(preds, 20 * 10**9).recommended is None and decide(preds, 20 * 10**9).label() == "none"
    assert decide(preds, None).recommended == "ddp"  # memory unknown: nothing is ruled out


def test_measured_evidence_orders_first_and_its_noise_decides_ties() -> None:
    preds = [P("ddp", 1.0, 10e9), P("zero1", 1.2, 8e9), P("zero3", 1.3, 5e9)]
    slow_ddp = Evidence((MeasuredSpeed("zero3", 1.5), MeasuredSpeed("ddp", 1.0)), "measured on h (8 GPUs)")
    d = decide(preds, None, evidence=slow_ddp)
    assert d.recommended == "zero3" and d.source == "measured on h (8 GPUs)" and d.ranking[0].basis == "measured"
    overlap = Evidence((MeasuredSpeed("ddp", 1.0, 0.9, 1.1), MeasuredSpeed("zero3", 0.95, 0.85, 1.02)), "measured on h")
    d = decide(preds, None, evidence=overlap)
    assert d.tied == ("ddp", "zero3") and d.recommended == "zero3"  # intervals overlap: a tie, least memory wins
    apart = Evidence((MeasuredSpeed("ddp", 1.0, 0.98, 1.02), MeasuredSpeed("zero3", 0.95, 0.93, 0.96)), "measured on h")
    assert decide(preds, None, evidence=apart).recommended == "ddp"


def test_the_mistral_case_of_the_issue_is_one_answer(map_db: Path) -> None:
    """Issue 21: advise said ZeRO-2, the map FSDP/ZeRO-3 for Mistral-7B on 8 x H100; now both say the same, as a tie."""
    advice = advise(preset("hgx-h100"), "mistral-7b", 8)
    grid = stored_map(map_db, 8)
    cell = grid[(grid["panel"] == "nvswitch") & (grid["preset"] == "mistral-7b")].iloc[0]
    # ZeRO-2 no longer ties: without overlap_comm (DeepSpeed's default for stage 2) its reduction waits on backward
    assert advice.decision.recommended == cell["strategy"] == "fsdp" and "zero3" in advice.decision.tied
