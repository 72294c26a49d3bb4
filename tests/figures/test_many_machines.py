"""A database of many machines: figures stay bounded, plot exactly their query, and rank machines of a kind."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pandas as pd
import pytest
from factories import collective_doc, training_doc, write_docs, default_config

from shardscope.results import queries
from shardscope.figures.plots import FIGURES, draw_all
from shardscope.results.sources import open_results

#: 14 machines: 12 of one kind (CPU "AMD EPYC"), 2 of another ("Intel Xeon"); node-07 is slow.
HOSTS = [f"node-{i:02d}" for i in range(14)]
SLOW = "node-07"
MAX_WIDTH_PX = 4000


def _docs(host: str) -> list[dict]:
    slow = 1.5 if host == SLOW else 1.0
    wobble = 1 + 0.01 * (int(host[-2:]) % 5)  # machines of a kind differ a little
    docs = [collective_doc("all_reduce", host=host, seconds_per_byte=1e-9 * slow * wobble),
            training_doc("ddp", host=host, step_time_s=0.02 * slow * wobble),
            training_doc("zero3", host=host, step_time_s=0.03 * slow * wobble)]
    if int(host[-2:]) >= 12:
        for doc in docs:
            doc["env"]["devices"] = ["Intel Xeon"]
    return docs


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The fleet's runs and one CPU machine's predictions (so the decision map has its stored cells)."""
    import yaml
    from factories import REPO, write_json

    from shardscope.costmodel.documents import plan_predictions
    from shardscope.plan.planner import make_plan
    from shardscope.results.store import collect
    from shardscope.topology.detect import detect_cpu_only

    tmp = tmp_path_factory.mktemp("fleet")
    db = tmp / "fleet.duckdb"
    topology = json.loads(json.dumps(detect_cpu_only().topology.to_dict()))
    plan = make_plan(topology, default_config())
    predictions = write_json(tmp / "predictions.json", plan_predictions(topology, plan, "cpu", created_at="2026-11-29T00:00:00+00:00"))
    collect(db, [*write_docs(tmp / "in", [doc for host in HOSTS for doc in _docs(host)]), predictions])
    draw_all(db, tmp / "figs")
    return db, tmp / "figs"


def _png_width(path: Path) -> int:
    return struct.unpack(">I", path.read_bytes()[16:20])[0]


def test_every_figure_stays_within_the_width_bound(fleet):
    _, figs = fleet
    widths = {f.name: _png_width(figs / f"{f.name}.png") for f in FIGURES}
    assert all(w <= MAX_WIDTH_PX for w in widths.values()), widths


def test_the_figures_data_is_exactly_the_query(fleet):
    db, figs = fleet
    with open_results(db, None) as con:
        expected = {f.name: f.query(con) for f in FIGURES} | {"machine_ranking": queries.machine_ranking(con)}
    assert len(expected) == 6 and all(len(df) for df in expected.values())
    for name, df in expected.items():
        assert (figs / f"{name}.csv").read_text() == df.to_csv(index=False), name
    speed = pd.read_csv(figs / "speed_vs_ddp.csv")
    assert set(speed["host"]) == set(HOSTS) and set(speed["gpu_model"]) == {"cpu", "Intel Xeon"}
    points = expected["decision_map"][expected["decision_map"]["method"] == "measured"]
    assert sorted(points["host"]) == HOSTS and set(points["strategy"]) == {"ddp"} and set(points["panel"]) == {"pcie"}


def test_machines_of_a_kind_are_ranked_and_the_slow_one_named(fleet):
    _, figs = fleet
    ranking = pd.read_csv(figs / "machine_ranking.csv")
    ddp = ranking[(ranking["measure"] == "DDP tokens/s") & (ranking["gpu_model"] == "cpu")]
    assert len(ddp) == 12 and ddp.iloc[0]["host"] == SLOW and ddp.iloc[0]["rank"] == 1
    assert ddp.set_index("host").loc[SLOW, "verdict"] == "slow"
    assert set(ddp[ddp["host"] != SLOW]["verdict"]) == {"ok"}
    assert ddp["vs_kind_median"].tolist() == pytest.approx((ddp["value"] / ddp["value"].median()).tolist())
    answer = (figs / "machine_ranking.answer.rst").read_text()
    assert f"1 slow: {SLOW}" in answer


def test_captions_summarise_instead_of_listing_every_host(fleet):
    _, figs = fleet
    speed = (figs / "speed_vs_ddp.answer.rst").read_text()
    memory = (figs / "memory_by_strategy.answer.rst").read_text()
    assert "12 machines" in speed and "across machines" in speed
    assert "On 12 machines (cpu, cpu; median per strategy" in memory
    busbw = (figs / "busbw_vs_size.answer.rst").read_text()
    peak = (figs / "allreduce_peak_vs_gpus.answer.rst").read_text()
    assert "12 machines: median peak" in busbw and f"lowest 0.65 GB/s, {SLOW}" in busbw
    assert "12 series: at 2 ranks median" in peak and f"lowest 0.65 GB/s, {SLOW}" in peak
    for text in (busbw, peak):
        assert sum(host in text for host in HOSTS) <= 4, text  # the band's lowest and highest, the small kind's two
    for text in (speed, memory):
        assert sum(host in text for host in HOSTS) <= 2, text  # the two machines of the small kind may be named


def test_figures_1_and_2_draw_one_band_per_kind_instead_of_a_line_per_machine(fleet):
    """12 machines of one kind and 2 of another: two median lines, each with a band from the lowest to the highest machine."""
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    from shardscope.figures.plots_collectives import draw_allreduce_peak, draw_busbw_vs_size

    db, _ = fleet
    with open_results(db, None) as con:
        busbw, peaks = queries.busbw_vs_size(con), queries.allreduce_peak_vs_gpus(con)
    big = busbw[busbw["host"].isin(HOSTS[:12])].groupby("size_bytes")["busbw_gbps"]
    for fig, rows, x, y in ((draw_busbw_vs_size(busbw), busbw, "size_bytes", "busbw_gbps"),
                            (draw_allreduce_peak(peaks), peaks, "world_size", "peak_busbw_gbps")):
        try:
            (ax,) = fig.axes
            lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
            assert len(lines) == 2, list(lines)  # one per kind, not one per machine
            (label,) = [name for name in lines if "12 machines, median line, min-max band" in name]
            kind = rows[rows["host"].isin(HOSTS[:12])].groupby(x)[y]
            assert lines[label].get_ydata().tolist() == pytest.approx(kind.median().tolist())
            band = [c for c in ax.collections if isinstance(c, PolyCollection) and len(c.get_paths()[0].vertices) > 2]
            spans = [(c.get_paths()[0].vertices[:, 1].min(), c.get_paths()[0].vertices[:, 1].max()) for c in band]
            if x == "size_bytes":  # the band spans the lowest to the highest machine (node-07 is the lowest)
                assert (big.min().min(), big.max().max()) in [pytest.approx(s) for s in spans], spans
        finally:
            plt.close(fig)


def test_the_reports_ranking_table_is_exactly_the_query(fleet, tmp_path):
    import html
    import re

    from shardscope.paper.render import render_report

    db, figs = fleet
    report = render_report(db, figs, Path(__file__).parents[2] / "paper" / "report.md", tmp_path / "report.html").read_text()
    section = report.split("<h3>Machines of the same kind</h3>", 1)[1].split("<h3>", 1)[0]
    table = section.split("<table>", 1)[1].split("</table>", 1)[0]
    rows = [[html.unescape(cell) for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)]
    with open_results(db, None) as con:
        ranking = queries.machine_ranking(con)
    assert rows[0] == ["fabric", "GPU model", "measure", "setting", "rank", "machine", "value", "unit",
                       "vs median of kind", "machines of kind", "verdict"]
    assert len(rows) - 1 == len(ranking) == 2 * len(HOSTS)
    expected = [[r.fabric, r.gpu_model, r.measure, r.setting, str(r.rank), r.host, f"{r.value:.4g}", r.unit,
                 f"{r.vs_kind_median:.2f}", str(r.machines_of_kind), r.verdict] for r in ranking.itertuples()]
    assert rows[1:] == expected
    assert [r[5] for r in rows[1:] if r[-1] == "slow"] == [SLOW, SLOW]  # slow in bandwidth and in throughput
    assert f"1 slow: {SLOW}" in section
