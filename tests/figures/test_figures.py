"""Figures are drawn from the database alone, and what they plot is what the database says."""

from __future__ import annotations

import copy
import json
import time

import duckdb
import pandas as pd
import pytest
from factories import collective_doc, training_doc, write_docs

from shardscope.figures.plots import FIGURES, draw_all

EXTENSIONS = ("png", "pdf", "csv", "answer.rst")


def test_every_figure_is_written_as_png_pdf_data_and_answer(drawn):
    for figure in FIGURES:
        for ext in EXTENSIONS:
            assert (drawn / f"{figure.name}.{ext}").stat().st_size > 0
        assert (drawn / f"{figure.name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (drawn / f"{figure.name}.pdf").read_bytes()[:5] == b"%PDF-"
    index = json.loads((drawn / "figures.json").read_text())["figures"]
    assert [f["name"] for f in index] == [f.name for f in FIGURES]
    assert [f["number"] for f in index] == list(range(1, len(FIGURES) + 1))
    assert all(f["question"].endswith("?") and f["answer"] for f in index)


def test_bandwidth_figure_plots_the_database_values(module_db, drawn):
    plotted = pd.read_csv(drawn / "busbw_vs_size.csv")
    with duckdb.connect(str(module_db), read_only=True) as con:
        truth = con.execute("SELECT op, size_bytes, busbw_gbps FROM collectives ORDER BY op, size_bytes").df()
    got = plotted[["op", "size_bytes", "busbw_gbps"]].sort_values(["op", "size_bytes"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, truth, check_dtype=False)
    assert set(plotted["source"]) == {"measured"} and plotted["nominal_link_gbps"].isna().all()
    assert set(plotted["method"]) == {"measured"}  # no predictions in this database: nothing modeled drawn
    assert set(plotted["verdict_text"]) == {"not judged"}  # and no verdicts


def test_bandwidth_answer_quotes_the_plotted_peak(drawn):
    plotted = pd.read_csv(drawn / "busbw_vs_size.csv")
    answer = (drawn / "busbw_vs_size.answer.rst").read_text()
    for op, sub in plotted.groupby("op"):
        best = sub.loc[sub["busbw_gbps"].idxmax()]
        assert f"peaks at {best['busbw_gbps']:.2f} GB/s at 1 MiB" in answer.replace("\\_", "_"), op


def test_memory_figure_plots_measured_bytes_and_the_zero_model(module_db, drawn):
    plotted = pd.read_csv(drawn / "memory_by_strategy.csv")
    measured = plotted[plotted["method"] == "measured"].set_index("strategy")
    with duckdb.connect(str(module_db), read_only=True) as con:
        truth = con.execute("SELECT t.strategy, max(m.optim_bytes), max(m.peak_memory_bytes), "
                            "max(m.param_bytes + m.grad_bytes + m.optim_bytes) "
                            "FROM training_memory m JOIN training_runs t USING (run_id) GROUP BY 1").fetchall()
    for strategy, optim, peak, held in truth:
        assert measured.loc[strategy, "optim_bytes"] == optim
        assert measured.loc[strategy, "rest_bytes"] == peak - held  # the rest = peak minus what the state holds
    assert measured["capacity_bytes"].isna().all()  # CPU runs: no capacity line
    paper = plotted[plotted["memory_model"] == "ZeRO paper"].set_index("strategy")
    n = 787072
    # fp32 Adam on 2 ranks: DDP 4+4+8 bytes per parameter; ZeRO-3 shards all three.
    assert (paper.loc["ddp", ["param_bytes", "grad_bytes", "optim_bytes"]].tolist() == [4 * n, 4 * n, 8 * n])
    assert (paper.loc["zero3", ["param_bytes", "grad_bytes", "optim_bytes"]].tolist() == [2 * n, 2 * n, 4 * n])
    assert set(plotted.loc[plotted["method"] == "modeled", "memory_model"]) == {"ZeRO paper", "implementation"}
    assert plotted.loc[plotted["method"] == "measured", "memory_model"].isna().all()


def test_memory_figure_draws_the_implementation_model_and_says_why_zero_exceeds_the_paper(drawn):
    """DeepSpeed keeps a fp32 master partition even in fp32: ZeRO's optimizer state is 12/N, not the paper's 8/N."""
    plotted = pd.read_csv(drawn / "memory_by_strategy.csv")
    impl = plotted[plotted["memory_model"] == "implementation"].set_index("strategy")
    paper = plotted[plotted["memory_model"] == "ZeRO paper"].set_index("strategy")
    n = 787072
    assert impl.loc["zero3", ["param_bytes", "grad_bytes", "optim_bytes"]].tolist() == [2 * n, 2 * n, 6 * n]
    assert impl.loc["zero1", "optim_bytes"] == 6 * n and paper.loc["zero1", "optim_bytes"] == 4 * n
    assert impl.loc["ddp", "held_bytes"] == paper.loc["ddp", "held_bytes"] == 16 * n  # no master copy under DDP in fp32
    answer = (drawn / "memory_by_strategy.answer.rst").read_text()
    # the sample runs hold 6 bytes per parameter of ZeRO-1/2/3 optimizer state on 2 ranks (factories.HELD_PER_PARAM)
    assert "ZeRO-1, ZeRO-2, ZeRO-3 hold more optimizer state than the ZeRO paper model" in answer
    assert "fp32 master partition" in answer


def test_memory_figure_reads_gpu_capacity_from_the_device_name(tmp_path):
    from shardscope.results.store import collect

    docs = [training_doc(s) for s in ("ddp", "zero3")]
    for doc in docs:
        doc["env"].update(device_type="cuda", devices=["NVIDIA H100 80GB HBM3"] * 2, backend="nccl")
    db = tmp_path / "gpu.duckdb"
    collect(db, write_docs(tmp_path / "in", docs))
    draw_all(db, tmp_path / "figs")
    plotted = pd.read_csv(tmp_path / "figs" / "memory_by_strategy.csv")
    assert (plotted["capacity_bytes"] == 80e9).all()
    assert "of the GPU's 80 GB" in (tmp_path / "figs" / "memory_by_strategy.answer.rst").read_text()


def test_speed_figure_is_normalised_to_ddp(drawn):
    plotted = pd.read_csv(drawn / "speed_vs_ddp.csv").set_index("strategy")
    assert plotted.loc["ddp", "step_time_vs_ddp"] == pytest.approx(1.0)
    assert plotted.loc["zero3", "step_time_vs_ddp"] == pytest.approx(1.6)
    assert plotted.loc["zero3", "tokens_per_s_vs_ddp"] == pytest.approx(1 / 1.6)
    answer = (drawn / "speed_vs_ddp.answer.rst").read_text()
    assert "fastest DDP (1.00x" in answer and "slowest ZeRO-3 (0.62x)" in answer


def test_empty_database_still_draws_every_figure(tmp_path):
    from shardscope.results.store import ddl

    db = tmp_path / "empty.duckdb"
    with duckdb.connect(str(db)) as con:
        for statement in ddl():
            con.execute(statement)
    written = draw_all(db, tmp_path / "figs")
    assert len(written) == len(EXTENSIONS) * len(FIGURES) + 2  # and the machine ranking's CSV and answer
    assert "nothing to rank" in (tmp_path / "figs" / "machine_ranking.answer.rst").read_text()
    assert "No collective results" in (tmp_path / "figs" / "busbw_vs_size.answer.rst").read_text()


def test_database_written_before_fabric_and_label_columns_still_draws(module_db, tmp_path):
    """A database of an earlier layout (no runs.fabric/label/topology_hash, no topologies) still draws."""
    old = tmp_path / "old.duckdb"
    old.write_bytes(module_db.read_bytes())
    with duckdb.connect(str(old)) as con:
        for (view,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall():
            con.execute(f"DROP VIEW {view}")
        for (table,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE table_name IN "
                                    "('topologies', 'gpus', 'links', 'memory_predictions')").fetchall():
            con.execute(f"DROP TABLE {table}")
        for column in ("fabric", "label", "topology_hash"):
            con.execute(f"ALTER TABLE runs DROP COLUMN IF EXISTS {column}")
        con.execute(OLD_STRATEGY_SUMMARY)
    draw_all(old, tmp_path / "figs")
    assert set(pd.read_csv(tmp_path / "figs" / "busbw_vs_size.csv")["fabric"]) == {"cpu"}
    assert pd.read_csv(tmp_path / "figs" / "speed_vs_ddp.csv")["strategy"].nunique() == 5


#: The strategy_summary view as the first database layout defined it (before fabrics and topologies).
OLD_STRATEGY_SUMMARY = """
    CREATE VIEW strategy_summary AS
    WITH t AS (
        SELECT r.host, tr.*, (SELECT max(m.param_bytes + m.grad_bytes + m.optim_bytes)
                              FROM training_memory m WHERE m.run_id = tr.run_id) AS held_bytes
        FROM training_runs tr JOIN runs r USING (run_id))
    SELECT t.host, t.model, t.world_size, t.placement, t.strategy, t.outcome, t.median_step_time_s,
           t.tokens_per_s, t.mfu, t.peak_memory_bytes, t.held_bytes,
           t.median_step_time_s / ddp.median_step_time_s AS step_time_vs_ddp,
           t.tokens_per_s / ddp.tokens_per_s AS tokens_per_s_vs_ddp,
           t.held_bytes / ddp.held_bytes AS held_bytes_vs_ddp, t.run_id
    FROM t LEFT JOIN (SELECT * FROM t WHERE strategy = 'ddp' AND outcome = 'ok') ddp
      ON t.host IS NOT DISTINCT FROM ddp.host AND t.model = ddp.model AND t.world_size = ddp.world_size
     AND t.placement = ddp.placement"""


def test_missing_database_is_a_user_error(tmp_path):
    from shardscope.errors import UserError

    with pytest.raises(UserError, match="database not found"):
        draw_all(tmp_path / "nope.duckdb", tmp_path / "figs")


def test_missing_reference_database_is_a_user_error(module_db, tmp_path):
    from shardscope.errors import UserError

    with pytest.raises(UserError, match="reference database not found"):
        draw_all(module_db, tmp_path / "figs", reference_db=tmp_path / "nope.duckdb")
    assert not (tmp_path / "figs").exists()


def test_a_failing_figure_leaves_the_previous_files_untouched(module_db, drawn, tmp_path, monkeypatch):
    import shutil

    import shardscope.figures.plots as plots

    shutil.copytree(drawn, tmp_path, dirs_exist_ok=True)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def broken(df):
        raise RuntimeError("drawing failed")

    monkeypatch.setattr(plots, "FIGURES", (*plots.FIGURES[:-1], plots.Figure(**{**plots.FIGURES[-1].__dict__, "draw": broken})))
    with pytest.raises(RuntimeError):
        plots.draw_all(module_db, tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_repeated_runs_draw_the_latest_run_of_each_job_normalised_to_the_latest_ddp(sample_docs, tmp_path):
    """Runs accumulate; every figure uses the latest run of each job, DDP's baseline included."""
    from shardscope.results.store import collect

    later = "2026-11-30T09:00:00+00:00"
    again = [collective_doc("all_reduce", measured_at=later, seconds_per_byte=2e-9),
             training_doc("ddp", step_time_s=0.03, measured_at=later), training_doc("zero3", step_time_s=0.045, measured_at=later)]
    db = tmp_path / "two.duckdb"
    collect(db, write_docs(tmp_path / "in", [*sample_docs, *copy.deepcopy(again)]))
    draw_all(db, tmp_path / "figs")
    plotted = pd.read_csv(tmp_path / "figs" / "busbw_vs_size.csv")
    reduce = plotted[plotted["op"] == "all_reduce"]
    assert reduce["series"].nunique() == 1 and len(reduce) == 4
    assert reduce["busbw_gbps"].tolist() == pytest.approx([r["busbw_gbps"] for r in again[0]["rows"]])
    peaks = pd.read_csv(tmp_path / "figs" / "allreduce_peak_vs_gpus.csv")
    assert peaks["peak_busbw_gbps"].tolist() == pytest.approx([max(r["busbw_gbps"] for r in again[0]["rows"])])
    speed = pd.read_csv(tmp_path / "figs" / "speed_vs_ddp.csv").set_index("strategy")
    assert speed.loc["ddp", "median_step_time_s"] == 0.03 and speed.loc["ddp", "step_time_vs_ddp"] == 1.0
    assert speed.loc["zero3", "step_time_vs_ddp"] == pytest.approx(1.5)  # 0.045 / 0.03, both the latest runs
    assert speed.loc["fsdp", "step_time_vs_ddp"] == pytest.approx(0.03 / 0.03)  # fsdp's only run: 0.03 s


def test_regenerating_figures_is_fast_and_draws_without_reference_runs_when_none_is_attached(
        module_db, drawn, tmp_path, capsys):
    """From the database alone: without --reference-db nothing is built, the figures say so and draw our runs only."""
    from shardscope.cli import main

    start = time.perf_counter()
    assert main(["figures", "--db", str(module_db), "--out", str(tmp_path)]) == 0
    assert time.perf_counter() - start < 60  # a sanity bound; benchmarks/figures_regen.py measures the 20 s budget
    assert "no --reference-db" in capsys.readouterr().err
    for figure in FIGURES:  # the same rows as drawn with no reference database at all
        assert (tmp_path / f"{figure.name}.csv").read_text() == (drawn / f"{figure.name}.csv").read_text()
    assert "reference" not in set(pd.read_csv(tmp_path / "busbw_vs_size.csv")["source"])
