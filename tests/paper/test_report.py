"""The report renders from the database and the figures alone, with numbers from queries."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from shardscope.errors import UserError
from shardscope.figures.plots import draw_all
from shardscope.paper.render import markdown_table, render_report

TEMPLATE = Path(__file__).resolve().parents[2] / "paper" / "report.md"


def test_report_is_one_self_contained_html_file_with_database_numbers(sample_db, tmp_path):
    draw_all(sample_db, tmp_path / "figs")
    out = render_report(str(sample_db), str(tmp_path / "figs"), str(TEMPLATE), str(tmp_path / "report.html"))
    html = out.read_text()
    assert html.startswith("<!doctype html>")
    assert html.count('src="data:image/png;base64,') == 4
    assert "<table>" in html
    with duckdb.connect(str(sample_db), read_only=True) as con:
        fastest = con.execute("SELECT strategy, median_step_time_s FROM strategy_summary ORDER BY median_step_time_s LIMIT 1").fetchone()
    assert f"<strong>{fastest[0]}</strong> ({fastest[1]:.4f} s per" in html
    assert "1.60" in html  # zero3's step time relative to DDP, from the strategy_summary view
    assert "116 GB" in html  # Mistral-7B under DDP on one GPU, modeled


def test_missing_figures_are_a_user_error(sample_db, tmp_path):
    with pytest.raises(UserError, match="figure not found"):
        render_report(str(sample_db), str(tmp_path / "none"), str(TEMPLATE), str(tmp_path / "r.html"))
    assert not (tmp_path / "r.html").exists()


def test_markdown_table_formats_and_blanks():
    import pandas as pd

    text = markdown_table(pd.DataFrame({"a": ["x", "y"], "b": [1.23456, None]}), {"b": "{:.2f}"})
    assert text.splitlines() == ["| a | b |", "|---|---|", "| x | 1.23 |", "| y | – |"]
