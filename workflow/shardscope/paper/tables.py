"""The report's tables and sentences built from :mod:`shardscope.results.report_queries` rows.

Each function takes query rows and returns what the template shows (a DataFrame for
:func:`shardscope.paper.context.markdown_table`, or sentences); no number is typed here.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from shardscope.results.reference_manifest import ReferenceRun
from shardscope.figures.style import format_bytes_binary, strategy_name

#: Columns of the interconnect tables, in order (the sweep's verdict numbers, not nccl-tests' average).
INTERCONNECT_COLUMNS = ["sweep", "op", "ranks", "plateau busbw (GB/s)", "95% CI (GB/s)", "size to 90% of plateau",
                        "latency floor (us)", "expected (GB/s)", "verdict", "why"]


def _interval(low: Any, high: Any) -> str | None:
    return f"{low:.2f}–{high:.2f}" if pd.notna(low) and pd.notna(high) else None


def interconnect_table(sweeps: pd.DataFrame, references: dict[str, ReferenceRun] | None = None) -> pd.DataFrame:
    """Per sweep: plateau busbw with its interval, size to 90%, latency floor, expected busbw, verdict and reason;
    for reference runs also the topology the verdict assumed (``references`` by label)."""
    rows = []
    for rec in sweeps.to_dict("records"):
        size90 = rec["verdict_size_to_90pct_bytes"]
        row = {
            "sweep": rec["series"], "op": rec["op"], "ranks": rec["world_size"],
            "plateau busbw (GB/s)": rec["verdict_plateau_busbw_gbps"],
            "95% CI (GB/s)": _interval(rec["verdict_ci95_low_gbps"], rec["verdict_ci95_high_gbps"]),
            "size to 90% of plateau": format_bytes_binary(float(size90)) if pd.notna(size90) else None,
            "latency floor (us)": rec["verdict_latency_floor_us"],
            "expected (GB/s)": rec["verdict_expected_busbw_gbps"],
            "verdict": rec["verdict"] if pd.notna(rec["verdict"]) else "not judged",
            "why": rec["verdict_reason"],
        }
        if references is not None:
            run = references.get(rec["label"])
            row["topology judged against"] = (run.topology or "none") if run else None
        rows.append(row)
    columns = INTERCONNECT_COLUMNS + (["topology judged against"] if references is not None else [])
    return pd.DataFrame(rows, columns=columns)


INTERCONNECT_FORMATS = {"plateau busbw (GB/s)": "{:.2f}", "latency floor (us)": "{:.1f}", "expected (GB/s)": "{:.2f}"}


def low_references(sweeps: pd.DataFrame, references: dict[str, ReferenceRun]) -> list[dict[str, str]]:
    """Per reference sweep judged low or suspicious: its verdict, and a sentence with the reason, the verdict's
    first hint and the cause its source documents."""
    out = []
    judged = sweeps[(sweeps["source"] == "reference") & sweeps["verdict"].isin(["low", "suspicious"])]
    for rec in judged.to_dict("records"):
        run = references.get(rec["label"])
        hints = json.loads(rec["verdict_hints_json"] or "[]")
        text = f"{rec['series']}, {rec['op']}: {rec['verdict_reason']}."
        if hints:
            text += f" The verdict's first hint: {hints[0]}."
        if run and run.documented_cause:
            text += f" Documented cause ({run.source_url}): {run.documented_cause}."
        out.append({"verdict": str(rec["verdict"]), "text": text})
    return out


def mistral_memory(rows: pd.DataFrame) -> dict[str, Any] | None:
    """Mistral-7B under DDP on one GPU (bf16, Adam), without and with fp32 master weights: the stored ZeRO-paper rows
    (:func:`shardscope.results.report_queries.seed_memory_model`); None when the database holds none."""
    one = rows[(rows["strategy"] == "ddp") & (rows["gpus"] == 1)]
    plain, master = one[~one["master_weights"].astype(bool)], one[one["master_weights"].astype(bool)]
    if plain.empty or master.empty:
        return None
    plain, master = plain.iloc[0], master.iloc[0]
    gb = {key: plain[key] / 1e9 for key in ("param_bytes", "grad_bytes", "optim_bytes", "total_bytes")}
    return {
        "params_gb": gb["param_bytes"], "grads_gb": gb["grad_bytes"], "optimizer_gb": gb["optim_bytes"],
        "total_gb": gb["total_bytes"], "n_params": int(plain["n_params"]), "assumption": plain["assumption"],
        "master_total_gb": master["total_bytes"] / 1e9, "master_optimizer_gb": master["optim_bytes"] / 1e9,
        "master_assumption": master["assumption"],
        "gpu_gb": plain["gpu_memory_bytes"] / 1e9, "fits": bool(plain["fits"]), "master_fits": bool(master["fits"]),
    }


def mistral_memory_table(rows: pd.DataFrame, gpus: int = 8) -> pd.DataFrame:
    """The stored ZeRO-paper model states of every strategy on ``gpus`` GPUs with the fp32 master copy, in GB."""
    sub = rows[(rows["gpus"] == gpus) & rows["master_weights"].astype(bool)]
    return pd.DataFrame({"strategy": sub["strategy"], "gpus": sub["gpus"], "params_gb": sub["param_bytes"] / 1e9,
                         "grads_gb": sub["grad_bytes"] / 1e9, "optimizer_gb": sub["optim_bytes"] / 1e9,
                         "total_gb": sub["total_bytes"] / 1e9}).reset_index(drop=True)


MISTRAL_FORMATS = {"params_gb": "{:.1f}", "grads_gb": "{:.1f}", "optimizer_gb": "{:.1f}", "total_gb": "{:.1f}"}


def emulated_sentences(slowdown: pd.DataFrame) -> list[str]:
    """Per strategy: its measured slowdown from the fastest to the slowest emulated preset (whatever it is)."""
    sentences = []
    for rec in slowdown.to_dict("records"):
        who = f"{strategy_name(rec['strategy'])} ({rec['model']}, {rec['world_size']} ranks)"
        if pd.notna(rec["slowdown"]):
            text = (f"{who}: {rec['fastest_step_s']:.4f} s per step on {rec['fastest_preset']} (fastest) to"
                    f" {rec['slowest_step_s']:.4f} s on {rec['slowest_preset']} (slowest), {rec['slowdown']:.2f}x")
        elif pd.notna(rec["fastest_preset"]):
            text = f"{who}: finished on one preset only ({rec['fastest_preset']}, {rec['fastest_step_s']:.4f} s per step)"
        else:
            text = f"{who}: no run finished"
        if pd.notna(rec["not_finished"]) and rec["not_finished"]:
            text += f"; did not finish on {rec['not_finished']}"
        sentences.append(text + ".")
    return sentences


def modeled_vs_measured_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Modeled and measured step time side by side, labelled, with their ratio."""
    return rows.assign(strategy=rows["strategy"].map(strategy_name)).rename(columns={
        "world_size": "GPUs", "modeled_step_time_s": "modeled step (s)", "modeled_exposed_comm_s": "modeled exposed comm (s)",
        "measured_step_time_s": "measured step (s)", "measured_over_modeled": "measured / modeled",
        "modeled_fits": "fits (modeled)"})


MODELED_FORMATS = {"modeled step (s)": "{:.4f}", "modeled exposed comm (s)": "{:.4f}", "measured step (s)": "{:.4f}",
                   "measured / modeled": "{:.2f}"}
