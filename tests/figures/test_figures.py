"""Figures are drawn from the database alone, and what they plot is what the database says."""

from __future__ import annotations

import time

import duckdb
import pandas as pd
import pytest

from shardscope.figures.plots import FIGURES, draw_all


def test_every_figure_is_written_as_png_pdf_and_data(sample_db, tmp_path):
    written = draw_all(sample_db, tmp_path / "figs")
    for figure in FIGURES:
        for ext in ("png", "pdf", "csv"):
            path = tmp_path / "figs" / f"{figure.name}.{ext}"
            assert path in written and path.stat().st_size > 0
        assert (tmp_path / "figs" / f"{figure.name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (tmp_path / "figs" / f"{figure.name}.pdf").read_bytes()[:5] == b"%PDF-"


def test_bandwidth_figure_plots_the_database_values(sample_db, tmp_path):
    draw_all(sample_db, tmp_path)
    plotted = pd.read_csv(tmp_path / "busbw_vs_size.csv")
    with duckdb.connect(str(sample_db), read_only=True) as con:
        truth = con.execute("SELECT op, size_bytes, busbw_gbps FROM collectives ORDER BY op, size_bytes").df()
    got = plotted[["op", "size_bytes", "busbw_gbps"]].sort_values(["op", "size_bytes"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, truth, check_dtype=False)


def test_memory_figure_plots_measured_bytes_and_the_zero_model(sample_db, tmp_path):
    draw_all(sample_db, tmp_path)
    plotted = pd.read_csv(tmp_path / "memory_by_strategy.csv")
    measured = plotted[plotted["method"] == "measured"].set_index("strategy")
    with duckdb.connect(str(sample_db), read_only=True) as con:
        truth = con.execute("SELECT t.strategy, max(m.optim_bytes) FROM training_memory m JOIN training_runs t USING (run_id) GROUP BY 1").fetchall()
    for strategy, optim in truth:
        assert measured.loc[strategy, "optim_bytes"] == optim
    modeled = plotted[plotted["method"] == "modeled"].set_index("strategy")
    n = 787072
    # fp32 Adam on 2 ranks: DDP 4+4+8 bytes per parameter; ZeRO-3 shards all three.
    assert (modeled.loc["ddp", ["param_bytes", "grad_bytes", "optim_bytes"]].tolist() == [4 * n, 4 * n, 8 * n])
    assert (modeled.loc["zero3", ["param_bytes", "grad_bytes", "optim_bytes"]].tolist() == [2 * n, 2 * n, 4 * n])


def test_speed_figure_is_normalised_to_ddp(sample_db, tmp_path):
    draw_all(sample_db, tmp_path)
    plotted = pd.read_csv(tmp_path / "speed_vs_ddp.csv").set_index("strategy")
    assert plotted.loc["ddp", "step_time_vs_ddp"] == pytest.approx(1.0)
    assert plotted.loc["zero3", "step_time_vs_ddp"] == pytest.approx(1.6)


def test_empty_database_still_draws_every_figure(tmp_path):
    from shardscope.results.store import ddl

    db = tmp_path / "empty.duckdb"
    with duckdb.connect(str(db)) as con:
        for statement in ddl():
            con.execute(statement)
    written = draw_all(db, tmp_path / "figs")
    assert len(written) == 3 * len(FIGURES)


def test_missing_database_is_a_user_error(tmp_path):
    from shardscope.errors import UserError

    with pytest.raises(UserError, match="database not found"):
        draw_all(tmp_path / "nope.duckdb", tmp_path / "figs")


def test_regenerating_figures_is_fast(sample_db, tmp_path):
    start = time.perf_counter()
    draw_all(sample_db, tmp_path)
    assert time.perf_counter() - start < 20
