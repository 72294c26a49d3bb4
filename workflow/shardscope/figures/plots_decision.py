"""Figure 5: the decision map -- which strategy to pick for a model size, a GPU memory and a fabric.

The regions are the stored modeled cells; the database's measured runs are drawn on them as
labelled points (the strategy that measured fastest, at the model's size and the run's GPU memory).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from shardscope.figures.style import STRATEGY_COLORS, STRATEGY_ORDER, empty, format_params, strategy_name


def _edges(values: np.ndarray) -> np.ndarray:
    """Cell edges on a log axis: geometric midpoints, extended half a step at both ends."""
    if len(values) == 1:
        return np.array([values[0] / 1.5, values[0] * 1.5])
    mids = np.sqrt(values[:-1] * values[1:])
    return np.concatenate([[values[0] ** 2 / mids[0]], mids, [values[-1] ** 2 / mids[-1]]])


def memory_row_position(memory_gb: float | None, memories: list[float]) -> float:
    """Where a GPU memory sits on the map's row axis (row ``i`` spans ``i``..``i+1``; log-interpolated between
    row centres, clipped to the axis); a run without a GPU memory (CPU processes) sits on the bottom edge."""
    if memory_gb is None or pd.isna(memory_gb):
        return 0.0
    centres = np.arange(len(memories)) + 0.5
    if len(memories) == 1:
        return 0.5
    pos = float(np.interp(np.log(memory_gb), np.log(memories), centres, left=np.nan, right=np.nan))
    if np.isnan(pos):  # outside the rows: half a row beyond the nearest centre at most
        slope = (centres[1] - centres[0]) / (np.log(memories[1]) - np.log(memories[0]))
        pos = 0.5 + (np.log(memory_gb) - np.log(memories[0])) * slope if memory_gb < memories[0] else \
            centres[-1] + (np.log(memory_gb) - np.log(memories[-1])) * slope
    return float(min(max(pos, 0.05), len(memories) - 0.05))


def _draw_points(ax: plt.Axes, points: pd.DataFrame, memories: list[float], x_edges: np.ndarray) -> None:
    """The measured runs of one panel: a diamond in the colour of the strategy that measured fastest, labelled
    measured; a model outside the map's sizes sits on the nearest edge and its label gives its size. Settings
    that fall on the same spot with the same winner (many machines of a kind) share one diamond and label."""
    spots = points.assign(_y=[memory_row_position(m, memories) for m in points["gpu_memory_gb"]])
    for i, ((n, y, strategy), group) in enumerate(spots.groupby(["n_params", "_y", "strategy"], sort=True)):
        x = min(max(float(n), x_edges[0]), x_edges[-1])
        ax.scatter([x], [y], s=70, marker="D", color=STRATEGY_COLORS.get(strategy, "grey"),
                   edgecolors="black", linewidths=1.2, zorder=5, clip_on=False)
        first = group.iloc[0]
        if len(group) == 1:
            text = first["label"]
        else:
            hosts = sorted(group["host"].dropna().unique())
            text = (f"measured: {strategy} fastest in {len(group)} settings ({', '.join(hosts[:3])}"
                    f"{f' and {len(hosts) - 3} more' if len(hosts) > 3 else ''})")
        text += f", {first['model']} {format_params(float(n))}" + (" (off the map's sizes)" if x != n else "")
        ax.annotate(text, (x, y), xytext=(6, 4 + 10 * i), textcoords="offset points", fontsize="x-small",
                    zorder=6, bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "black", "lw": 0.5, "alpha": 0.85})


def _title(sub: pd.DataFrame) -> str:
    title = f"{sub['title'].iloc[0]} -- regions modeled"
    order = sub["measured_order"].dropna() if "measured_order" in sub else pd.Series(dtype=object)
    if not order.empty:
        title += f"; {sub['measured_where'].dropna().iloc[0]}: {order.iloc[0]}"
    return title


def draw_decision_map(df: pd.DataFrame) -> plt.Figure:
    """One panel per fabric: rows are GPU memories, columns parameter counts, colour the strategy recommended.

    The regions are the sweep's Llama-like shapes; each preset (its own architecture at its own size) is a dashed
    line with a square per memory row in the colour of its own pick. A dot marks a cell whose recommendation is a
    tie (the least memory of the tied strategies is shown); a diamond a measured run (the strategy that measured
    fastest), labelled measured.
    """
    cells = df[df["method"] == "modeled"] if "method" in df else df
    if cells.empty:
        return empty("No decision map stored: the predictions stage writes it (`shardscope predict plan`, then collect).")
    points = df[df["method"] == "measured"]
    panels = list(dict.fromkeys(cells["panel"]))
    codes = list(dict.fromkeys(cells["strategy"]))
    cmap = ListedColormap([STRATEGY_COLORS.get(s, "grey") for s in codes])
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 2.3 * len(panels) + 1.6), sharex=True, squeeze=False)
    legend: dict[str, tuple[str, tuple[float, ...]]] = {}
    for ax, panel in zip(axes[:, 0], panels):
        whole = cells[cells["panel"] == panel]
        # regions from the sweep's Llama-like shapes alone; a preset (another architecture at its own size) is drawn
        # as marks on its line, so that its own answer never cuts a one-column stripe through the regions
        sweep = whole[whole["preset"].isna()] if "preset" in whole else whole
        sub = sweep if not sweep.empty else whole
        params = np.sort(sub["n_params"].unique()).astype(float)
        memories = sorted(float(m) for m in sub["gpu_memory_gb"].unique())
        grid = sub.pivot(index="gpu_memory_gb", columns="n_params", values="strategy").reindex(index=memories)
        z = grid.apply(lambda col: col.map(codes.index)).to_numpy(dtype=float)
        x_edges = _edges(params)
        ax.pcolormesh(x_edges, np.arange(len(memories) + 1), z, cmap=cmap, vmin=-0.5,
                      vmax=len(codes) - 0.5, shading="flat")
        tied = sub[sub["tied"].fillna("") != ""]
        if not tied.empty:
            ax.scatter(tied["n_params"], [memories.index(float(m)) + 0.5 for m in tied["gpu_memory_gb"]], s=6, c="black",
                       marker="o", zorder=3)
        _draw_points(ax, points[points["panel"] == panel], memories, x_edges)
        ax.set_yticks(np.arange(len(memories)) + 0.5, [f"{m:g} GB" for m in memories])
        ax.set_ylabel("memory per GPU")
        ax.set_title(_title(sub), fontsize="medium", loc="left")
        named = whole.dropna(subset=["preset"]) if "preset" in whole else whole.iloc[0:0]
        for n, name in named.drop_duplicates("n_params")[["n_params", "preset"]].itertuples(index=False):
            ax.axvline(n, color="black", lw=0.8, ls="--")
            ax.annotate(name, (n, len(memories)), xytext=(2, -10), textcoords="offset points", fontsize="x-small",
                        rotation=0, ha="left", va="top", color="black",
                        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
        if sub is not whole and not named.empty:  # each preset's own pick, a square on its line per memory row
            rows = [memories.index(float(m)) + 0.5 for m in named["gpu_memory_gb"] if float(m) in memories]
            kept = named[[float(m) in memories for m in named["gpu_memory_gb"]]]
            ax.scatter(kept["n_params"], rows, marker="s", s=44, zorder=5, linewidths=0.9, edgecolors="black",
                       c=[STRATEGY_COLORS.get(s, "grey") for s in kept["strategy"]])
        for strategy in dict.fromkeys(whole["strategy"]):
            label = "nothing fits" if strategy == "none" else strategy_name(strategy)
            legend.setdefault(label, (strategy, STRATEGY_COLORS.get(strategy, "grey")))
    last = axes[-1, 0]
    last.set_xscale("log")
    last.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_params(v)))
    last.set_xlabel("model parameters (log scale)")
    first = cells.iloc[0]
    fig.suptitle(f"Which strategy to pick on {int(first['gpus'])} GPUs ({first['rule']}): fits = whole modeled peak within "
                 f"{first['usable_fraction']:.0%} of the GPU; micro-batch {int(first['micro_batch'])}, seq up to 4096;"
                 f"\nregions: fastest by the cost model, dot: tie within the model's {first['tie_margin']:.0%}, least memory "
                 "shown -- modeled, not a measurement; diamonds: measured runs (fastest strategy measured)", fontsize="medium")
    rank = [*STRATEGY_ORDER, "none"]
    entries = sorted(legend.items(), key=lambda item: rank.index(item[1][0]) if item[1][0] in rank else len(rank))
    handles: list[object] = [Patch(facecolor=c, label=label) for label, (_, c) in entries]
    if not points.empty:
        handles.append(Line2D([], [], marker="D", ls="", color="white", markeredgecolor="black", label="measured run"))
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(handles), 7), fontsize="small",
               frameon=False)
    fig.tight_layout()
    return fig
