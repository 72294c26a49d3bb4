"""Every figure, drawn from the database alone: PNG for reports, PDF for papers, CSV of the plotted data.

Each figure is a question, a query, a drawing and an answer computed from the query's rows.
``draw_all`` renders everything in memory first and then writes each file atomically, so a
failure leaves the previous figures in place; ``figures.json`` lists each figure's number,
question and answer for the report, and ``<name>.answer.rst`` holds the answer for
Snakemake's report captions. Beside the figures, ``machine_ranking.csv`` (listed under
``tables`` in ``figures.json``) ranks each machine against the others of its kind.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.transforms import Bbox

from shardscope.fileio import atomic_write_bytes, atomic_write_json
from shardscope.figures import captions
from shardscope.figures.plots_collectives import draw_allreduce_peak, draw_busbw_vs_size
from shardscope.figures.plots_decision import draw_decision_map
from shardscope.figures.plots_training import draw_memory_by_strategy, draw_speed_vs_ddp
from shardscope.results.sources import open_results, require_database
from shardscope.figures.style import DPI, STRATEGY_ORDER
from shardscope.results import queries
from shardscope.results.queries_decision import decision_map
from shardscope.results.selection import RunSelection, select_runs

__all__ = ["FIGURES", "STRATEGY_ORDER", "Figure", "draw_all"]  # STRATEGY_ORDER: kept for importers


@dataclass(frozen=True)
class Figure:
    """A figure: file stem, short title, the question it answers, its query, drawing and answer."""

    name: str
    title: str
    question: str
    query: Callable[[duckdb.DuckDBPyConnection], pd.DataFrame]
    draw: Callable[[pd.DataFrame], plt.Figure]
    answer: Callable[[pd.DataFrame], str]


FIGURES = (
    Figure("busbw_vs_size", "Bus bandwidth vs message size",
           "How does bus bandwidth grow with message size, per op, transport and placement, next to reference machines?",
           queries.busbw_vs_size, draw_busbw_vs_size, captions.answer_busbw),
    Figure("allreduce_peak_vs_gpus", "All-reduce peak vs GPU count",
           "How does peak all-reduce bus bandwidth change with the number of GPUs on each fabric?",
           queries.allreduce_peak_vs_gpus, draw_allreduce_peak, captions.answer_peak),
    Figure("memory_by_strategy", "Memory per rank by strategy",
           "How many bytes does each strategy hold per rank, do the ZeRO-paper and implementation models predict it,"
           " and what else fills the peak?",
           queries.memory_measured_and_modeled, draw_memory_by_strategy, captions.answer_memory),
    Figure("speed_vs_ddp", "Throughput relative to DDP",
           "How much faster or slower than DDP is each strategy on each fabric measured?",
           queries.strategy_speed, draw_speed_vs_ddp, captions.answer_speed),
    Figure("decision_map", "Decision map",
           "Which strategy should one pick for a model size and a GPU memory on 8 GPUs, per fabric?",
           decision_map, draw_decision_map, captions.answer_decision),
)


#: The table (CSV, answer) that ranks machines of one kind against each other: "which of my nodes is slow?".
RANKING = "machine_ranking"


def _tight_box(fig: plt.Figure) -> Bbox:
    """The box ``savefig(bbox_inches="tight")`` crops the PNG to (inches, padded alike), worked out once.

    savefig lays the whole figure out again for each format before drawing it; with the box
    found once (laid out by the PNG's renderer at the PNG's DPI, as savefig does), the PNG
    and the PDF each cost one drawing. On a fleet's figures that layout was a fifth of the
    drawing time.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    dpi = fig.dpi
    try:
        fig.set_dpi(DPI)
        renderer = FigureCanvasAgg(fig).get_renderer()
        with getattr(renderer, "_draw_disabled", contextlib.nullcontext)():  # as savefig does: layout, no pixels
            fig.draw(renderer)
        return fig.get_tightbbox(renderer).padded(plt.rcParams["savefig.pad_inches"])
    finally:
        fig.set_dpi(dpi)


def _render(fig: plt.Figure, fmt: str, box: Bbox | str = "tight") -> bytes:
    buffer = io.BytesIO()
    # Fixed metadata keeps the PDF identical from one regeneration to the next.
    metadata = {"CreationDate": None} if fmt == "pdf" else {"Software": None}
    fig.savefig(buffer, format=fmt, dpi=DPI, bbox_inches=box, metadata=metadata)
    return buffer.getvalue()


def draw_all(db: str | os.PathLike[str], out_dir: str | os.PathLike[str],
             reference_db: str | os.PathLike[str] | None = None, runs: RunSelection | None = None) -> list[Path]:
    """Draw every figure of :data:`FIGURES` from ``db`` into ``out_dir``; returns the files written.

    Figures 1 and 2 draw the public reference runs beside the user's runs from ``reference_db``
    (the reference stage's database) when given, and the user's runs alone without it: nothing
    is built here, the figures only query. ``runs``: which of the database's runs are drawn (default: the current
    plan's, :func:`shardscope.results.selection.select_runs`); ``figures.json`` says which under ``runs``.
    """
    out = Path(out_dir)
    require_database(db)
    runs = runs or select_runs(db)
    sns.set_theme(style="whitegrid", context="notebook")
    with open_results(db, reference_db, runs.inputs) as con:
        data = {figure.name: figure.query(con) for figure in FIGURES}
        ranking = queries.machine_ranking(con)
    files: dict[Path, bytes] = {}
    index = []
    for number, figure in enumerate(FIGURES, start=1):
        df = data[figure.name]
        answer = figure.answer(df)
        fig = figure.draw(df)
        try:
            box = _tight_box(fig)
            for fmt in ("png", "pdf"):
                files[out / f"{figure.name}.{fmt}"] = _render(fig, fmt, box)
        finally:
            plt.close(fig)
        files[out / f"{figure.name}.csv"] = df.to_csv(index=False).encode()
        files[out / f"{figure.name}.answer.rst"] = (captions.rst_escape(answer) + "\n").encode()
        index.append({"number": number, "name": figure.name, "title": figure.title, "question": figure.question,
                      "answer": answer, "rows": len(df)})
    ranked = captions.answer_ranking(ranking)
    files[out / f"{RANKING}.csv"] = ranking.to_csv(index=False).encode()
    files[out / f"{RANKING}.answer.rst"] = (captions.rst_escape(ranked) + "\n").encode()
    tables = [{"name": RANKING, "title": "Machines ranked against others of their kind", "answer": ranked,
               "question": "Which of my machines is slow against the others of its kind (fabric and GPU model)?",
               "rows": len(ranking)}]
    for path, payload in files.items():
        atomic_write_bytes(path, payload)
    atomic_write_json(out / "figures.json", {"figures": index, "tables": tables, "runs": runs.description})
    return list(files)
