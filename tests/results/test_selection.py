"""Issue 32: figures and report draw the current plan's runs by default (the newest run of each result file the
latest collect loaded), every run on request (`--runs all`), and say which on the page."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from factories import training_doc, write_docs

from shardscope.errors import UserError
from shardscope.results import queries
from shardscope.results.selection import select_runs
from shardscope.results.sources import open_results
from shardscope.results.store import collect


@pytest.fixture
def history(tmp_path: Path) -> Path:
    """A database that saw zero3 in an earlier plan, then a plan of DDP and FSDP whose DDP file was measured twice."""
    db = tmp_path / "results" / "shardscope.duckdb"
    manifest = tmp_path / "results" / "db" / "collect.json"
    old = write_docs(tmp_path / "old", [training_doc(s, step_time_s=0.02) for s in ("ddp", "zero3")])
    collect(db, old, manifest=str(manifest))
    first = write_docs(tmp_path / "new", [training_doc("ddp", step_time_s=0.03,
                                                       measured_at="2026-11-30T00:00:00+00:00"),
                                          training_doc("fsdp", step_time_s=0.04)])
    collect(db, first, manifest=str(manifest))
    again = write_docs(tmp_path / "new", [training_doc("ddp", step_time_s=0.05,
                                                       measured_at="2026-12-01T00:00:00+00:00")])
    collect(db, [*again, first[1]], manifest=str(manifest))
    return db


def speed(db: Path, runs: str) -> dict[str, float]:
    with open_results(db, current=select_runs(db, runs).inputs) as con:
        df = queries.strategy_speed(con)
    return dict(zip(df["strategy"], df["median_step_time_s"]))


def test_current_plan_draws_its_strategies_at_their_newest_run(history: Path):
    assert speed(history, "current") == pytest.approx({"ddp": 0.05, "fsdp": 0.04})
    assert "runs of the current plan" in select_runs(history).description


def test_all_draws_the_history(history: Path):
    assert set(speed(history, "all")) == {"ddp", "fsdp", "zero3"}
    assert "Every run" in select_runs(history, "all").description


def test_without_a_manifest_every_run_is_drawn_and_the_page_says_so(tmp_path: Path):
    db = tmp_path / "x.duckdb"
    collect(db, write_docs(tmp_path / "in", [training_doc("ddp")]))
    selection = select_runs(db)
    assert selection.inputs is None and "no collect manifest" in selection.description
    with pytest.raises(UserError, match="collect manifest not found"):
        select_runs(db, manifest=tmp_path / "missing.json")


def test_figures_command_says_which_runs_it_drew(history: Path, tmp_path: Path):
    out = tmp_path / "figs"
    proc = subprocess.run([sys.executable, "-m", "shardscope", "figures", "--db", str(history), "--no-reference",
                           "--out", str(out)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "runs of the current plan" in json.loads((out / "figures.json").read_text())["runs"]
    assert "ZeRO-3" not in (out / "speed_vs_ddp.answer.rst").read_text()
