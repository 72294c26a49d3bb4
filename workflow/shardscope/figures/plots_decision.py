"""Figure 5: the decision map -- which strategy to pick for a model size, a GPU memory and a fabric."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from shardscope.figures.decision import MODEL_TIE_MARGIN, RULE_CITATION
from shardscope.figures.style import STRATEGY_COLORS, STRATEGY_ORDER, empty, format_params, strategy_name


def _edges(values: np.ndarray) -> np.ndarray:
    """Cell edges on a log axis: geometric midpoints, extended half a step at both ends."""
    mids = np.sqrt(values[:-1] * values[1:])
    return np.concatenate([[values[0] ** 2 / mids[0]], mids, [values[-1] ** 2 / mids[-1]]])


def draw_decision_map(df: pd.DataFrame) -> plt.Figure:
    """One panel per fabric: rows are GPU memories, columns parameter counts, colour the strategy recommended.

    A dot marks a cell whose recommendation is a tie (the least memory of the tied strategies is shown).
    """
    if df.empty:
        return empty("Nothing to decide: no model sizes.")
    panels = list(dict.fromkeys(df["panel"]))
    codes = list(dict.fromkeys(df["strategy"]))
    cmap = ListedColormap([STRATEGY_COLORS.get(s, "grey") for s in codes])
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 2.3 * len(panels) + 1.6), sharex=True, squeeze=False)
    legend: dict[str, tuple[str, tuple[float, ...]]] = {}
    for ax, panel in zip(axes[:, 0], panels):
        sub = df[df["panel"] == panel]
        source = sub["order_source"].iloc[0]
        params = np.sort(sub["n_params"].unique()).astype(float)
        memories = sorted(sub["gpu_memory_gb"].unique())
        grid = sub.pivot(index="gpu_memory_gb", columns="n_params", values="strategy").reindex(index=memories)
        z = grid.apply(lambda col: col.map(codes.index)).to_numpy(dtype=float)
        ax.pcolormesh(_edges(params), np.arange(len(memories) + 1), z, cmap=cmap, vmin=-0.5,
                      vmax=len(codes) - 0.5, shading="flat")
        tied = sub[sub["tied"].fillna("") != ""] if "tied" in sub else sub.iloc[0:0]
        if not tied.empty:
            ax.scatter(tied["n_params"], [memories.index(m) + 0.5 for m in tied["gpu_memory_gb"]], s=6, c="black",
                       marker="o", zorder=3)
        ax.set_yticks(np.arange(len(memories)) + 0.5, [f"{m} GB" for m in memories])
        ax.set_ylabel("memory per GPU")
        ax.set_title(f"{sub['title'].iloc[0]} -- speed: {source}", fontsize="medium", loc="left")
        for n, name in sub.dropna(subset=["preset"]).drop_duplicates("n_params")[["n_params", "preset"]].itertuples(index=False):
            ax.axvline(n, color="black", lw=0.8, ls="--")
            ax.annotate(name, (n, len(memories)), xytext=(2, -10), textcoords="offset points", fontsize="x-small",
                        rotation=0, ha="left", va="top", color="black",
                        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
        for strategy in dict.fromkeys(sub["strategy"]):
            label = "nothing fits" if strategy == "none" else strategy_name(strategy)
            legend.setdefault(label, (strategy, STRATEGY_COLORS.get(strategy, "grey")))
    last = axes[-1, 0]
    last.set_xscale("log")
    last.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_params(v)))
    last.set_xlabel("model parameters (log scale)")
    first = df.iloc[0]
    fig.suptitle(f"Which strategy to pick on {int(first['gpus'])} GPUs ({RULE_CITATION}): fits = whole modeled peak within "
                 f"{first['usable_fraction']:.0%} of the GPU; micro-batch {int(first['micro_batch'])}, seq up to 4096;"
                 f"\nfastest by the cost model or as measured (panel title); dot: tie within the model's "
                 f"{MODEL_TIE_MARGIN:.0%}, least memory shown -- modeled, not a measurement", fontsize="medium")
    rank = [*STRATEGY_ORDER, "none"]
    entries = sorted(legend.items(), key=lambda item: rank.index(item[1][0]) if item[1][0] in rank else len(rank))
    fig.legend(handles=[Patch(facecolor=c, label=label) for label, (_, c) in entries], loc="upper center",
               bbox_to_anchor=(0.5, 0.0), ncol=min(len(legend), 6), fontsize="small", frameon=False)
    fig.tight_layout()
    return fig
