"""Figure 1's modeled overlay and both bandwidth figures' verdicts are exactly what the database holds.

``gpu_db`` (conftest) is a GPU node's database: the real planner's predictions for a recorded
8x H200 topology, two CONSTRUCTED sweeps on it (one near the links' bandwidth, one far below)
and their verdicts from the real ``evaluate``.
"""

from __future__ import annotations

import json

import duckdb
import pandas as pd
import pytest
from factories import collective_doc, write_docs, default_config

from shardscope.figures.plots import draw_all


def _series(plotted: pd.DataFrame, transport: str) -> pd.DataFrame:
    return plotted[plotted["series"] == f"gpuhost · 8 ranks · all · {transport}"]


@pytest.mark.parametrize("transport", ["default", "pcie"])
def test_modeled_overlay_equals_the_collective_predictions_of_its_series(gpu_db, drawn_gpu, transport):
    plotted = pd.read_csv(drawn_gpu / "busbw_vs_size.csv")
    modeled = _series(plotted, transport).query("method == 'modeled'").sort_values("size_bytes")
    with duckdb.connect(str(gpu_db["db"]), read_only=True) as con:
        truth = con.execute("""
            SELECT size_bytes, busbw_gbps, run_id FROM collective_predictions
            WHERE topology_hash = ? AND op = 'all_reduce' AND world_size = 8 AND transport = ? AND fabric <> 'cpu'
            ORDER BY size_bytes""", [gpu_db["topology_hash"], transport]).df()
    assert len(truth) > 5
    assert modeled["size_bytes"].tolist() == truth["size_bytes"].tolist()
    assert modeled["busbw_gbps"].tolist() == pytest.approx(truth["busbw_gbps"].tolist(), rel=1e-12)
    assert set(modeled["run_id"]) == set(truth["run_id"])
    assert set(modeled["source"]) == {"modeled"} and modeled["verdict_text"].isna().all()
    answer = (drawn_gpu / "busbw_vs_size.answer.rst").read_text()
    assert "modeled curves for 2 of our series" in answer and "No modeled curve for CPU runs" not in answer


def test_legend_verdicts_equal_the_verdicts_table(gpu_db, drawn_gpu):
    plotted = pd.read_csv(drawn_gpu / "busbw_vs_size.csv")
    measured = plotted[(plotted["method"] == "measured")]
    with duckdb.connect(str(gpu_db["db"]), read_only=True) as con:
        truth = con.execute("""SELECT judged_run_id, verdict, plateau_busbw_gbps, percent_of_expected, reason
                               FROM verdicts""").df().set_index("judged_run_id")
    assert sorted(truth["verdict"]) == ["low", "ok"]  # one sweep near the links, one far below
    for run_id, sub in measured.groupby("run_id"):
        row = truth.loc[run_id]
        assert set(sub["verdict"]) == {row["verdict"]}
        assert set(sub["verdict_reason"]) == {row["reason"]}
        expected = f"plateau {row['plateau_busbw_gbps']:.2f} GB/s, {row['percent_of_expected']:.0f}% of expected ({row['verdict']})"
        assert set(sub["verdict_text"]) == {expected}
    best = _series(plotted, "default").query("method == 'measured'")["verdict_text"].iloc[0]
    assert best.endswith("% of expected (ok)")
    assert f"(verdict: {best})" in (drawn_gpu / "busbw_vs_size.answer.rst").read_text()  # the caption quotes it
    low = _series(plotted, "pcie").query("method == 'measured'")
    assert low["verdict_text"].iloc[0].endswith("% of expected (low)")


def test_peak_figure_carries_each_runs_verdict(gpu_db, drawn_gpu):
    peaks = pd.read_csv(drawn_gpu / "allreduce_peak_vs_gpus.csv").set_index("series")
    with duckdb.connect(str(gpu_db["db"]), read_only=True) as con:
        truth = dict(con.execute("SELECT r.transport, v.verdict FROM verdicts v JOIN runs r ON r.run_id = v.judged_run_id").fetchall())
    for transport, verdict in truth.items():
        assert peaks.loc[f"gpuhost · all · {transport}", "verdict"] == verdict
    answer = (drawn_gpu / "allreduce_peak_vs_gpus.answer.rst").read_text()
    assert "% of expected (low))" in answer and "% of expected (ok))" in answer


def test_cpu_runs_get_no_placeholder_curve_and_the_caption_says_why(tmp_path):
    """On a CPU machine the cost model's gloo numbers are placeholders: stored, never drawn as physics."""
    import yaml
    from factories import REPO

    from shardscope.costmodel.documents import plan_predictions, topology_hash
    from shardscope.diagnose.evaluate import evaluate
    from shardscope.plan.planner import make_plan
    from shardscope.results.store import collect
    from shardscope.topology.detect import detect_cpu_only

    topology = json.loads(json.dumps(detect_cpu_only().topology.to_dict()))
    plan = make_plan(topology, default_config())
    predictions = plan_predictions(topology, plan, "cpu", created_at="2026-11-29T00:00:00+00:00")
    assert predictions["collectives"] and {r["fabric"] for r in predictions["collectives"]} == {"cpu"}
    paths = write_docs(tmp_path / "in", [collective_doc("all_reduce", host=topology["source"]["host"])])  # same host
    verdicts = evaluate(paths, topology, "this machine")
    verdicts["topology_hash"] = topology_hash(topology)
    derived = {"topology.json": topology, "predictions.json": predictions, "verdicts.json": verdicts}
    for name, doc in derived.items():
        (tmp_path / name).write_text(json.dumps(doc))
    db = tmp_path / "cpu.duckdb"
    collect(db, [*paths, *(str(tmp_path / name) for name in derived)])
    with duckdb.connect(str(db), read_only=True) as con:  # the placeholders are in the database, joined to the run
        assert con.execute("""SELECT count(*) FROM collective_predictions p JOIN runs r USING (topology_hash)
                              WHERE r.kind = 'collectives'""").fetchone()[0] > 0
    draw_all(db, tmp_path / "figs")
    plotted = pd.read_csv(tmp_path / "figs" / "busbw_vs_size.csv")
    assert set(plotted["method"]) == {"measured"}
    assert set(plotted["verdict_text"]) == {"unknown: CPU processes over gloo"}
    answer = (tmp_path / "figs" / "busbw_vs_size.answer.rst").read_text()
    assert "no physical link model exists for gloo on CPU" in answer


def test_reference_verdicts_are_drawn_from_the_reference_database(reference_db, drawn_with_reference):
    plotted = pd.read_csv(drawn_with_reference / "busbw_vs_size.csv")
    ref = plotted[plotted["source"] == "reference"]
    with duckdb.connect(str(reference_db), read_only=True) as con:
        truth = dict(con.execute("SELECT judged_run_id, verdict FROM verdicts").fetchall())
    assert set(ref["run_id"]) == set(truth)  # every reference run is judged and linked
    for run_id, sub in ref.groupby("run_id"):
        assert set(sub["verdict"]) == {truth[run_id]}
    by_label = ref.groupby("label")["verdict_text"].first()
    assert by_label["2 nodes x 1 A100 PCIe, HDR 200G (nccl-tests#293)"].endswith("% of expected (low)")
    assert by_label["2 nodes x 8 H100 SXM"].endswith("% of expected (ok)")
    # a GeForce board has no PCIe P2P: the model expects host-staged traffic there, so its plateau is as expected
    assert by_label["2 x RTX 2080 Ti, PCIe 3.0"].endswith("% of expected (ok)")
    peaks = pd.read_csv(drawn_with_reference / "allreduce_peak_vs_gpus.csv")
    assert set(peaks.loc[peaks["source"] == "reference", "verdict"]) == {"low", "ok"}
