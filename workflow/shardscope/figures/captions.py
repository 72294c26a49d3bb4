"""The answer each figure gives, computed from the very data it plots (its CSV).

Every caption states the question (in :data:`shardscope.figures.plots.FIGURES`) and one of
these answers, so a number in a caption is always a number in the figure's data.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from shardscope.contracts.repeats import within_noise
from shardscope.results.queries import MEMORY_MODELS, PEER_TOLERANCE, cpu_series_without_model
from shardscope.figures.groups import kind_bands
from shardscope.figures.style import format_bytes_binary, format_gbps, format_params, memory_unit, strategy_name


def _half_size(sub: pd.DataFrame) -> float:
    """The smallest message size at which a series reaches half of its peak bus bandwidth."""
    peak = sub["busbw_gbps"].max()
    return float(sub.loc[sub["busbw_gbps"] >= peak / 2, "size_bytes"].min())


#: What figure 1 and its caption say where our runs are CPU processes (no modeled curve is drawn for them).
CPU_NOTE = ("No modeled curve for CPU runs: no physical link model exists for gloo on CPU "
            "(the cost model's gloo numbers are placeholders), so their verdict is unknown.")


def answer_busbw(df: pd.DataFrame) -> str:
    """Per op: the best series of this machine (peak, where, half-peak size, verdict), each reference run's
    peak and verdict, which series have a modeled curve; and why CPU runs have none."""
    if df.empty:
        return "No collective results in the database yet."
    measured, modeled = df[df["method"] == "measured"], df[df["method"] == "modeled"]
    bands = kind_bands(measured[measured["source"] != "reference"], ["world_size", "placement", "transport"])
    parts = []
    for op, sub in measured.groupby("op", sort=True):
        ours = sub[sub["source"] != "reference"]
        text = f"{op}:"
        banded = ours[ours["series"].isin(bands)]
        if not banded.empty:  # machines of a kind: the spread of their peaks, not each machine
            text += " " + "; ".join(_busbw_spread(name, rows) for name, rows in
                                    banded.groupby(banded["series"].map(bands), sort=True)) + ";"
            ours = ours[~ours["series"].isin(bands)]
            if not ours.empty:
                text += " of the other machines,"
        if not ours.empty:
            best = ours.loc[ours["busbw_gbps"].idxmax()]
            series = ours[ours["series"] == best["series"]]
            text += (f" ours peaks at {format_gbps(best['busbw_gbps'])} at {format_bytes_binary(best['size_bytes'])}"
                     f" ({best['series']}), half of that from {format_bytes_binary(_half_size(series))} on"
                     f" (verdict: {best['verdict_text']});")
        refs = []
        for name, ref in sub[sub["source"] == "reference"].groupby("series", sort=True):
            top = ref.loc[ref["busbw_gbps"].idxmax()]
            link = f", nominal link {format_gbps(top['nominal_link_gbps'])}" if pd.notna(top["nominal_link_gbps"]) else ""
            refs.append(f"{format_gbps(top['busbw_gbps'])} at {format_bytes_binary(top['size_bytes'])} for {name}{link}"
                        f" (verdict: {top['verdict_text']})")
        if refs:
            text += " reference runs reach " + "; ".join(refs) + ";"
        drawn = modeled[modeled["op"] == op]
        if not drawn.empty:
            text += f" modeled curves for {drawn['series'].nunique()} of our series;"
        parts.append(text.rstrip(";") + ".")
    if cpu_series_without_model(df):
        parts.append(CPU_NOTE)
    return " ".join(parts)


def _busbw_spread(name: str, rows: pd.DataFrame) -> str:
    """One clause for the machines of one kind and setting in figure 1: the median, lowest and highest peak."""
    peaks = rows.groupby("series").agg(peak=("busbw_gbps", "max"), host=("host", "first"),
                                       verdict=("verdict_text", "first")).sort_values("peak")
    low, high = peaks.iloc[0], peaks.iloc[-1]
    return (f"{name}, {len(peaks)} machines: median peak {format_gbps(peaks['peak'].median())}"
            f" (lowest {format_gbps(low['peak'])}, {low['host']}; highest {format_gbps(high['peak'])}, {high['host']};"
            f" verdicts: {counted(peaks['verdict'])})")


def _modeled_trends(modeled: pd.DataFrame) -> str:
    """One clause per modeled fabric: its peak at its fewest and most GPUs."""
    parts = []
    for (fabric, series), sub in modeled.groupby(["fabric", "series"], sort=True):
        sub = sub.sort_values("world_size")
        first, last = sub.iloc[0], sub.iloc[-1]
        parts.append(f"{fabric} ({series}) {format_gbps(first['peak_busbw_gbps'])} at {first['world_size']}"
                     f" to {format_gbps(last['peak_busbw_gbps'])} at {last['world_size']} GPUs")
    return " Modeled by the cost model, not measured: " + "; ".join(parts) + "." if parts else ""


#: Above this many machines (or series) of one kind, a caption gives their spread instead of listing each.
MAX_LISTED = 3


def _peak_spread(fabric: str, sub: pd.DataFrame) -> str:
    """One clause for the many series of one fabric: at its largest GPU count, median, lowest and highest peak."""
    ws = int(sub["world_size"].max())
    at = sub[sub["world_size"] == ws].sort_values("peak_busbw_gbps")
    low, high = at.iloc[0], at.iloc[-1]
    return (f"{fabric}, {sub['series'].nunique()} series: at {ws} ranks median {format_gbps(at['peak_busbw_gbps'].median())}"
            f" (lowest {format_gbps(low['peak_busbw_gbps'])}, {low['series']}; highest {format_gbps(high['peak_busbw_gbps'])},"
            f" {high['series']}; verdicts: {counted(at['verdict_text'])})")


def counted(values: pd.Series) -> str:
    """``ok x 60, low x 4``: each distinct value and how often (most frequent first)."""
    counts = values.fillna("not judged").value_counts()
    return ", ".join(f"{value} x {n}" for value, n in counts.items())


def answer_peak(df: pd.DataFrame) -> str:
    """Per fabric and series: the peak at each end of its GPU counts, the change between them, and the verdict;
    then the modeled fabrics' trends, said to be modeled."""
    if df.empty:
        return "No all-reduce results in the database yet."
    modeled = df[df["source"] == "modeled"]
    df = df[df["source"] != "modeled"]
    if df.empty:
        return "No measured all-reduce results in the database yet." + _modeled_trends(modeled)
    parts, trends = [], 0
    bands = kind_bands(df[df["source"] != "reference"], ["placement", "transport"])  # as figure 2 draws them
    ours = df[df["series"].isin(bands) & (df["source"] != "reference")]
    for name, sub in ours.groupby(ours["series"].map(bands), sort=True):
        if sub["series"].nunique() > MAX_LISTED:
            parts.append(_peak_spread(name, sub))
            df = df[~df["series"].isin(set(sub["series"]))]
    listed = df
    for (fabric, series), sub in listed.groupby(["fabric", "series"], sort=True):
        sub = sub.sort_values("world_size")
        first, last = sub.iloc[0], sub.iloc[-1]
        if len(sub) > 1:
            trends += 1
            change = last["peak_busbw_gbps"] / first["peak_busbw_gbps"] - 1
            parts.append(f"{fabric}, {series}: {format_gbps(first['peak_busbw_gbps'])} at {first['world_size']} ranks"
                         f" to {format_gbps(last['peak_busbw_gbps'])} at {last['world_size']} ({change:+.0%};"
                         f" verdict at {last['world_size']}: {last['verdict_text']})")
        else:
            parts.append(f"{fabric}, {series}: {format_gbps(first['peak_busbw_gbps'])} at {first['world_size']} ranks"
                         f" (verdict: {first['verdict_text']})")
    note = "" if trends else " Each measured series has one GPU count here, so the trend with GPU count is not measured yet."
    return "Peak all-reduce bus bandwidth: " + "; ".join(parts) + "." + note + _modeled_trends(modeled)


#: Why DeepSpeed's measured optimizer state exceeds the ZeRO paper's (costmodel/modeled.py, ``implementation``).
FP32_MASTER_NOTE = ("DeepSpeed keeps an fp32 master partition in the optimizer even in fp32 runs (12/N bytes per"
                    " parameter, not the paper's 8/N), which the implementation model counts")


def _model_clauses(measured: pd.DataFrame, modeled: pd.DataFrame) -> list[str]:
    """How far each memory model is from the measured bytes, and why ZeRO optimizer bars exceed the paper's."""
    clauses = []
    for name in MEMORY_MODELS:
        model = modeled[modeled["memory_model"] == name].set_index("strategy")
        common = measured.index.intersection(model.index)
        if not len(common):
            continue
        gap = (measured.loc[common, "held_bytes"] / model.loc[common, "held_bytes"] - 1).abs()
        clauses.append(f"the {name} model is within {max(float(gap.max()), 0.01):.0%} of every measured strategy"
                       + (f" (largest gap {strategy_name(str(gap.idxmax()))})" if gap.max() >= 0.01 else ""))
    paper = modeled[modeled["memory_model"] == "ZeRO paper"].set_index("strategy")
    zero = [s for s in measured.index.intersection(paper.index) if s in ("zero1", "zero2", "zero3")
            and measured.loc[s, "optim_bytes"] > paper.loc[s, "optim_bytes"] * 1.01]
    if zero:
        clauses.append(f"{', '.join(strategy_name(s) for s in zero)} hold more optimizer state than the ZeRO paper"
                       f" model: {FP32_MASTER_NOTE}")
    return clauses


def _kind_groups(df: pd.DataFrame, extra: list[str]) -> list[tuple[tuple, pd.DataFrame]]:
    """``df`` grouped by kind of machine (fabric and GPU model, where present) and ``extra``."""
    kind = [c for c in ("fabric", "gpu_model") if c in df.columns]
    return list(df.groupby([*kind, *extra], sort=True, dropna=False))


def _memory_where(key: tuple, sub: pd.DataFrame) -> str:
    hosts = sub["host"].dropna().unique()
    model, ws = key[-2], key[-1]
    if len(hosts) <= 1:
        fabric = f"{sub['fabric'].iloc[0]} fabric, " if "fabric" in sub else ""
        return f"On {hosts[0] if len(hosts) else '?'} ({fabric}{model}, {ws} ranks)"
    return f"On {len(hosts)} machines ({', '.join(map(str, key[:-2]))}; median per strategy; {model}, {ws} ranks)"


_MEMORY_NUMBERS = ("param_bytes", "grad_bytes", "optim_bytes", "held_bytes", "peak_memory_bytes", "rest_bytes", "capacity_bytes")


def answer_memory(df: pd.DataFrame) -> str:
    """Per kind of machine, model and GPU count: DDP's bytes, the leanest strategy's share of them, how close
    the models are, the rest and capacity (the median over the machines of a kind)."""
    if df.empty:
        return "No finished training runs in the database yet."
    parts = []
    for key, sub in _kind_groups(df, ["model", "world_size"]):
        numbers = sub.assign(**{c: pd.to_numeric(sub[c], errors="coerce") for c in _MEMORY_NUMBERS if c in sub.columns})
        numeric = [c for c in _MEMORY_NUMBERS if c in sub.columns]
        measured = numbers[numbers["method"] == "measured"].groupby("strategy")[numeric].median()
        modeled = numbers[numbers["method"] == "modeled"].groupby(["memory_model", "strategy"])[numeric].median().reset_index()
        unit, scale = memory_unit(float(measured["held_bytes"].max()))
        least = measured["held_bytes"].idxmin()
        clauses = []
        if "ddp" in measured.index:
            ddp = measured.loc["ddp", "held_bytes"]
            clauses.append(f"DDP holds {ddp / scale:.3g} {unit} per rank in parameters, gradients and optimizer state"
                           f" and {strategy_name(least)} {measured.loc[least, 'held_bytes'] / ddp:.0%} of that")
        else:
            clauses.append(f"no DDP run finished; {strategy_name(least)} holds the least,"
                           f" {measured.loc[least, 'held_bytes'] / scale:.3g} {unit} per rank")
        clauses += _model_clauses(measured, modeled)
        rest = measured["rest_bytes"].dropna()
        if len(rest):
            clauses.append(f"the rest of the peak (activations, buffers, runtime) is {rest.min() / scale:.3g}"
                           f" to {rest.max() / scale:.3g} {unit}")
        capacity = measured["capacity_bytes"].dropna()
        if len(capacity):
            peak = measured["peak_memory_bytes"].max()
            clauses.append(f"the highest peak is {peak / 1e9:.3g} GB of the GPU's {capacity.iloc[0] / 1e9:.0f} GB")
        parts.append(_memory_where(key, sub) + ": " + "; ".join(clauses) + ".")
    return " ".join(parts)


def ties_with(best: pd.Series, others: pd.DataFrame) -> list[str]:
    """Strategies of ``others`` whose tokens/s 95% interval overlaps ``best``'s: within noise of it, not beaten by it."""
    return noise_against_best(best, others).tied


@dataclass(frozen=True)
class NoiseComparison:
    """The runs of one comparison against its best run: whose 95% interval overlaps the best's (``tied``), whose
    does not (``apart``), and who has no interval to judge (``unjudged``); strategy names, in the given order."""

    best: str
    tied: list[str]
    apart: list[str]
    unjudged: list[str]


def noise_against_best(best: pd.Series, others: pd.DataFrame) -> NoiseComparison:
    """Each other strategy of ``others`` against ``best`` by the tokens/s 95% intervals over repeats (issue 32: only
    overlap with the best is claimed, never that all overlap each other)."""
    tied, apart, unjudged = [], [], []
    has_ci = "ci95_low_tokens_per_s" in others
    for rec in others.to_dict("records"):
        if rec["strategy"] == best["strategy"]:
            continue
        bounds = (best.get("ci95_low_tokens_per_s"), best.get("ci95_high_tokens_per_s"),
                  rec.get("ci95_low_tokens_per_s"), rec.get("ci95_high_tokens_per_s")) if has_ci else (None,) * 4
        if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in bounds):
            unjudged.append(rec["strategy"])
        elif within_noise(*bounds):
            tied.append(rec["strategy"])
        else:
            apart.append(rec["strategy"])
    return NoiseComparison(str(best["strategy"]), tied, apart, unjudged)


def noise_sentence(comparison: NoiseComparison, best_value: str, name: Callable[[str], str] = strategy_name) -> str:
    """What the intervals show about the fastest run: ``fastest X (value)`` when no other interval overlaps its,
    else ``no single fastest: A, B within noise of X ...``; those beyond the noise and those without an interval are
    named as such. ``best_value`` is the best run's number as the sentence should show it, ``name`` a strategy's."""
    def names(strategies: list[str]) -> str:
        return ", ".join(name(s) for s in strategies)

    best = name(comparison.best)
    if comparison.tied:
        text = (f"no single fastest: {names(comparison.tied)} within noise of {best} (their 95% intervals over repeats"
                f" overlap {best}'s; {best}'s median {best_value})")
        if comparison.apart:
            text += f"; {names(comparison.apart)} slower beyond the noise (intervals apart from {best}'s)"
    else:
        text = f"fastest {best} ({best_value})"
        if comparison.apart:
            text += ", every other interval apart from its"
    if comparison.unjudged:
        text += f"; {names(comparison.unjudged)} without a 95% interval, so not judged against it"
    return text


def _speed_many(sub: pd.DataFrame, hosts: list[str]) -> str:
    """Machines of one kind: fastest and slowest strategy by median ratio, with the spread; runs that did not finish counted."""
    done = sub[(sub["outcome"] == "ok") & sub["tokens_per_s_vs_ddp"].notna()]
    text = ""
    if not done.empty:
        stats = done.groupby("strategy")["tokens_per_s_vs_ddp"].agg(["median", "min", "max"]).sort_values("median")
        fast, slow = stats.index[-1], stats.index[0]
        text = (f"fastest {strategy_name(fast)} (median {stats.loc[fast, 'median']:.2f}x DDP's tokens/s,"
                f" {stats.loc[fast, 'min']:.2f}-{stats.loc[fast, 'max']:.2f} across machines),"
                f" slowest {strategy_name(slow)} (median {stats.loc[slow, 'median']:.2f}x,"
                f" {stats.loc[slow, 'min']:.2f}-{stats.loc[slow, 'max']:.2f})")
    else:
        text = "no run normalised to a DDP baseline"
    failed = sub[sub["outcome"] != "ok"]
    if len(failed):
        counts = failed.groupby(["strategy", "outcome"]).size()
        text += "; did not fit or failed: " + ", ".join(f"{strategy_name(s)} ({o} on {n} of {len(hosts)})"
                                                         for (s, o), n in counts.items())
    return text


def _best_per_condition(df: pd.DataFrame) -> str:
    """Per fabric condition, each strategy at its own best micro-batch relative to that condition's DDP best run
    (micro-batch x accumulation named; a run that did not fit named by its outcome); empty without such runs."""
    if "placement" not in df:
        return ""
    best = df[df["placement"].astype(str).str.endswith("@best_microbatch")]
    parts = []
    for (host, model, ws, placement, transport), sub in best.groupby(
            ["host", "model", "world_size", "placement", best["transport"].fillna("-")], sort=True):
        runs = []
        for rec in sub.sort_values("strategy").to_dict("records"):
            accum = int(rec["grad_accum"]) if pd.notna(rec.get("grad_accum")) else 1
            batch = f"mb {int(rec['micro_batch'])}x{accum}" if pd.notna(rec.get("micro_batch")) else "mb ?"
            if rec["outcome"] != "ok":
                runs.append(f"{strategy_name(rec['strategy'])} {rec['outcome']} ({batch})")
            elif pd.notna(rec.get("tokens_per_s_vs_ddp")):
                runs.append(f"{strategy_name(rec['strategy'])} {rec['tokens_per_s_vs_ddp']:.2f}x ({batch})")
            else:
                runs.append(f"{strategy_name(rec['strategy'])} no DDP baseline ({batch})")
        condition = str(placement).removesuffix("@best_microbatch")
        parts.append(f"{condition} · {transport} ({model} on {ws} ranks, {host}): " + ", ".join(runs))
    return ("Each strategy at its own best micro-batch, tokens/s relative to DDP's best run under the same condition: "
            + "; ".join(parts) + ".") if parts else ""


def answer_speed(df: pd.DataFrame) -> str:
    """Per kind of machine and model: the fastest and slowest strategy relative to DDP (for several machines of
    a kind, by median with the spread across them), and runs that did not finish; then, where micro-batch searches
    ran, per fabric condition each strategy at its own best micro-batch."""
    if df.empty or not (df["outcome"] == "ok").any():
        return "No finished training run in the database yet."
    best = _best_per_condition(df)
    return " ".join(p for p in (_answer_speed_all(df), best) if p)


def _answer_speed_all(df: pd.DataFrame) -> str:
    parts = []
    for key, sub in _kind_groups(df, ["model", "world_size"]):
        hosts = sorted(sub["host"].dropna().unique())
        model, ws = key[-2], key[-1]
        if len(hosts) > 1:
            parts.append(f"{', '.join(map(str, key[:-2]))} ({len(hosts)} machines), {model} on {ws} ranks: "
                         + _speed_many(sub, hosts) + ".")
            continue
        done = sub[sub["outcome"] == "ok"]
        good = done[done["tokens_per_s_vs_ddp"].notna()].sort_values("tokens_per_s_vs_ddp")
        text = f"{key[0]}, {hosts[0] if hosts else '?'}, {model} on {ws} ranks: "
        if not good.empty:
            fast, slow = good.iloc[-1], good.iloc[0]
            best_value = f"{fast['tokens_per_s_vs_ddp']:.2f}x DDP's tokens/s"
            text += noise_sentence(noise_against_best(fast, good.iloc[::-1]), best_value) + ","
            text += f" slowest {strategy_name(slow['strategy'])} ({slow['tokens_per_s_vs_ddp']:.2f}x)"
        elif not done.empty:
            fast = done.sort_values("median_step_time_s").iloc[0]
            text += (f"no DDP baseline, so nothing is normalised; fastest that finished {strategy_name(fast['strategy'])}"
                     f" ({fast['median_step_time_s']:.4f} s per step)")
        else:
            text += "no run finished"
        failed = sub[sub["outcome"] != "ok"]
        if len(failed):
            text += "; did not fit or failed: " + ", ".join(
                f"{strategy_name(s)} ({o})" for s, o in zip(failed["strategy"], failed["outcome"]))
        parts.append(text + ".")
    return " ".join(parts)


def answer_ranking(df: pd.DataFrame) -> str:
    """Which machines are slow against others of their kind: the slow ones named, the rest counted."""
    peers = df[df["verdict"] != "no peers"] if not df.empty else df
    if peers.empty:
        return "No two machines of the same kind (fabric and GPU model) measured the same thing yet; nothing to rank."
    parts = []
    for (fabric, gpu, measure, setting), sub in peers.groupby(["fabric", "gpu_model", "measure", "setting"], sort=True):
        slow = sub[sub["verdict"] == "slow"].sort_values("vs_kind_median")
        text = f"{fabric} {gpu}, {measure} ({setting}), {len(sub)} machines, median {sub['kind_median'].iloc[0]:.4g} {sub['unit'].iloc[0]}: "
        if slow.empty:
            text += "none slow"
        else:
            named = ", ".join(f"{h} ({r:.0%})" for h, r in zip(slow["host"].head(MAX_LISTED), slow["vs_kind_median"].head(MAX_LISTED)))
            more = f" and {len(slow) - MAX_LISTED} more" if len(slow) > MAX_LISTED else ""
            text += f"{len(slow)} slow: {named}{more}"
        parts.append(text + ".")
    return f"Machines against the median of their kind (slow: more than {PEER_TOLERANCE:.0%} below it): " + " ".join(parts)


def answer_decision(df: pd.DataFrame) -> str:
    """Per panel at 80 GB per GPU: up to which size each strategy is recommended (the sweep's shapes, the regions
    drawn), and what each preset gets (ties named); the measured order of a panel's fabric where the database has
    one, and each measured run drawn."""
    cells = df[df["method"] == "modeled"] if "method" in df else df
    if cells.empty:
        return "No decision map stored: the predictions stage writes it (`shardscope predict plan`, then collect)."
    parts = []
    for _, sub in cells.groupby("panel", sort=False):
        at80 = sub[sub["gpu_memory_gb"] == 80].sort_values("n_params")
        # the regions are the sweep's shapes (as drawn); each preset's own pick is said apart below
        sweep = at80[at80["preset"].isna()] if at80["preset"].isna().any() else at80
        ranges = []
        for _, group in sweep.groupby((sweep["strategy"] != sweep["strategy"].shift()).cumsum(), sort=False):
            name = group["strategy"].iloc[0]
            if name != "none":
                low, high = format_params(group["n_params"].min()), format_params(group["n_params"].max())
                ranges.append(f"{strategy_name(name)} at {low}" if low == high else f"{strategy_name(name)} from {low} to {high}")
        if sweep["strategy"].eq("none").any():
            ranges.append(f"nothing fits from {format_params(sweep.loc[sweep['strategy'] == 'none', 'n_params'].min())}")
        picks = at80[at80["preset"].notna()]
        presets = ", ".join(f"{p} ({format_params(n)}) {label}" for p, n, label in zip(picks["preset"], picks["n_params"], picks["pick"]))
        measured = sub["measured_order"].dropna() if "measured_order" in sub else pd.Series(dtype=object)
        beside = f" ({sub['measured_where'].dropna().iloc[0]}: {measured.iloc[0]})" if not measured.empty else ""
        parts.append(f"{sub['title'].iloc[0]}, 80 GB x {int(sub['gpus'].iloc[0])} GPUs: "
                     + ", ".join(ranges) + (f"; {presets}" if presets else "") + beside + ".")
    points = df[df["method"] == "measured"] if "method" in df else df.iloc[0:0]
    runs = (" Measured runs drawn on the map: " + "; ".join(points["label"]) + ".") if not points.empty else ""
    first = cells.iloc[0]
    return (f"Modeled, by the rule of {first['rule']} (the same function as `shardscope advise`): a strategy fits "
            f"when its whole peak (model states, activations, buffers; micro-batch {int(first['micro_batch'])}, the "
            f"model's sequence length up to 4096) is within {first['usable_fraction']:.0%} of the GPU's memory; of those "
            f"the fastest by the cost model wins, and strategies within the model's {first['tie_margin']:.0%} are a tie "
            "that goes to the least memory. " + " ".join(parts) + runs)


_RST_SPECIAL = re.compile(r"([\\`*_|])")


def rst_escape(text: str) -> str:
    """``text`` with reStructuredText markup characters escaped, for Snakemake report captions."""
    return _RST_SPECIAL.sub(r"\\\1", text)
