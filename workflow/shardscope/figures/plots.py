"""Draw every figure from the database: one function per question, PNG + PDF + the plotted data.

Each figure's data is also written as CSV beside it, so tests (and readers) can check that
what is drawn equals what the database says.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from shardscope.fileio import atomic_write_text  # noqa: E402
from shardscope.figures import queries  # noqa: E402
from shardscope.results.store import connect_readonly  # noqa: E402

STRATEGY_ORDER = ["ddp", "zero0", "zero1", "zero2", "fsdp_grad_op", "zero3", "fsdp"]
MEMORY_PARTS = [("param_bytes", "parameters"), ("grad_bytes", "gradients"), ("optim_bytes", "optimizer state")]


@dataclass(frozen=True)
class Figure:
    """A figure: its file stem, the question it answers, its data query and its drawing."""

    name: str
    question: str
    query: Callable[..., pd.DataFrame]
    draw: Callable[[pd.DataFrame], plt.Figure]


def _empty(message: str) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(6, 2.5))
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True)
    return fig


def draw_busbw_vs_size(df: pd.DataFrame) -> plt.Figure:
    """Bus bandwidth against message size, one panel per op, one line per series."""
    if df.empty:
        return _empty("No collective results in the database yet.")
    grid = sns.relplot(data=df, x="size_bytes", y="busbw_gbps", hue="series", col="op", kind="line", marker="o",
                       col_wrap=min(3, df["op"].nunique()), height=3.2, aspect=1.25, facet_kws={"sharey": False})
    grid.set(xscale="log", xlabel="message size (bytes)", ylabel="bus bandwidth (GB/s)")
    grid.figure.suptitle("Bus bandwidth vs message size (nccl-tests definition)", y=1.02)
    sns.move_legend(grid, "upper center", bbox_to_anchor=(0.5, -0.02), ncol=1, title=None, frameon=False)
    return grid.figure


def draw_allreduce_peak(df: pd.DataFrame) -> plt.Figure:
    """Peak all-reduce bus bandwidth against the number of ranks, one line per machine/placement."""
    if df.empty:
        return _empty("No all-reduce results in the database yet.")
    df = df.assign(series=df["host"] + " · " + df["placement"].fillna("-") + " · " + df["transport"].fillna("-"))
    fig, ax = plt.subplots(figsize=(7, 4))
    sns.lineplot(data=df, x="world_size", y="peak_busbw_gbps", hue="series", marker="o", ax=ax)
    ax.set(xlabel="number of ranks", ylabel="peak all-reduce bus bandwidth (GB/s)", title="All-reduce bus bandwidth vs GPU count")
    ax.set_xticks(sorted(df["world_size"].unique()))
    ax.legend(title=None, fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.15), frameon=False)
    return fig


def draw_memory_by_strategy(df: pd.DataFrame) -> plt.Figure:
    """Per-rank bytes held, stacked by kind, measured beside modeled, per strategy."""
    if df.empty:
        return _empty("No finished training runs in the database yet.")
    groups = list(df.groupby(["host", "model", "world_size"], sort=True))
    fig, axes = plt.subplots(1, len(groups), figsize=(7 * len(groups), 4.2), squeeze=False)
    colors = sns.color_palette("deep", len(MEMORY_PARTS))
    for ax, ((host, model, ws), sub) in zip(axes[0], groups):
        strategies = [s for s in STRATEGY_ORDER if s in set(sub["strategy"])]
        x = np.arange(len(strategies))
        for offset, method, hatch in ((-0.2, "measured", None), (0.2, "modeled", "//")):
            part = sub[sub["method"] == method].set_index("strategy").reindex(strategies)
            bottom = np.zeros(len(strategies))
            for (col, label), color in zip(MEMORY_PARTS, colors):
                values = part[col].fillna(0).to_numpy(dtype=float) / 2**20
                ax.bar(x + offset, values, 0.38, bottom=bottom, color=color, hatch=hatch, edgecolor="white",
                       label=f"{label} ({method})")
                bottom += values
        ax.set_xticks(x, strategies)
        ax.set(ylabel="bytes held per rank (MiB)", title=f"{model} on {ws} ranks · {host}")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize="small", ncol=2, loc="upper center", bbox_to_anchor=(0.5, 0.0), frameon=False)
    fig.suptitle("Per-rank memory by strategy: measured (solid) beside the ZeRO-paper model (hatched)")
    fig.tight_layout()
    return fig


def draw_speed_vs_ddp(df: pd.DataFrame) -> plt.Figure:
    """Median step time of each strategy relative to DDP on the same machine and ranks."""
    ok = df[(df["outcome"] == "ok") & df["step_time_vs_ddp"].notna()]
    if ok.empty:
        return _empty("No strategy with a DDP baseline in the database yet.")
    ok = ok.assign(series=ok["host"] + " · " + ok["model"] + " · " + ok["world_size"].astype(str) + " ranks")
    fig, ax = plt.subplots(figsize=(7, 4))
    order = [s for s in STRATEGY_ORDER if s in set(ok["strategy"])]
    sns.barplot(data=ok, x="strategy", y="step_time_vs_ddp", hue="series", order=order, ax=ax)
    ax.axhline(1.0, color="black", lw=1, ls="--")
    ax.set(xlabel="strategy", ylabel="median step time / DDP's", title="Step time relative to DDP (lower is faster)")
    ax.legend(title=None, fontsize="small")
    return fig


FIGURES = (
    Figure("busbw_vs_size", "How does bus bandwidth grow with message size, per op, transport and placement?",
           queries.busbw_vs_size, draw_busbw_vs_size),
    Figure("allreduce_peak_vs_gpus", "How does peak all-reduce bus bandwidth change with the number of GPUs on each fabric?",
           queries.allreduce_peak_vs_gpus, draw_allreduce_peak),
    Figure("memory_by_strategy", "How many bytes does each strategy hold per rank, and does the ZeRO model predict it?",
           queries.memory_measured_and_modeled, draw_memory_by_strategy),
    Figure("speed_vs_ddp", "How much slower or faster than DDP is each strategy on this machine?",
           queries.strategy_speed, draw_speed_vs_ddp),
)


def _save(fig: plt.Figure, path: Path, fmt: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format=fmt, dpi=120, bbox_inches="tight")
    os.replace(tmp, path)


def draw_all(db: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Draw every figure of :data:`FIGURES` from ``db`` into ``out_dir``; returns the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sns.set_theme(style="whitegrid", context="notebook")
    written: list[Path] = []
    with connect_readonly(db) as con:
        for figure in FIGURES:
            data = figure.query(con)
            atomic_write_text(out / f"{figure.name}.csv", data.to_csv(index=False))
            fig = figure.draw(data)
            for fmt in ("png", "pdf"):
                _save(fig, out / f"{figure.name}.{fmt}", fmt)
            plt.close(fig)
            written += [out / f"{figure.name}.{ext}" for ext in ("csv", "png", "pdf")]
    atomic_write_text(out / "figures.txt", "".join(f"{f.name}: {f.question}\n" for f in FIGURES))
    return written


