"""Everything the report template may use, queried from the database when the report is built.

Numbers and tables come from the same queries as the figures; each figure's caption (its
question and the answer computed from its data) comes from the ``figures.json`` that
``shardscope figures`` wrote beside the PNGs, so captions always match the images embedded.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import os
import re
from pathlib import Path
from typing import Any

import pandas as pd
from markupsafe import Markup

from shardscope.contracts.names import BEST_MICROBATCH_SUFFIX
from shardscope.errors import UserError
from shardscope.fileio import loads_bounded
from shardscope.results import queries
from shardscope.results.selection import RunSelection, select_runs
from shardscope.figures.captions import answer_ranking, noise_against_best, noise_sentence, ties_with
from shardscope.figures.plots import FIGURES
from shardscope.results.reference_manifest import load_manifest
from shardscope.results.sources import open_results, require_database
from shardscope.results.tablebase import iso_text
from shardscope.figures.style import format_params, strategy_name
from shardscope.results import memory_case_queries as memory_cases
from shardscope.results import report_queries
from shardscope.results.queries_decision import decision_map
from shardscope.paper import tables
from shardscope.paper.ledger import ledger_section
from shardscope.paper.ranking import RANKING_FORMATS, has_peers, ranking_table


#: Characters that would make HTML or Markdown of a value, and the entity each is written as: a value from the
#: database (a host or device name, an answer that quotes one) reaches the report as text, never as an element,
#: attribute, link, image or emphasis. ``.``, ``-``, ``_``, ``(`` and ``#`` act only next to the ones escaped
#: here or at a line's start (numbers and names are full of them), so they stay.
_ACTIVE = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;", **{c: f"&#{ord(c)};" for c in "\\`*[]|!"}}


#: A pair of backticks around text: a code span (our sentences name commands and files that way).
_CODE_SPAN = re.compile(r"`([^`]+)`")


def text_for_markdown(value: Any) -> Markup:
    """``value`` as text that Markdown and HTML show literally (see :data:`_ACTIVE`); Markup passes unchanged.

    Text between a pair of backticks becomes ``<code>`` around that text, itself escaped the same way: the
    sentences name commands like `` `lspci -vv` `` and the page must not show the backticks (issue 32); the
    element carries no attribute, so nothing in it can act (issue 35).
    """
    if isinstance(value, Markup):
        return value
    parts = _CODE_SPAN.split(str(value))
    escaped = ["".join(_ACTIVE.get(c, c) for c in part) for part in parts]
    return Markup("".join(f"<code>{part}</code>" if i % 2 else part for i, part in enumerate(escaped)))


def markdown_table(df: pd.DataFrame, formats: dict[str, str] | None = None) -> Markup:
    """A DataFrame as a Markdown table, with per-column format specs (``'{:.2f}'``); cells are text (:func:`text_for_markdown`)."""
    if df.empty:
        return Markup("_(no rows)_")
    formats = formats or {}

    def cell(col: str, value: Any) -> str:
        if value is None or (isinstance(value, float) and pd.isna(value)):
            return "–"
        return text_for_markdown(formats[col].format(value) if col in formats else str(value))

    header = "| " + " | ".join(df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(cell(c, v) for c, v in zip(df.columns, row)) + " |" for row in df.itertuples(index=False)]
    return Markup("\n".join([header, rule, *body]))


def figure_index(figures_dir: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """The figures' numbers, questions and answers written by ``shardscope figures``; UserError if absent."""
    path = Path(figures_dir) / "figures.json"
    if not path.exists():
        raise UserError(f"{path}: figure index not found; run `shardscope figures` first")
    return {entry["name"]: entry for entry in loads_bounded(path.read_text(encoding="utf-8"), path)["figures"]}


def figure_html(figures_dir: str | os.PathLike[str], entry: dict[str, Any]) -> Markup:
    """One figure as HTML: the PNG inlined as base64 and a caption with its question and answer."""
    png = Path(figures_dir) / f"{entry['name']}.png"
    if not png.exists():
        raise UserError(f"{png}: figure not found; run `shardscope figures` first")
    data = base64.b64encode(png.read_bytes()).decode()
    return Markup(f'<figure id="fig-{html.escape(str(entry["name"]))}"><img alt="{text_for_markdown(entry["title"])}" '
                  f'src="data:image/png;base64,{data}"><figcaption><strong>Figure {text_for_markdown(entry["number"])}. '
                  f'{text_for_markdown(entry["title"])}.</strong> {text_for_markdown(entry["question"])} '
                  f'<em>{text_for_markdown(entry["answer"])}</em></figcaption></figure>')


def _measured_summary(con: Any) -> dict[str, Any]:
    """Counts of the measured runs, their hosts, devices and software, and their first and last times (ISO text)."""
    summary = con.execute("""
        SELECT count(*) AS runs, count(DISTINCT host) AS hosts, min(measured_at) AS first, max(measured_at) AS last,
               string_agg(DISTINCT devices, '; ') AS devices, string_agg(DISTINCT torch_version, ', ') AS torch,
               string_agg(DISTINCT comm_library, ', ') AS comm
        FROM all_runs WHERE source = 'measured'""").df().iloc[0].to_dict()
    return {key: iso_text(value) if key in ("first", "last") else value for key, value in summary.items()}


def _judged_against(run: Any) -> str | None:
    """The topology a reference run's verdict used and why (``preset:hgx-h100 (assumed: …)``), or why none."""
    if run is None:
        return None
    if run.topology:
        return f"{run.topology} ({run.topology_note})" if run.topology_note else run.topology
    return run.topology_note or "none"


def _reference_sources(references: pd.DataFrame) -> pd.DataFrame:
    """Reference runs in the database joined with their bundled source (hardware, address, and the topology
    their verdict is computed against, with why)."""
    by_file = {f"nccl-tests:reference/{run.file}": run for run in load_manifest()}
    rows = []
    for rec in references.to_dict("records"):
        run = by_file.get(rec["job_id"])
        rows.append({"reference run": rec["label"], "fabric": rec["fabric"], "op": rec["op"], "ranks": rec["world_size"],
                     "hardware": run.hardware if run else rec["devices"], "source": run.source_url if run else rec["job_id"],
                     "verdict judged against": _judged_against(run)})
    return pd.DataFrame(rows)


def _at_best(sub: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """The runs at each strategy's own best micro-batch (placement marked by the micro-batch search) when some
    finished, with True; else ``sub`` itself and False."""
    marked = sub["placement"].astype(str).str.endswith(BEST_MICROBATCH_SUFFIX) if "placement" in sub else None
    if marked is not None and marked.any() and (sub.loc[marked, "outcome"] == "ok").any():
        return sub[marked], True
    return sub, False


def _batch_text(row: pd.Series) -> str:
    """``at micro-batch 4 x 2 accumulated (global batch 16)`` for a run at its strategy's best micro-batch."""
    accum = int(row["grad_accum"]) if pd.notna(row.get("grad_accum")) else 1
    return (f" at micro-batch {int(row['micro_batch'])} x {accum} accumulated "
            f"(global batch {int(row['micro_batch']) * accum * int(row['world_size'])}, each strategy at its own best)")


def _recommendations(speed: pd.DataFrame) -> list[str]:
    """One sentence per machine, model and GPU count measured: the fastest strategy and the leanest one.

    Where the micro-batch search ran, the sentence compares the strategies at their own best micro-batches
    (the runs whose placement ends ``@best_microbatch``) and names the winner's micro-batch."""
    sentences = []
    for (fabric, host, model, ws), sub in speed.groupby(["fabric", "host", "model", "world_size"], sort=True):
        sub, best = _at_best(sub)
        ok = sub[sub["outcome"] == "ok"]
        if ok.empty:
            continue
        fast = ok.sort_values("median_step_time_s").iloc[0]
        lean = ok.sort_values("held_bytes").iloc[0]
        comparison = noise_against_best(fast, ok)
        if comparison.tied:
            batch = {s: f" (micro-batch {int(m)})" for s, m in zip(ok["strategy"], ok["micro_batch"])} if best else {}
            text = (f"On {host} ({fabric}), {model} on {ws} ranks: "
                    + noise_sentence(comparison, f"{fast['median_step_time_s']:.4f} s per step",
                                     lambda s: strategy_name(s) + batch.get(s, ""))
                    + ", so none is named the winner")
        else:
            text = (f"On {host} ({fabric}), {model} on {ws} ranks: {strategy_name(fast['strategy'])} was fastest"
                    + (_batch_text(fast) if best else "") + f" ({fast['median_step_time_s']:.4f} s per step)")
        if lean["strategy"] != fast["strategy"] and pd.notna(lean["held_bytes_vs_ddp"]) and pd.notna(lean["tokens_per_s_vs_ddp"]):
            text += (f"; {strategy_name(lean['strategy'])} holds the least ({lean['held_bytes_vs_ddp']:.0%} of DDP's"
                     f" bytes) at {lean['tokens_per_s_vs_ddp']:.2f}x DDP's throughput")
        failed = sub[sub["outcome"] != "ok"]
        if len(failed):
            text += "; " + ", ".join(f"{strategy_name(s)} ended {o}" for s, o in zip(failed["strategy"], failed["outcome"]))
        sentences.append(text + ".")
    return sentences


def _fastest_ties(ok: pd.DataFrame) -> list[str]:
    """Strategies within noise of the fastest run on the same machine, model and GPU count (names for the report)."""
    if ok.empty:
        return []
    fast = ok.sort_values("median_step_time_s").iloc[0]
    same = ok[(ok["host"] == fast["host"]) & (ok["model"] == fast["model"]) & (ok["world_size"] == fast["world_size"])]
    return [strategy_name(s) for s in ties_with(fast, same)]


def _decision_table(decision: pd.DataFrame) -> pd.DataFrame:
    """The map's preset columns as a table: one row per (model, panel), one column per GPU memory, the decision's label
    (the stored modeled cells; the measured points of the figure are not in it)."""
    cells = decision[decision["method"] == "modeled"] if "method" in decision else decision
    presets = cells[cells["preset"].notna()]
    if presets.empty:
        return pd.DataFrame()
    table = presets.assign(
        model=[f"{p} ({format_params(n)})" for p, n in zip(presets["preset"], presets["n_params"])],
        panel=presets["title"])
    wide = table.pivot_table(index=["model", "n_params", "panel"], columns="gpu_memory_gb", values="pick", aggfunc="first")
    wide = wide.reset_index().sort_values(["n_params", "panel"]).drop(columns="n_params")
    gpus = int(cells["gpus"].iloc[0]) if not cells.empty else 8
    wide.columns = [c if isinstance(c, str) else f"{c:g} GB x {gpus}" for c in wide.columns]
    return wide


def report_context(db: str | os.PathLike[str], figures_dir: str | os.PathLike[str],
                   reference_db: str | os.PathLike[str] | None = None,
                   runs: RunSelection | None = None) -> dict[str, Any]:
    """Everything the template may use: tables, facts, recommendations and figures, all from the database.

    Reference runs come from ``reference_db`` (the reference stage's database) when given, as for
    the figures; without it the report lists none. ``runs``: which of the database's runs are reported (default:
    the current plan's, :func:`shardscope.results.selection.select_runs`), said under ``run_selection``.
    """
    require_database(db)
    index = figure_index(figures_dir)
    missing = [f.name for f in FIGURES if f.name not in index]
    if missing:
        raise UserError(f"{Path(figures_dir) / 'figures.json'}: lacks {', '.join(missing)}; run `shardscope figures` again")
    selection = runs or select_runs(db)
    with open_results(db, reference_db, selection.inputs) as con:
        speed = queries.strategy_speed(con)
        sweeps = report_queries.interconnect_sweeps(con)
        references = queries.reference_runs(con)
        runs = _measured_summary(con)
        emulated = report_queries.emulated_training(con)
        modeled_steps = report_queries.modeled_vs_measured_steps(con)
        doctor = report_queries.doctor_warnings(con)
        mistral_peak = memory_cases.mistral_peak_table(con)
        ranking = queries.machine_ranking(con)
        decision = decision_map(con)
        memory_model = report_queries.seed_memory_model(con)
    ok = speed[speed["outcome"] == "ok"]
    by_label = {run.label: run for run in load_manifest()}
    ours, theirs = sweeps[sweeps["source"] != "reference"], sweeps[sweeps["source"] == "reference"]
    slowdown = report_queries.emulated_slowdown(emulated)
    return {
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "run_selection": selection.description,
        "runs": runs,
        "reference_count": len(references),
        "fastest": ok.sort_values("median_step_time_s").iloc[0].to_dict() if not ok.empty else None,
        "fastest_ties": _fastest_ties(ok),
        "smallest": ok.sort_values("held_bytes").iloc[0].to_dict() if not ok.empty else None,
        "mistral": tables.mistral_memory(memory_model),
        "low_references": tables.low_references(sweeps, by_label),
        "unjudged_cpu": bool((ours["verdict"] == "unknown").any() and (ours["fabric"] == "cpu").any()),
        "emulated": tables.emulated_sentences(slowdown),
        "has_modeled_steps": not modeled_steps.empty,
        "ledger": ledger_section(db, selection.inputs),
        "doctor": doctor.to_dict("records"),
        "recommendations": _recommendations(speed),
        "ranking": {"ranked": has_peers(ranking), "answer": answer_ranking(ranking),
                    "machines": int(ranking["host"].nunique()), "tolerance": queries.PEER_TOLERANCE},
        "answers": {name: entry["answer"] for name, entry in index.items()},
        "figures": {name: figure_html(figures_dir, entry) for name, entry in index.items()},
        "tables": {
            "strategy_summary": markdown_table(
                speed[["host", "fabric", "model", "world_size", "strategy", "outcome", "median_step_time_s", "tokens_per_s",
                       "step_time_vs_ddp", "tokens_per_s_vs_ddp", "held_bytes", "held_bytes_vs_ddp", "peak_memory_bytes"]],
                {"median_step_time_s": "{:.4f}", "tokens_per_s": "{:.0f}", "step_time_vs_ddp": "{:.2f}",
                 "tokens_per_s_vs_ddp": "{:.2f}", "held_bytes_vs_ddp": "{:.2f}", "held_bytes": "{:,}",
                 "peak_memory_bytes": "{:,}"}),
            "interconnect": markdown_table(tables.interconnect_table(ours), tables.INTERCONNECT_FORMATS),
            "reference_interconnect": markdown_table(tables.interconnect_table(theirs, by_label), tables.INTERCONNECT_FORMATS),
            "reference_sources": markdown_table(_reference_sources(references)),
            "mistral_memory": markdown_table(tables.mistral_memory_table(memory_model), tables.MISTRAL_FORMATS),
            "mistral_peak": markdown_table(mistral_peak, memory_cases.GB_FORMATS),
            "emulated": markdown_table(
                emulated[["preset", "placement", "model", "world_size", "strategy", "outcome", "median_step_time_s",
                          "tokens_per_s",
                          "comm_time_share"]],
                {"median_step_time_s": "{:.4f}", "tokens_per_s": "{:.0f}", "comm_time_share": "{:.2f}"}),
            "modeled_vs_measured": markdown_table(tables.modeled_vs_measured_table(modeled_steps), tables.MODELED_FORMATS),
            "doctor": markdown_table(doctor[["host", "check_name", "status", "read", "concluded", "action"]]),
            "decision": markdown_table(_decision_table(decision)),
            "machine_ranking": markdown_table(ranking_table(ranking), RANKING_FORMATS),
        },
    }
