"""Figures 1 and 2: bus bandwidth against message size, and peak all-reduce bandwidth against GPU count."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from shardscope.figures.captions import CPU_NOTE, counted
from shardscope.figures.groups import band_label, kind_bands, spread
from shardscope.results.queries import cpu_series_without_model
from shardscope.figures.style import empty, format_gbps, log2_bytes_axis, log_axis


_MARKERS = ("o", "^", "v", "D", "P")
_MEASURED_STYLES = ("-", ":")  # never dashed: dashes mark reference runs


#: The colorblind palette reordered so that neighbouring series never get its two oranges.
_PALETTE_ORDER = (0, 1, 2, 4, 9, 5, 3, 7, 8, 6)


def _series_colors(series: list[str]) -> dict[str, tuple[float, float, float]]:
    """A colour per series: the colorblind palette up to its 10 colours; beyond, as many evenly spaced hues as series,
    so that no two series share a colour (16 series with emulated runs reused six of them, issue 32)."""
    if len(series) > len(_PALETTE_ORDER):
        return dict(zip(series, sns.color_palette("husl", len(series))))
    palette = sns.color_palette("colorblind", 10)
    return {name: palette[_PALETTE_ORDER[i]] for i, name in enumerate(series)}


def _ordered_series(df: pd.DataFrame, column: str = "series") -> list[str]:
    """Our series (or bands) first, then reference runs, each alphabetically: a stable colour per series."""
    keys = df[["source", column]].drop_duplicates()
    keys = keys.assign(ref=keys["source"] == "reference").sort_values(["ref", column])
    return list(dict.fromkeys(keys[column]))


#: Figure 1's setting of a series besides its machine's kind: machines measured alike are one band.
_BUSBW_SETTING = ["world_size", "placement", "transport"]
#: Figure 2's (its x axis is the number of ranks).
_PEAK_SETTING = ["placement", "transport"]
_BAND_ALPHA = 0.22
#: How far (a factor on figure 2's log axis) each further band of a fabric is set to the right.
_DODGE = 1.06


def _drawn(df: pd.DataFrame, bands: dict[str, str]) -> pd.DataFrame:
    """``df`` with ``drawn``: the band each row is drawn in, or its own series outside any band."""
    return df.assign(drawn=df["series"].map(bands).fillna(df["series"]) if bands else df["series"])


def _band(ax: plt.Axes, rows: pd.DataFrame, x: str, y: str, color: tuple[float, float, float], label: str,
          **line: object) -> tuple[Line2D, Patch]:
    """The band of several machines' series: their median as a line, min..max as a shaded band (and, for
    points without neighbours, a bar); the legend handle shows both."""
    stats = spread(rows, x, y)
    ax.fill_between(stats.index, stats["min"], stats["max"], color=color, alpha=_BAND_ALPHA, lw=0)
    ax.vlines(stats.index, stats["min"], stats["max"], color=color, alpha=0.6, lw=2)
    (handle,) = ax.plot(stats.index, stats["median"], color=color, label=label, **line)
    return handle, Patch(facecolor=color, alpha=_BAND_ALPHA * 2, lw=0)


#: Line style of each kind of curve in figure 1.
_STYLE = {"measured": ("-", "o"), "reference": ("-.", "s"), "modeled": ("--", None)}


def _legend_label(line: pd.DataFrame, name: str) -> str:
    """A measured series' legend entry: its name and its verdict on a second line."""
    text = line["verdict_text"].dropna()
    return f"{name}\n    {text.iloc[0]}" if len(text) else name


def _draw_nominal(ax: plt.Axes, line: pd.DataFrame, color: tuple[float, float, float],
                  legend: dict[str, tuple[str, Line2D]], in_panel: set[str]) -> None:
    """The series' nominal link as a dotted line, once per link and panel (``in_panel``: the links this panel
    has): a second series on the same link (two PCIe 4.0 machines) adds no second line. A link keeps the
    colour of the first series drawn on it, and ``legend`` gets one entry per link (link -> label, line),
    so no label on the axes collides with another where links are close (PCIe, IB)."""
    nominal = line["nominal_link_gbps"].dropna()
    if not len(nominal):
        return
    name = str(line["nominal_link"].iloc[0])
    if name in in_panel:
        return
    in_panel.add(name)
    value = float(nominal.iloc[0])
    handle = ax.axhline(value, color=legend[name][1].get_color() if name in legend else color, ls=":", lw=1.3)
    legend.setdefault(name, (f"nominal {name}: {format_gbps(value)}", handle))


#: Legend entries for our own series before the rest are summarised in one entry (a fleet has one per machine).
MAX_OUR_ENTRIES = 8


def _trimmed(entries: list[tuple[str, Line2D]], ours: set[str], csv: str) -> list[tuple[str, Line2D]]:
    """``entries`` (label, handle) with our series beyond :data:`MAX_OUR_ENTRIES` replaced by one summary entry."""
    mine = [e for e in entries if e[0] in ours]
    if len(mine) <= MAX_OUR_ENTRIES:
        return entries
    dropped = {id(e) for e in mine[MAX_OUR_ENTRIES:]}
    summary = (f"... and {len(dropped)} more of our series, drawn in the same styles (every one in {csv})",
               Line2D([], [], color="none"))
    out = []
    for entry in entries:
        if id(entry) not in dropped:
            out.append(entry)
        if entry is mine[MAX_OUR_ENTRIES - 1]:
            out.append(summary)
    return out


def draw_busbw_vs_size(df: pd.DataFrame) -> plt.Figure:
    """Bus bandwidth against message size, one panel per op: ours solid, reference runs dash-dot, the cost
    model's busbw for our series dashed (same colour), nominal links dotted; legend entries carry each verdict."""
    if df.empty:
        return empty("No collective results in the database yet.")
    measured = df[df["method"] == "measured"]
    bands = kind_bands(measured[measured["source"] != "reference"], _BUSBW_SETTING)
    measured, modeled = _drawn(measured, bands), _drawn(df[df["method"] == "modeled"], bands)
    ops = sorted(df["op"].unique())
    colors = _series_colors(_ordered_series(measured, "drawn"))
    fig, axes = plt.subplots(1, len(ops), figsize=(4.8 * len(ops) + 0.6, 5.2), sharex=True, sharey=True, squeeze=False)
    handles: dict[str, tuple[str, object]] = {}  # series or band -> (legend label, line or (line, band))
    nominals: dict[str, tuple[str, Line2D]] = {}  # link -> (legend label, its first line)
    ours: set[str] = set()  # legend labels of our own series
    for ax, op in zip(axes[0], ops):
        in_panel: set[str] = set()
        for name, line in measured[measured["op"] == op].groupby("drawn", sort=False):
            line = line.sort_values("size_bytes")
            ls, marker = _STYLE["reference" if (line["source"] == "reference").all() else "measured"]
            if line["series"].nunique() > 1:  # machines of one kind: median line, min-max band
                label = band_label(name, line, counted(line.drop_duplicates("series")["verdict_text"]))
                handle = _band(ax, line, "size_bytes", "busbw_gbps", colors[name], label, lw=1.6, ls=ls, marker=marker, ms=3.5)
            else:
                label = _legend_label(line, name)
                (handle,) = ax.plot(line["size_bytes"], line["busbw_gbps"], color=colors[name], lw=1.6, ls=ls,
                                    marker=marker, ms=3.5, label=label)
            handles.setdefault(name, (label, handle))
            if ls == _STYLE["measured"][0]:
                ours.add(label)
            _draw_nominal(ax, line, colors[name], nominals, in_panel)
        for name, line in modeled[modeled["op"] == op].groupby("drawn", sort=False):
            line = spread(line, "size_bytes", "busbw_gbps")["median"]  # a band's machines' models: their median
            ax.plot(line.index, line.to_numpy(), color=colors.get(name, "grey"), lw=1.4, ls=_STYLE["modeled"][0])
        log2_bytes_axis(ax, float(df["size_bytes"].min()), float(df["size_bytes"].max()))
        log_axis(ax)
        ax.set(title=op, xlabel="message size (log scale)")
        ax.grid(True, which="major", alpha=0.4)
    axes[0][0].set_ylabel("bus bandwidth (GB/s, log scale)")
    legend = _trimmed([handles[name] for name in colors if name in handles], ours, "busbw_vs_size.csv")  # ours first
    if not modeled.empty:
        legend.append(("modeled (cost model) for the series of the same colour",
                       Line2D([], [], color="grey", ls=_STYLE["modeled"][0], lw=1.4)))
    legend += sorted(nominals.values(), key=lambda entry: entry[1].get_ydata()[0])
    fig.suptitle("Bus bandwidth vs message size (nccl-tests definition)\n"
                 "measured solid, reference runs dash-dot, modeled dashed, nominal links dotted", y=1.02)
    note = CPU_NOTE if cpu_series_without_model(df) else None
    fig.legend([h for _, h in legend], [label for label, _ in legend], loc="upper center", bbox_to_anchor=(0.5, -0.02),
               ncol=2 if len(ops) > 1 and len(legend) > 3 else 1, fontsize="small", frameon=False, title=note, title_fontsize="x-small")
    fig.tight_layout()
    return fig


def _peak_label(fabric: str, series: str, sub: pd.DataFrame) -> str:
    """A series' legend entry in figure 2: fabric, series, and the verdict of each of its points
    (a modeled series says so once)."""
    if len(sub) == 1 or (sub["source"] == "modeled").all():
        verdicts = str(sub["verdict_text"].iloc[0])
    else:
        verdicts = "; ".join(f"{n} ranks: {t}" for n, t in zip(sub["world_size"], sub["verdict_text"]))
    return f"{fabric}: {series}\n    {verdicts}"


def draw_allreduce_peak(df: pd.DataFrame) -> plt.Figure:
    """Peak all-reduce bus bandwidth against the number of ranks; colour by fabric: measured solid with markers,
    reference runs squares (dash-dot), the cost model's modeled fabrics thin dashed lines without values."""
    if df.empty:
        return empty("No all-reduce results in the database yet.")
    fabrics = sorted(df["fabric"].unique())
    colors = _series_colors(fabrics)
    fig, ax = plt.subplots(figsize=(8, 5.2))
    seen: dict[str, int] = {}
    ours: set[str] = set()  # legend labels of our own series
    bands: dict[str, Patch] = {}  # legend label of a band -> its patch in the legend
    names = kind_bands(df[~df["source"].isin(["reference", "modeled"])], _PEAK_SETTING, ["gpu_model", *_PEAK_SETTING])
    ordered = _drawn(df.assign(_modeled=df["source"] == "modeled"), names).sort_values(["_modeled", "fabric", "drawn", "series"])
    for (_, fabric, series), sub in ordered.groupby(["_modeled", "fabric", "drawn"], sort=False):
        sub = sub.sort_values("world_size")
        if sub["series"].nunique() > 1:  # machines of one kind: median line, min-max band, the medians written
            nth = seen[fabric] = seen.get(fabric, -1) + 1
            label = f"{fabric}: " + band_label(series, sub, counted(sub["verdict_text"]))
            # Bands of one fabric share its colour: each is set a little to the right of the last (a dodge, as
            # on a bar chart) so that their bars and medians at the same GPU count stay apart.
            dodged = sub.assign(world_size=sub["world_size"] * _DODGE ** (nth % 4))
            line, bands[label] = _band(ax, dodged, "world_size", "peak_busbw_gbps", colors[fabric], label,
                                       ls=_MEASURED_STYLES[nth % len(_MEASURED_STYLES)], marker=_MARKERS[nth % len(_MARKERS)], ms=7)
            ours.add(label)
            if len(ours) <= MAX_OUR_ENTRIES:
                for x, y in zip(line.get_xdata(), line.get_ydata()):
                    ax.annotate(f"median {format_gbps(y)}", (x, y), xytext=(8, 10 * (nth % 4)), textcoords="offset points",
                                va="center", fontsize="x-small")
            continue
        label = _peak_label(fabric, series, sub)
        if (sub["source"] == "modeled").all():
            ax.plot(sub["world_size"], sub["peak_busbw_gbps"], color=colors[fabric], ls=_STYLE["modeled"][0], lw=1.3,
                    marker="x", ms=5, alpha=0.9, label=label)
            continue
        reference = (sub["source"] == "reference").all()
        if not reference:
            ours.add(label)
        nth = seen[fabric] = seen.get(fabric, -1) + 1  # several series of one fabric: same colour, own marker
        ax.plot(sub["world_size"], sub["peak_busbw_gbps"], color=colors[fabric],
                ls=_STYLE["reference"][0] if reference else _MEASURED_STYLES[nth % len(_MEASURED_STYLES)],
                marker="s" if reference else _MARKERS[nth % len(_MARKERS)], ms=7, label=label)
        if not reference and len(ours) > MAX_OUR_ENTRIES:
            continue  # a fleet: values written for the series the legend lists (every value is in the CSV)
        for x, y in zip(sub["world_size"], sub["peak_busbw_gbps"]):
            ax.annotate(format_gbps(y), (x, y), xytext=(8, 0), textcoords="offset points", va="center", fontsize="x-small")
    sizes = sorted(df["world_size"].unique())
    ticks = sorted({*sizes, *[2**k for k in range(1, 12) if min(sizes) <= 2**k <= max(sizes)]})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlim(min(sizes) / 1.5, max(sizes) * 1.8)
    log_axis(ax)
    low, high = df["peak_busbw_gbps"].min(), df["peak_busbw_gbps"].max()
    ax.set_ylim(low / 2, high * 3)
    ax.set(xlabel="number of GPUs / ranks (log scale)", ylabel="peak all-reduce bus bandwidth (GB/s, log scale)",
           title="Peak all-reduce bus bandwidth vs GPU count, per fabric")
    ax.grid(True, which="major", alpha=0.4)
    handles, labels = ax.get_legend_handles_labels()
    handles = [(h, bands[label]) if label in bands else h for h, label in zip(handles, labels)]
    entries = _trimmed(list(zip(labels, handles)), ours, "allreduce_peak_vs_gpus.csv")
    ax.legend([h for _, h in entries], [label for label, _ in entries],
              title="fabric: series, verdict (squares = reference runs, dashed x = modeled)", fontsize="small",
              title_fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    return fig
