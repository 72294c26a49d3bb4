"""Figure 4 draws each run's 95% interval over repeats, and its answer calls overlapping intervals a tie."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from factories import training_doc, write_docs  # noqa: E402

from shardscope.results import queries  # noqa: E402
from shardscope.figures.captions import answer_speed  # noqa: E402
from shardscope.figures.plots_training import draw_speed_vs_ddp  # noqa: E402
from shardscope.results.sources import open_results  # noqa: E402
from shardscope.results.store import collect  # noqa: E402


def _with_interval(strategy: str, step_s: float, spread: float) -> dict:
    doc = training_doc(strategy, step_time_s=step_s)
    doc["summary"].update(repeats=3, ci95_low_step_time_s=step_s / spread, ci95_high_step_time_s=step_s * spread,
                          ci95_low_tokens_per_s=256 / (step_s * spread), ci95_high_tokens_per_s=256 * spread / step_s)
    return doc


def _speed(tmp_path, docs):
    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "in", docs))
    with open_results(db) as con:
        return queries.strategy_speed(con)


def test_overlapping_intervals_are_a_tie_and_bars_are_drawn(tmp_path):
    speed = _speed(tmp_path, [_with_interval("ddp", 0.020, 1.2), _with_interval("fsdp", 0.021, 1.2),
                              _with_interval("zero3", 0.040, 1.05)])
    fsdp = speed.set_index("strategy").loc["fsdp"]
    assert fsdp["ci95_low_vs_ddp"] == pytest.approx((256 / (0.021 * 1.2)) / (256 / 0.020))
    answer = answer_speed(speed)
    assert "no single fastest: FSDP within noise of DDP" in answer and "slowest ZeRO-3" in answer
    assert "ZeRO-3 slower beyond the noise" in answer
    fig = draw_speed_vs_ddp(speed)
    bars = [c for c in fig.axes[0].containers if type(c).__name__ == "ErrorbarContainer"]
    assert len(bars) == 1 and len(bars[0].lines[2][0].get_segments()) == 3  # one interval per strategy


def test_separate_intervals_name_the_fastest_and_one_repeat_draws_no_bar(tmp_path):
    speed = _speed(tmp_path, [_with_interval("ddp", 0.020, 1.01), _with_interval("fsdp", 0.030, 1.01),
                              training_doc("zero3", step_time_s=0.04)])  # zero3: one repeat, no interval
    assert "fastest DDP (1.00x" in answer_speed(speed)
    fig = draw_speed_vs_ddp(speed)
    bars = [c for c in fig.axes[0].containers if type(c).__name__ == "ErrorbarContainer"]
    assert len(bars[0].lines[2][0].get_segments()) == 2
