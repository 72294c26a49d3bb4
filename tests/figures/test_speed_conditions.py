"""Figure 4 has one panel per fabric condition: the same strategies inside vs across an island, NVLink on vs off."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from factories import training_doc, write_docs  # noqa: E402

from shardscope.results import queries  # noqa: E402
from shardscope.figures.plots_training import draw_speed_vs_ddp  # noqa: E402
from shardscope.results.sources import open_results  # noqa: E402
from shardscope.results.store import collect  # noqa: E402


def _run(strategy: str, step_s: float, placement: str, transport: str | None = None) -> dict:
    doc = training_doc(strategy, step_time_s=step_s)
    doc["job"].update(job_id=f"{strategy}-tiny-ws2-{placement}-{transport}", placement=placement)
    if transport:
        doc["job"]["transport"] = transport
    return doc


def test_each_condition_is_its_own_panel_against_its_own_ddp(tmp_path):
    docs = [_run("ddp", 0.020, "one_island"), _run("zero3", 0.030, "one_island"),
            _run("ddp", 0.040, "cross_island"), _run("zero3", 0.120, "cross_island"),
            _run("ddp", 0.050, "cross_island", "pcie"), _run("zero3", 0.200, "cross_island", "pcie")]
    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "in", docs))
    with open_results(db) as con:
        speed = queries.strategy_speed(con)
    ratio = speed.set_index(["placement", "transport", "strategy"])["tokens_per_s_vs_ddp"]
    assert ratio[("one_island", "default", "zero3")] == pytest.approx(0.020 / 0.030)
    assert ratio[("cross_island", "default", "zero3")] == pytest.approx(0.040 / 0.120)
    assert ratio[("cross_island", "pcie", "zero3")] == pytest.approx(0.050 / 0.200)
    fig = draw_speed_vs_ddp(speed)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert len(titles) == 3 and any("cross_island · pcie" in t for t in titles) and any("one_island · default" in t for t in titles)
