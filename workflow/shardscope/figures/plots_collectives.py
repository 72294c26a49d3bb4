"""Figures 1 and 2: bus bandwidth against message size, and peak all-reduce bandwidth against GPU count."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D

from shardscope.figures.style import empty, format_gbps, log2_bytes_axis


_MARKERS = ("o", "^", "v", "D", "P")
_MEASURED_STYLES = ("-", "-.", ":")


def _series_colors(series: list[str]) -> dict[str, tuple[float, float, float]]:
    palette = sns.color_palette("colorblind", max(len(series), 1))
    return dict(zip(series, palette))


def _ordered_series(df: pd.DataFrame) -> list[str]:
    """Our series first, then reference runs, each alphabetically: a stable colour per series."""
    keys = df[["source", "series"]].drop_duplicates()
    keys = keys.assign(ref=keys["source"] == "reference").sort_values(["ref", "series"])
    return list(dict.fromkeys(keys["series"]))


def draw_busbw_vs_size(df: pd.DataFrame) -> plt.Figure:
    """Bus bandwidth against message size, one panel per op; ours solid, reference runs dashed, nominal links dotted."""
    if df.empty:
        return empty("No collective results in the database yet.")
    ops = sorted(df["op"].unique())
    series = _ordered_series(df)
    colors = _series_colors(series)
    fig, axes = plt.subplots(1, len(ops), figsize=(4.8 * len(ops) + 0.6, 4.4), sharex=True, sharey=True, squeeze=False)
    handles: dict[str, Line2D] = {}
    for ax, op in zip(axes[0], ops):
        sub = df[df["op"] == op]
        for name, line in sub.groupby("series", sort=False):
            line = line.sort_values("size_bytes")
            reference = (line["source"] == "reference").all()
            (handle,) = ax.plot(line["size_bytes"], line["busbw_gbps"], color=colors[name], lw=1.6,
                                ls="--" if reference else "-", marker="s" if reference else "o", ms=3.5, label=name)
            handles.setdefault(name, handle)
            nominal = line["nominal_link_gbps"].dropna()
            if len(nominal):
                value = float(nominal.iloc[0])
                ax.axhline(value, color=colors[name], ls=":", lw=1.2)
                ax.annotate(f"nominal {line['nominal_link'].iloc[0]}: {format_gbps(value)}", (0.02, value),
                            xycoords=("axes fraction", "data"), xytext=(0, 3), textcoords="offset points",
                            fontsize="x-small", color=colors[name])
        log2_bytes_axis(ax, float(df["size_bytes"].min()), float(df["size_bytes"].max()))
        ax.set_yscale("log")
        ax.set(title=op, xlabel="message size (log scale)")
        ax.grid(True, which="major", alpha=0.4)
    axes[0][0].set_ylabel("bus bandwidth (GB/s, log scale)")
    fig.suptitle("Bus bandwidth vs message size (nccl-tests definition; reference runs dashed, nominal links dotted)", y=1.0)
    fig.legend(list(handles.values()), list(handles), loc="upper center", bbox_to_anchor=(0.5, -0.02),
               ncol=1 if len(handles) > 6 else 2, fontsize="small", frameon=False)
    fig.tight_layout()
    return fig


def draw_allreduce_peak(df: pd.DataFrame) -> plt.Figure:
    """Peak all-reduce bus bandwidth against the number of ranks; colour by fabric, squares for reference runs."""
    if df.empty:
        return empty("No all-reduce results in the database yet.")
    fabrics = sorted(df["fabric"].unique())
    colors = dict(zip(fabrics, sns.color_palette("colorblind", len(fabrics))))
    fig, ax = plt.subplots(figsize=(8, 4.8))
    seen: dict[str, int] = {}
    for (fabric, series), sub in df.groupby(["fabric", "series"], sort=True):
        sub = sub.sort_values("world_size")
        reference = (sub["source"] == "reference").all()
        nth = seen[fabric] = seen.get(fabric, -1) + 1  # several series of one fabric: same colour, own marker
        ax.plot(sub["world_size"], sub["peak_busbw_gbps"], color=colors[fabric],
                ls="--" if reference else _MEASURED_STYLES[nth % len(_MEASURED_STYLES)],
                marker="s" if reference else _MARKERS[nth % len(_MARKERS)], ms=7, label=f"{fabric}: {series}")
        for x, y in zip(sub["world_size"], sub["peak_busbw_gbps"]):
            ax.annotate(format_gbps(y), (x, y), xytext=(6, 4), textcoords="offset points", fontsize="x-small")
    sizes = sorted(df["world_size"].unique())
    ticks = sorted({*sizes, *[2**k for k in range(1, 12) if min(sizes) <= 2**k <= max(sizes)]})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlim(min(sizes) / 1.5, max(sizes) * 1.8)
    ax.set_yscale("log")
    low, high = df["peak_busbw_gbps"].min(), df["peak_busbw_gbps"].max()
    ax.set_ylim(low / 2, high * 3)
    ax.set(xlabel="number of GPUs / ranks (log scale)", ylabel="peak all-reduce bus bandwidth (GB/s, log scale)",
           title="Peak all-reduce bus bandwidth vs GPU count, per fabric")
    ax.grid(True, which="major", alpha=0.4)
    ax.legend(title="fabric: series (dashed = reference)", fontsize="small", title_fontsize="small",
              loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    return fig
