"""Speed relative to DDP has one definition (shardscope.results.views): the strategy_summary view that
`db export` writes and the figures' strategy_speed give the same ratios, repeated runs included."""

from __future__ import annotations

import duckdb
import pytest
from factories import training_doc, write_docs

from shardscope.results.queries import strategy_speed
from shardscope.results.sources import open_results
from shardscope.results.store import collect

EARLY, LATE = "2026-11-29T00:00:00+00:00", "2026-11-30T09:00:00+00:00"


def _db(tmp_path, docs):
    db = tmp_path / "views.duckdb"
    collect(db, write_docs(tmp_path / "in", docs))
    return db


def test_the_view_and_the_figures_agree_on_speed_relative_to_the_latest_ddp_run(tmp_path):
    db = _db(tmp_path, [training_doc("ddp", step_time_s=0.02, measured_at=EARLY),
                        training_doc("zero3", step_time_s=0.05, measured_at=EARLY),
                        training_doc("ddp", step_time_s=0.04, measured_at=LATE),
                        training_doc("zero3", step_time_s=0.06, measured_at=LATE)])
    with duckdb.connect(str(db), read_only=True) as con:
        view = sorted(con.execute("SELECT strategy, median_step_time_s, step_time_vs_ddp FROM strategy_summary").fetchall())
    # every run is compared with the latest DDP run (0.04 s), the older ones too
    assert view == [("ddp", 0.02, pytest.approx(0.5)), ("ddp", 0.04, 1.0),
                    ("zero3", 0.05, pytest.approx(1.25)), ("zero3", 0.06, pytest.approx(1.5))]
    with open_results(db) as con:
        figures = strategy_speed(con).set_index("strategy")["step_time_vs_ddp"].to_dict()
    latest = {s: r for s, t, r in view if t in (0.04, 0.06)}
    assert figures == pytest.approx(latest)


def test_no_ratio_when_the_latest_ddp_run_did_not_finish(tmp_path):
    db = _db(tmp_path, [training_doc("ddp", step_time_s=0.02, measured_at=EARLY),
                        training_doc("ddp", outcome="oom", measured_at=LATE),
                        training_doc("zero3", step_time_s=0.05, measured_at=LATE)])
    with duckdb.connect(str(db), read_only=True) as con:
        ratios = con.execute("SELECT DISTINCT step_time_vs_ddp FROM strategy_summary").fetchall()
    with open_results(db) as con:
        figures = strategy_speed(con)
    assert ratios == [(None,)] and figures["step_time_vs_ddp"].isna().all()
