"""The report renders from the database and the figures alone, with numbers from queries."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from shardscope.errors import UserError
from shardscope.figures.plots import FIGURES
from shardscope.figures.reference import load_manifest
from shardscope.paper.render import markdown_table, render_report

TEMPLATE = Path(__file__).resolve().parents[2] / "paper" / "report.md"


def _text(html: str) -> str:
    """The report's visible text: images dropped, tags removed, whitespace collapsed."""
    html = re.sub(r'src="data:image/png;base64,[^"]+"', "", html)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_report_is_one_self_contained_html_file_with_database_numbers(module_db, drawn, tmp_path):
    out = render_report(str(module_db), str(drawn), str(TEMPLATE), str(tmp_path / "report.html"), bundled_reference=False)
    html = out.read_text()
    assert html.startswith("<!doctype html>")
    assert html.count('src="data:image/png;base64,') == len(FIGURES)
    assert "<table>" in html and "http://" not in html.replace("http://www.w3.org", "")
    with duckdb.connect(str(module_db), read_only=True) as con:
        fastest = con.execute("SELECT strategy, median_step_time_s FROM strategy_summary ORDER BY median_step_time_s LIMIT 1").fetchone()
    assert f"<strong>{fastest[0]}</strong> ({fastest[1]:.4f} s per" in html
    assert "1.60" in html  # zero3's step time relative to DDP, from the strategy_summary view
    assert "116 GB" in html  # Mistral-7B under DDP on one GPU, modeled


def test_every_figure_caption_carries_its_question_and_computed_answer(module_db, drawn, tmp_path):
    out = render_report(str(module_db), str(drawn), str(TEMPLATE), str(tmp_path / "report.html"), bundled_reference=False)
    text = _text(out.read_text()).replace("&#x27;", "'")
    index = json.loads((drawn / "figures.json").read_text())["figures"]
    for entry in index:
        assert f"Figure {entry['number']}. {entry['title']}." in text
        assert entry["answer"] in text, entry["name"]


def test_report_lists_reference_runs_with_their_sources(module_db, reference_db, drawn_with_reference, tmp_path):
    out = render_report(str(module_db), str(drawn_with_reference), str(TEMPLATE), str(tmp_path / "r.html"),
                        reference_db=str(reference_db))
    text = _text(out.read_text())
    for run in load_manifest():
        assert run.source_url in text and run.label in text
    assert "338.827" in text  # the H100 reference peak, from the database
    assert "Reference (not measured here): 3 public" in text


def test_report_recommends_from_measurements_and_the_decision_map(module_db, drawn, tmp_path):
    text = _text(render_report(str(module_db), str(drawn), str(TEMPLATE), str(tmp_path / "r.html"),
                               bundled_reference=False).read_text())
    assert "Measured: On hostA (cpu), tiny on 2 ranks: DDP was fastest (0.0200 s per step)" in text
    assert "mistral-7b (7.24 B) FSDP / ZeRO-3" in text and "mistral-7b (7.24 B) ZeRO-1" in text


def test_missing_figures_are_a_user_error(module_db, tmp_path):
    with pytest.raises(UserError, match="figure index not found"):
        render_report(str(module_db), str(tmp_path / "none"), str(TEMPLATE), str(tmp_path / "r.html"), bundled_reference=False)
    assert not (tmp_path / "r.html").exists()


def test_a_deleted_png_is_a_user_error(module_db, drawn, tmp_path):
    import shutil

    shutil.copytree(drawn, tmp_path / "figs")
    (tmp_path / "figs" / "decision_map.png").unlink()
    with pytest.raises(UserError, match="decision_map.png: figure not found"):
        render_report(str(module_db), str(tmp_path / "figs"), str(TEMPLATE), str(tmp_path / "r.html"), bundled_reference=False)
    assert not (tmp_path / "r.html").exists()


def test_markdown_table_formats_and_blanks():
    import pandas as pd

    text = markdown_table(pd.DataFrame({"a": ["x", "y"], "b": [1.23456, None]}), {"b": "{:.2f}"})
    assert text.splitlines() == ["| a | b |", "|---|---|", "| x | 1.23 |", "| y | – |"]
    assert markdown_table(pd.DataFrame({"a": ["<b>|"]})).splitlines()[2] == "| &lt;b&gt;&#124; |"
