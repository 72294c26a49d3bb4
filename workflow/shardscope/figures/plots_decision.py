"""Figure 5: the decision map -- which strategy to pick for a model size, a GPU memory and a fabric."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from shardscope.figures.captions import decision_name
from shardscope.figures.style import STRATEGY_COLORS, STRATEGY_ORDER, empty, format_params


def _edges(values: np.ndarray) -> np.ndarray:
    """Cell edges on a log axis: geometric midpoints, extended half a step at both ends."""
    mids = np.sqrt(values[:-1] * values[1:])
    return np.concatenate([[values[0] ** 2 / mids[0]], mids, [values[-1] ** 2 / mids[-1]]])


def draw_decision_map(df: pd.DataFrame) -> plt.Figure:
    """One panel per fabric: rows are GPU memories, columns parameter counts, colour the strategy picked."""
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
        ax.set_yticks(np.arange(len(memories)) + 0.5, [f"{m} GB" for m in memories])
        ax.set_ylabel("memory per GPU")
        ax.set_title(f"{sub['title'].iloc[0]} -- speed order: {source}", fontsize="medium", loc="left")
        for n, name in sub.dropna(subset=["preset"]).drop_duplicates("n_params")[["n_params", "preset"]].itertuples(index=False):
            ax.axvline(n, color="black", lw=0.8, ls="--")
            ax.annotate(name, (n, len(memories)), xytext=(2, -10), textcoords="offset points", fontsize="x-small",
                        rotation=0, ha="left", va="top", color="black",
                        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
        for strategy in dict.fromkeys(sub["strategy"]):
            legend.setdefault(decision_name(strategy, source), (strategy, STRATEGY_COLORS.get(strategy, "grey")))
    last = axes[-1, 0]
    last.set_xscale("log")
    last.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_params(v)))
    last.set_xlabel("model parameters (log scale)")
    fig.suptitle("Which strategy to pick on 8 GPUs: memory modeled (ZeRO paper, bf16 Adam, no activations);"
                 "\nspeed order from the DESIGN.md rule or measured in the database -- not a measurement", fontsize="medium")
    rank = [*STRATEGY_ORDER, "none"]
    entries = sorted(legend.items(), key=lambda item: rank.index(item[1][0]) if item[1][0] in rank else len(rank))
    fig.legend(handles=[Patch(facecolor=c, label=label) for label, (_, c) in entries], loc="upper center",
               bbox_to_anchor=(0.5, 0.0), ncol=min(len(legend), 6), fontsize="small", frameon=False)
    fig.tight_layout()
    return fig
