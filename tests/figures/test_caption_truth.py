"""Issue 32: every sentence a caption or the report says about the data comes from one tested function, checked
here on constructed data that makes it true and data that makes it false.

The numbers of the issue: DDP [0.94-1.07], ZeRO-2 [0.46-0.92], ZeRO-3 [0.43-0.73] (tokens/s relative to DDP):
the old caption called all of them "within noise (95% intervals overlap)", which they are not.
"""

from __future__ import annotations

import pandas as pd
import pytest

from shardscope.figures.captions import answer_memory, answer_speed, noise_against_best, noise_sentence


def runs(intervals: dict[str, tuple[float, float, float] | None]) -> pd.DataFrame:
    """One finished run per strategy: (median, low, high) of tokens/s relative to DDP (DDP's tokens/s = 1000),
    None for a run without an interval (one repeat)."""
    rows = []
    for strategy, values in intervals.items():
        median, low, high = values or (0.8, None, None)
        rows.append({"host": "h", "fabric": "nvswitch", "gpu_model": "H200", "model": "gpt2-small", "world_size": 8,
                     "placement": "all", "transport": "default", "strategy": strategy, "outcome": "ok",
                     "tokens_per_s_vs_ddp": median, "median_step_time_s": 1 / median,
                     "ci95_low_tokens_per_s": None if low is None else 1000 * low,
                     "ci95_high_tokens_per_s": None if high is None else 1000 * high})
    return pd.DataFrame(rows)


ISSUE = {"ddp": (1.0, 0.94, 1.07), "zero1": (0.98, 0.90, 1.01), "zero2": (0.7, 0.46, 0.92), "zero3": (0.6, 0.43, 0.73)}


def test_only_runs_whose_interval_overlaps_the_best_are_called_within_noise():
    df = runs(ISSUE)
    comparison = noise_against_best(df.iloc[0], df)
    assert (comparison.tied, comparison.apart, comparison.unjudged) == (["zero1"], ["zero2", "zero3"], [])
    sentence = noise_sentence(comparison, "1.00x")
    assert sentence.startswith("no single fastest: ZeRO-1 within noise of DDP")
    assert "ZeRO-2, ZeRO-3 slower beyond the noise" in sentence
    caption = answer_speed(df)
    assert "of each other" not in caption and "ZeRO-2, ZeRO-3 slower beyond the noise" in caption


def test_a_best_interval_apart_from_every_other_names_one_fastest():
    df = runs({"ddp": (1.0, 0.97, 1.03), "zero2": (0.7, 0.46, 0.92), "zero3": (0.6, 0.43, 0.73)})
    comparison = noise_against_best(df.iloc[0], df)
    assert comparison.tied == [] and comparison.apart == ["zero2", "zero3"]
    sentence = noise_sentence(comparison, "1.00x")
    assert sentence.startswith("fastest DDP (1.00x)") and "no single fastest" not in sentence


def test_overlap_with_the_best_is_not_claimed_between_the_others():
    # ZeRO-1 and ZeRO-2 each overlap DDP's wide interval but not each other: only "within noise of DDP" is said.
    df = runs({"ddp": (1.0, 0.80, 1.20), "zero1": (1.1, 1.05, 1.15), "zero2": (0.85, 0.82, 0.88)})
    comparison = noise_against_best(df.iloc[0], df)
    assert comparison.tied == ["zero1", "zero2"]
    assert "within noise of DDP" in noise_sentence(comparison, "1.00x")


def test_runs_without_an_interval_are_not_judged():
    df = runs({"ddp": (1.0, 0.97, 1.03), "zero3": None})
    comparison = noise_against_best(df.iloc[0], df)
    assert comparison.unjudged == ["zero3"] and comparison.tied == comparison.apart == []
    assert "ZeRO-3 without a 95% interval, so not judged" in noise_sentence(comparison, "1.00x")


def memory_rows(strategies: list[str], fabric: str = "cpu") -> pd.DataFrame:
    return pd.DataFrame([{"host": "h", "fabric": fabric, "gpu_model": "cpu", "model": "tiny", "world_size": 2,
                          "dtype": "float32", "strategy": s, "method": "measured", "memory_model": None,
                          "param_bytes": 4e6, "grad_bytes": 4e6, "optim_bytes": 8e6 / (2 if s != "ddp" else 1),
                          "held_bytes": 16e6 / (1 if s == "ddp" else 1.3), "peak_memory_bytes": None,
                          "rest_bytes": None, "capacity_bytes": None} for s in strategies])


@pytest.mark.parametrize(("strategies", "said"), [(["ddp", "zero3"], False), (["zero3"], True)])
def test_no_ddp_run_finished_is_said_only_without_a_finished_ddp_run(strategies, said):
    assert ("no DDP run finished" in answer_memory(memory_rows(strategies))) is said


def test_runs_over_every_emulated_preset_are_one_memory_panel_apart_from_the_hosts_own(gpu_db):
    """The gpu_db fixture holds emulated runs over three presets (DDP and ZeRO-3; one ran out of memory): figure 3
    drew one panel per preset, each with the same title, and said "no DDP run finished" beside a finished DDP run."""
    import matplotlib

    matplotlib.use("Agg")
    from shardscope.figures.plots_training import draw_memory_by_strategy
    from shardscope.results.queries import memory_measured_and_modeled
    from shardscope.results.sources import open_results

    with open_results(gpu_db["db"]) as con:
        df = memory_measured_and_modeled(con)
    emulated = df[df["host"] == "emuhost"]
    assert set(emulated["fabric"]) == {"emulated"} and set(emulated["strategy"]) == {"ddp", "zero3"}
    assert "no DDP run finished" not in answer_memory(df)
    fig = draw_memory_by_strategy(df)
    titles = [ax.get_title() for ax in fig.axes if "parameters, gradients" in ax.get_title()]
    assert len(titles) == len(set(titles)) == 2 and any("emulated fabric" in t for t in titles)


@pytest.mark.parametrize("n", [1, 5, 16, 50])
def test_every_series_of_figures_1_and_2_has_its_own_colour(n):
    from shardscope.figures.plots_collectives import _series_colors

    colors = _series_colors([f"series {i}" for i in range(n)])
    assert len(set(colors.values())) == n
