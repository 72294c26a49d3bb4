"""Figures 3 and 4: memory per rank by strategy, and training speed relative to DDP."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.patches import Patch

from shardscope.contracts.names import BEST_MICROBATCH_SUFFIX

from shardscope.figures.style import (
    MEMORY_PARTS,
    STRATEGY_COLORS,
    STRATEGY_ORDER,
    empty,
    log_axis,
    memory_unit,
    strategy_name,
)

_PART_COLORS = sns.color_palette("deep", len(MEMORY_PARTS))
_REST_COLOR = (0.78, 0.78, 0.78)


def _ordered(strategies: pd.Series) -> list[str]:
    present = set(strategies)
    return [s for s in STRATEGY_ORDER if s in present] + sorted(present - set(STRATEGY_ORDER))


#: The three bars per strategy in the top panel: (offset, method, model, hatch).
_BARS = ((-0.28, "measured", None, None), (0.0, "modeled", "ZeRO paper", "///"), (0.28, "modeled", "implementation", "..."))


def _held_panel(ax: plt.Axes, sub: pd.DataFrame, strategies: list[str]) -> None:
    """Stacked parameters/gradients/optimizer state: measured (solid), the ZeRO paper's model (///) and the
    implementation model (...), side by side per strategy."""
    unit, scale = memory_unit(float(sub["held_bytes"].max()))
    x = np.arange(len(strategies))
    for offset, method, model, hatch in _BARS:
        rows = sub[(sub["method"] == method) & ((sub["memory_model"] == model) if model else sub["memory_model"].isna())]
        part = rows.set_index("strategy").reindex(strategies)
        bottom = np.zeros(len(strategies))
        for (col, _), color in zip(MEMORY_PARTS, _PART_COLORS):
            values = part[col].fillna(0).to_numpy(dtype=float) / scale
            ax.bar(x + offset, values, 0.26, bottom=bottom, color=color, hatch=hatch, edgecolor="white", lw=0.5)
            bottom += values
    ax.set_xticks(x, [strategy_name(s) for s in strategies])
    ax.grid(axis="x", visible=False)
    ax.set_ylabel(f"training state per rank ({unit})")


#: Categories of the whole peak (issue 18): the training state, then activations and buffers at the peak.
_PEAK_PARTS = [*MEMORY_PARTS, ("activation_bytes", "activations"), ("buffer_bytes", "buffers")]
_PEAK_COLORS = sns.color_palette("deep", len(_PEAK_PARTS))


def _capacity_line(ax: plt.Axes, capacity: pd.Series, scale: float) -> None:
    if len(capacity):
        ax.axhline(float(capacity.iloc[0]) / scale, color="black", ls="--", lw=1.2)
        ax.annotate(f"GPU capacity {capacity.iloc[0] / 1e9:.0f} GB", (0.01, float(capacity.iloc[0]) / scale),
                    xycoords=("axes fraction", "data"), xytext=(0, 3), textcoords="offset points", fontsize="small")


def _whole_peak_panel(ax: plt.Axes, sub: pd.DataFrame, strategies: list[str]) -> bool:
    """Tracked peak per rank by category, measured (solid) beside the implementation model (pale); False without tracker data."""
    if "tracked_peak_bytes" not in sub or sub.loc[sub["method"] == "measured", "tracked_peak_bytes"].isna().all():
        return False
    measured = sub[sub["method"] == "measured"].set_index("strategy").reindex(strategies)
    modeled = sub[(sub["method"] == "modeled") & (sub["memory_model"] == "implementation")].set_index("strategy").reindex(strategies)
    capacity = measured["capacity_bytes"].dropna()
    top = max(float(measured["tracked_peak_bytes"].max()), float(modeled["tracked_peak_bytes"].max() or 0),
              float(capacity.max()) if len(capacity) else 0.0)
    unit, scale = memory_unit(top)
    x = np.arange(len(strategies))
    peaks = pd.concat([measured["tracked_peak_bytes"], modeled["tracked_peak_bytes"]]) / scale
    log = _log_scale_if_spread(ax, peaks)
    if log:  # a stacked bar on a log axis hides its lower parts (issue 32): each part its own bar, side by side
        _grouped_parts(ax, x, measured, modeled, scale)
        parts = pd.concat([rows[col] for rows in (measured, modeled) for col, _ in _PEAK_PARTS]) / scale
        ax.set_ylim(bottom=float(parts[parts > 0].min()) / 2)  # a floor under the smallest part's bar
    else:
        for offset, rows, alpha in ((-0.2, measured, 1.0), (0.2, modeled, 0.45)):  # modeled: pale (hatching is slow)
            bottom = np.zeros(len(strategies))
            for (col, _), color in zip(_PEAK_PARTS, _PEAK_COLORS):
                values = rows[col].fillna(0).to_numpy(dtype=float) / scale
                ax.bar(x + offset, values, 0.38, bottom=bottom, color=color, alpha=alpha, edgecolor="white", lw=0.5)
                bottom += values
    _capacity_line(ax, capacity, scale)
    ax.set_xticks(x, [strategy_name(s) for s in strategies])
    ax.grid(axis="x", visible=False)
    ax.set_ylabel(f"tracked tensor peak per rank ({unit}{', log scale' if log else ''})")
    return True


#: Peaks further apart than this (largest / smallest) are drawn on a log axis: DeepSpeed's whole 5e8-element
#: reduce bucket (2 GB in fp32) would otherwise flatten every other strategy's bar of a small model to nothing.
LOG_SPREAD = 10.0


def _grouped_parts(ax: plt.Axes, x: np.ndarray, measured: pd.DataFrame, modeled: pd.DataFrame, scale: float) -> None:
    """Each part of the peak as its own bar beside the others (measured solid, modeled as an outline of the same
    colour): on a log axis every part keeps its own height, which stacking would hide."""
    width = 0.84 / len(_PEAK_PARTS)
    for i, ((col, _), color) in enumerate(zip(_PEAK_PARTS, _PEAK_COLORS)):
        at = x - 0.42 + width * (i + 0.5)
        ax.bar(at, measured[col].fillna(0).to_numpy(dtype=float) / scale, width, color=color, lw=0)
        ax.bar(at, modeled[col].fillna(0).to_numpy(dtype=float) / scale, width, fill=False, edgecolor=color, lw=1.2)


def _log_scale_if_spread(ax: plt.Axes, peaks: pd.Series) -> bool:
    """Switch the whole-peak panel to a log axis when its peaks span more than :data:`LOG_SPREAD`; whether it did."""
    positive = peaks[peaks > 0].dropna()
    if len(positive) < 2 or float(positive.max()) / float(positive.min()) <= LOG_SPREAD:
        return False
    log_axis(ax)
    ax.set_ylim(bottom=float(positive.min()) / 4)  # stacked bars start at 0: the floor keeps the lowest part visible
    return True


def _peak_panel(ax: plt.Axes, sub: pd.DataFrame, strategies: list[str]) -> None:
    """Measured peak per rank: the training state stacked under the rest; the GPU's capacity as a line."""
    if _whole_peak_panel(ax, sub, strategies):
        ax.set_title("whole peak (activations, buffers included):\n"
                     "measured solid | modeled pale, or outlined on a log axis", fontsize="medium")
        return
    measured = sub[sub["method"] == "measured"].set_index("strategy").reindex(strategies)
    if measured["rest_bytes"].isna().all():
        ax.axis("off")
        ax.text(0.5, 0.5, "peak memory not recorded for these runs", ha="center", va="center")
        return
    capacity = measured["capacity_bytes"].dropna()
    top = max(float(measured["peak_memory_bytes"].max()), float(capacity.max()) if len(capacity) else 0.0)
    unit, scale = memory_unit(top)
    x = np.arange(len(strategies))
    bottom = np.zeros(len(strategies))
    for (col, _), color in zip(MEMORY_PARTS, _PART_COLORS):
        values = measured[col].fillna(0).to_numpy(dtype=float) / scale
        ax.bar(x, values, 0.5, bottom=bottom, color=color, edgecolor="white", lw=0.5)
        bottom += values
    rest = measured["rest_bytes"].fillna(0).clip(lower=0).to_numpy(dtype=float) / scale
    ax.bar(x, rest, 0.5, bottom=bottom, color=_REST_COLOR, edgecolor="white", lw=0.5)
    _capacity_line(ax, capacity, scale)
    method = measured["peak_memory_method"].dropna()
    how = f" ({method.iloc[0]})" if len(method) else ""
    ax.set_xticks(x, [strategy_name(s) for s in strategies])
    ax.grid(axis="x", visible=False)
    ax.set_ylabel(f"measured peak per rank{how} ({unit})")


#: The most panels side by side; more kinds of machine wrap onto further rows (keeps figures ~4000 px wide).
MAX_COLUMNS = 3
#: The columns that make machines "of the same kind": drawn together, as a spread, not one panel each.
KIND = ["fabric", "gpu_model"]


def _kind_columns(df: pd.DataFrame) -> list[str]:
    """The kind columns ``df`` has (older CSVs and hand-made frames may lack the GPU model)."""
    return [c for c in KIND if c in df.columns]


def _median_per_strategy(sub: pd.DataFrame) -> pd.DataFrame:
    """One row per (method, memory model, strategy): the median over the machines of one kind."""
    keys = ["method", "memory_model", "strategy"]
    numeric = [c for c in sub.columns if c not in keys and pd.api.types.is_numeric_dtype(sub[c])]
    med = sub.groupby(keys, dropna=False, sort=False)[numeric].median().reset_index()
    rest = sub.groupby(keys, dropna=False, sort=False)[[c for c in sub.columns if c not in keys + numeric]].first().reset_index()
    return med.merge(rest, on=keys, how="left")


def _grid(n: int, rows_per_group: int, width: float, height: float) -> tuple[plt.Figure, np.ndarray]:
    columns = min(n, MAX_COLUMNS)
    rows = -(-n // columns)
    fig, axes = plt.subplots(rows_per_group * rows, columns, figsize=(width * columns, height * rows), squeeze=False)
    for extra in range(n, rows * columns):
        for r in range(rows_per_group):
            axes[rows_per_group * (extra // columns) + r][extra % columns].axis("off")
    return fig, axes


def draw_memory_by_strategy(df: pd.DataFrame) -> plt.Figure:
    """Top: bytes held per rank by kind, measured beside modeled. Bottom: the measured peak and what it is made of.

    One pair of panels per kind of machine (fabric and GPU model), model and GPU count; where
    several machines of a kind measured it, the bars are their median (bytes held per rank
    hardly differ between identical machines; their speed does, see figure 4).
    """
    if df.empty:
        return empty("No finished training runs in the database yet.")
    groups = list(df.groupby([*_kind_columns(df), "model", "world_size"], sort=True))
    width = max(7.5, 1.2 * max(len(set(g["strategy"])) for _, g in groups) + 2)
    fig, axes = _grid(len(groups), 2, width, 8)
    for i, (key, sub) in enumerate(groups):
        top, bottom = axes[2 * (i // MAX_COLUMNS)][i % MAX_COLUMNS], axes[2 * (i // MAX_COLUMNS) + 1][i % MAX_COLUMNS]
        model, ws = key[-2], key[-1]
        hosts = sorted(sub["host"].dropna().unique())
        where = hosts[0] if len(hosts) == 1 else f"{' · '.join(map(str, key[:-2]))}: median of {len(hosts)} machines"
        sub = sub if len(hosts) <= 1 else _median_per_strategy(sub)
        strategies = _ordered(sub["strategy"])
        _held_panel(top, sub, strategies)
        dtype = sub["dtype"].dropna()
        fabric = f" · {key[0]} fabric" if len(hosts) <= 1 and "fabric" in sub else ""
        top.set_title(f"{model} ({dtype.iloc[0] if len(dtype) else '?'}) on {ws} ranks · {where}{fabric}\n"
                      "parameters, gradients, optimizer state: measured | ZeRO paper | implementation", fontsize="medium")
        bottom.set_title("measured peak = training state + the rest", fontsize="medium")
        _peak_panel(bottom, sub, strategies)
    handles = [Patch(facecolor=c, label=label) for (_, label), c in zip(_PEAK_PARTS, _PEAK_COLORS)]
    handles += [Patch(facecolor=_REST_COLOR, label="the rest of the peak (activations, buffers, runtime)"),
                Patch(facecolor="white", edgecolor="black", label="measured (solid)"),
                Patch(facecolor="white", edgecolor="black", hatch="///", label="ZeRO-paper model (modeled)"),
                Patch(facecolor="white", edgecolor="black", hatch="...",
                      label="implementation model (modeled: DeepSpeed's fp32 master partition counted)")]
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3, fontsize="small", frameon=False)
    fig.suptitle("Memory per rank by strategy")
    fig.tight_layout()
    return fig


_OUTCOME_TEXT = {"oom": "OOM", "over_budget": "over\nbudget", "failed": "failed"}


def _error_bars(ax: plt.Axes, x: np.ndarray, values: np.ndarray, rows: pd.DataFrame) -> None:
    """The 95% interval over repeats of each bar (relative to DDP's median), where the run has one."""
    if "ci95_low_vs_ddp" not in rows:
        return
    low = rows["ci95_low_vs_ddp"].to_numpy(dtype=float)
    high = rows["ci95_high_vs_ddp"].to_numpy(dtype=float)
    shown = np.isfinite(values) & np.isfinite(low) & np.isfinite(high)
    if shown.any():
        err = np.vstack([np.clip(values - low, 0, None), np.clip(high - values, 0, None)])[:, shown]
        ax.errorbar(x[shown], values[shown], yerr=err, fmt="none", ecolor="black", elinewidth=1, capsize=4)


def _spread_bars(ax: plt.Axes, rows: pd.DataFrame, strategies: list[str]) -> None:
    """Machines of one kind: per strategy the median ratio as a bar, min..max as a line, each machine a point."""
    x = np.arange(len(strategies))
    for i, strategy in enumerate(strategies):
        runs = rows[rows["strategy"] == strategy]
        ok = runs.loc[runs["outcome"] == "ok", "tokens_per_s_vs_ddp"].dropna().to_numpy(dtype=float)
        if len(ok):
            median = float(np.median(ok))
            ax.bar(i, median, 0.6, color=STRATEGY_COLORS.get(strategy, "grey"), alpha=0.8)
            ax.vlines(i, ok.min(), ok.max(), color="black", lw=1.2)
            jitter = np.linspace(-0.18, 0.18, len(ok)) if len(ok) > 1 else np.zeros(1)
            ax.scatter(i + jitter, ok, s=6, color="black", zorder=3)
            text = f"{median:.2f}x\n{ok.min():.2f}-{ok.max():.2f}"
        else:
            text = "no DDP\nbaseline" if (runs["outcome"] == "ok").any() else "did not\nfinish"
        failed = runs[runs["outcome"] != "ok"]
        if len(failed):
            text += f"\n{len(failed)}/{len(runs)} " + "/".join(sorted(set(_OUTCOME_TEXT.get(o, str(o)).replace(chr(10), ' ')
                                                                          for o in failed["outcome"])))
        ax.annotate(text, (i, float(np.max(ok)) if len(ok) else 0), ha="center", va="bottom", xytext=(0, 2),
                    textcoords="offset points", fontsize="x-small")
    ax.set_xticks(x, [strategy_name(s) for s in strategies], rotation=30, ha="right")


def _batch_label(row: pd.Series) -> str:
    """``mb 4x2`` under a bar of a run at its strategy's own best micro-batch (the search's runs); else nothing."""
    if not str(row.get("placement", "")).endswith(BEST_MICROBATCH_SUFFIX) or pd.isna(row.get("micro_batch")):
        return ""
    accum = int(row["grad_accum"]) if pd.notna(row.get("grad_accum")) else 1
    return f"\nmb {int(row['micro_batch'])}x{accum}"


def _label_height(value: float, row: pd.Series) -> float:
    """Where a bar's label sits: above the bar and above its error bar, so the two never overlap."""
    if not np.isfinite(value):
        return 0.0
    high = row.get("ci95_high_vs_ddp")
    return max(value, float(high)) if high is not None and pd.notna(high) else value


def _single_bars(ax: plt.Axes, rows: pd.DataFrame, strategies: list[str]) -> None:
    """One machine: a bar per strategy with its ratio, or its outcome where it did not finish."""
    rows = rows.set_index("strategy").reindex(strategies)
    x = np.arange(len(strategies))
    values = rows["tokens_per_s_vs_ddp"].where(rows["outcome"] == "ok").to_numpy(dtype=float)
    ax.bar(x, np.nan_to_num(values), 0.6, color=[STRATEGY_COLORS.get(s, "grey") for s in strategies])
    _error_bars(ax, x, values, rows)
    for i, (value, outcome) in enumerate(zip(values, rows["outcome"])):
        if np.isfinite(value):
            text = f"{value:.2f}x"
        else:
            text = _OUTCOME_TEXT.get(outcome, "no DDP\nbaseline" if outcome == "ok" else str(outcome))
        text += _batch_label(rows.iloc[i])
        ax.annotate(text, (i, _label_height(value, rows.iloc[i])), ha="center", va="bottom",
                    xytext=(0, 2), textcoords="offset points", fontsize="small")
    ax.set_xticks(x, [strategy_name(s) for s in strategies], rotation=30, ha="right")


def _bars(ax: plt.Axes, rows: pd.DataFrame) -> str:
    """The bars of one panel (one machine: a bar per strategy; several: their spread); who measured them."""
    strategies = _ordered(rows["strategy"])
    hosts = sorted(rows["host"].dropna().unique())
    if len(hosts) > 1:
        _spread_bars(ax, rows, strategies)
        return f"{len(hosts)} machines (median, min-max, each a point)"
    _single_bars(ax, rows, strategies)
    return hosts[0] if hosts else "?"


def _global_batch(rows: pd.DataFrame) -> str:
    """``global batch 16`` (micro-batch x accumulation x ranks) of a panel's runs, or their range."""
    accum = rows["grad_accum"].fillna(1) if "grad_accum" in rows else 1
    sizes = sorted({int(v) for v in (rows["micro_batch"] * accum * rows["world_size"]).dropna()})
    return f"global batch {'/'.join(map(str, sizes))}" if sizes else "global batch ?"


def _draw_per_condition(df: pd.DataFrame) -> plt.Figure:
    """Figure 4 once micro-batch searches ran: a row per fabric condition (kind of machine, model, ranks, placement,
    transport), the configured micro-batch on the left, each strategy at its own best micro-batch on the right (each
    bar labelled with its micro-batch x accumulation), both relative to the DDP run of the same panel."""
    df = df.assign(transport=df["transport"].fillna("-") if "transport" in df else "-",  # the query's columns, or
                   at_best=df["placement"].astype(str).str.endswith(BEST_MICROBATCH_SUFFIX),  # the same from placement
                   condition=df["placement"].astype(str).str.removesuffix(BEST_MICROBATCH_SUFFIX))
    rows = list(df.groupby([*_kind_columns(df), "model", "world_size", "condition", "transport"], sort=True))
    ratios = df.loc[df["outcome"] == "ok", [c for c in ("tokens_per_s_vs_ddp", "ci95_high_vs_ddp") if c in df]]
    top = float(np.nanmax(ratios.to_numpy(dtype=float))) if ratios.notna().any().any() else 1.0
    width = max(6.5, 0.85 * df["strategy"].nunique() + 2)
    fig, axes = plt.subplots(len(rows), 2, figsize=(2 * width, 4.6 * len(rows)), squeeze=False)
    for i, (key, sub) in enumerate(rows):
        kind, model, ws, condition, transport = key[:-4], key[-4], key[-3], key[-2], key[-1]
        for ax, at_best in zip(axes[i], (False, True)):
            part = sub[sub["at_best"] == at_best]
            if part.empty:
                ax.axis("off")
                ax.text(0.5, 0.5, "no best-micro-batch run under this condition\n(its strategies were not searched)"
                        if at_best else "no run at the configured micro-batch", ha="center", va="center")
                continue
            who = _bars(ax, part)
            if at_best:
                what = (f"each strategy at its own best micro-batch, {_global_batch(part)}\n"
                        "(mb: micro-batch x accumulation steps)")
            else:
                micro = sorted({int(m) for m in part["micro_batch"].dropna()}) if "micro_batch" in part else []
                what = f"configured micro-batch {'/'.join(map(str, micro)) or '?'}, no accumulation"
            ax.set_title(f"{' · '.join(map(str, kind))} · {who}\n{model} on {ws} ranks · condition {condition}"
                         f" · {transport}\n{what}", fontsize="medium")
            ax.axhline(1.0, color="black", lw=1, ls="--")
            ax.grid(axis="x", visible=False)
            ax.set_ylim(0, max(1.2, top * 1.3))
            ax.set_ylabel("tokens/s relative to DDP (higher is faster)")
    fig.suptitle("Training throughput relative to DDP per fabric condition: configured micro-batch (left), each "
                 "strategy at its own best micro-batch (right)\n(dashed line: DDP of the same panel; error bars: 95% "
                 "interval over repeats; OOM / over budget marked instead of a bar)")
    fig.tight_layout()
    return fig


def draw_speed_vs_ddp(df: pd.DataFrame) -> plt.Figure:
    """Tokens/s of each strategy relative to DDP's, one panel per kind of machine (fabric, GPU model), model, GPU count
    and fabric condition (placement and transport: inside vs across an island, NVLink on vs off).

    Each machine is normalised to its own DDP run. A panel of one machine shows its bars; a
    panel of several machines of one kind shows per strategy the median (bar), min..max (line)
    and each machine (point), so a fleet stays one readable figure. A panel without a finished
    DDP run shows each strategy's outcome instead, so a DDP that ran out of memory is visible.

    Error bars on a single machine's bars are each run's 95% interval over its repeats, divided by
    DDP's median (:mod:`shardscope.contracts.repeats`); a run of one repeat has none.

    Where micro-batch searches ran (runs whose placement ends ``@best_microbatch``), the figure has a row per
    fabric condition instead: the configured micro-batch beside each strategy at its own best
    (:func:`_draw_per_condition`).
    """
    if df.empty or not (df["outcome"] == "ok").any():
        return empty("No finished training run in the database yet.")
    if "placement" in df and df["placement"].astype(str).str.endswith(BEST_MICROBATCH_SUFFIX).any():
        return _draw_per_condition(df)
    condition = [c for c in ("placement", "transport") if c in df.columns]  # one panel per fabric condition
    df = df.assign(**{c: df[c].fillna("-") for c in condition})
    facets = [(key[:len(key) - len(condition)], key[len(key) - len(condition):], sub) for key, sub in
              df.groupby([*_kind_columns(df), "model", "world_size", *condition], sort=True)]
    ratios = df.loc[(df["outcome"] == "ok"), "tokens_per_s_vs_ddp"].dropna()
    if "ci95_high_vs_ddp" in df:
        ratios = pd.concat([ratios, df.loc[(df["outcome"] == "ok"), "ci95_high_vs_ddp"].dropna()])
    top = float(ratios.max()) if len(ratios) else 1.0
    fig, axes = _grid(len(facets), 1, max(6.5, 0.85 * df["strategy"].nunique() + 2), 4.6)
    for i, (key, where, sub) in enumerate(facets):
        ax = axes[i // MAX_COLUMNS][i % MAX_COLUMNS]
        strategies = _ordered(sub["strategy"])
        hosts = sorted(sub["host"].dropna().unique())
        if len(hosts) > 1:
            _spread_bars(ax, sub, strategies)
            who = f"{len(hosts)} machines (median, min-max, each a point)"
        else:
            _single_bars(ax, sub, strategies)
            who = hosts[0] if hosts else "?"
        ax.axhline(1.0, color="black", lw=1, ls="--")
        ax.grid(axis="x", visible=False)
        ax.set_title(f"{' · '.join(map(str, key[:-2]))} · {who}\n{key[-2]} on {key[-1]} ranks"
                     + (f" · {' · '.join(map(str, where))}" if where else ""), fontsize="medium")
        ax.set_ylim(0, max(1.2, top * 1.25))
        if i % MAX_COLUMNS == 0:
            ax.set_ylabel("tokens/s relative to DDP (higher is faster)")
    fig.suptitle("Training throughput relative to DDP (dashed line: DDP; error bars: 95% interval over repeats)")
    fig.tight_layout()
    return fig
