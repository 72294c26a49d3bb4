"""The report's ledger section: the cost model's error against the measurements of the same jobs.

The numbers are :func:`shardscope.results.ledger.stored_ledger`'s, the very query and summary that
``shardscope accuracy --db`` prints, and the calibrations ``shardscope calibrate-step --store`` kept in
the database (:mod:`shardscope.results.calibrations`); this module only lays them out as Markdown
tables and one sentence on the strategy ranking, so the report and the command can never disagree.
"""

from __future__ import annotations

import os
from typing import Any

import pandas as pd

RATIO_FORMATS = {"median modeled/measured": "{:.2f}", "median error": "{:.1%}", "worst error": "{:.1%}",
                 "worst modeled/measured": "{:.2f}"}


def _summary_frame(groups: list[Any], what: str) -> pd.DataFrame:
    """One row per op or strategy (and ``overall``): pairs, median ratio, median and worst |error|."""
    return pd.DataFrame([{what: g.group, "pairs": g.pairs, "median modeled/measured": g.median_ratio,
                          "median error": g.median_error, "worst error": g.worst_error,
                          "worst modeled/measured": g.worst_ratio} for g in groups])


def ranking_sentence(ranking: dict[str, Any]) -> str | None:
    """Whether the model orders the strategies as measured, in one sentence (None without training pairs)."""
    if not ranking:
        return None
    text = (f"The model orders {ranking['agree']} of {ranking['pairs_ranked']} strategy pairs as measured "
            f"(pairs whose measured step times differ by more than {ranking['noise']:.0%} and, where the runs recorded "
            f"them, whose 95% intervals do not overlap; {ranking['within_noise']} closer pairs are within the noise and not ranked)")
    if ranking["disagree"]:
        text += "; it disagrees on: " + "; ".join(ranking["disagree"])
    return text + "."


def _calibration_text(stored: dict[str, Any]) -> dict[str, str]:
    """The newest stored step calibration (``shardscope calibrate-step --store``): a sentence and its per-strategy table."""
    from shardscope.paper.context import markdown_table

    detail = stored
    mfu = f"MFU {stored['mfu']:.3f}" if stored["mfu"] is not None else "no peak known, so no MFU"
    sentence = (f"{stored['model']} on {stored['world_size']} ranks ({stored['host']}): compute "
                f"{stored['effective_flops'] / 1e9:.2f} GFLOP/s ({mfu}), overlap {stored['overlap']:.2f}, "
                f"{(stored.get('call_overhead_s') or 0.0) * 1e3:.2f} ms per collective call and "
                f"{(stored.get('host_call_s') or 0.0) * 1e6:.2f} us of host work per recorded Python call, fitted on "
                f"{len(stored['run_ids'])} measured runs (calibration {stored['calibration_id']}, {stored['created_at']})")
    if "shown_of" in stored and len(stored["strategies"]) < stored["shown_of"]:
        sentence += (f"; the table shows the {len(stored['strategies'])} of them that are runs of the current plan, as "
                     "the rest of the report does")
    frame = pd.DataFrame([{"strategy": r["strategy"], "measured s": r["measured_s"], "modeled s": r["modeled_s"],
                           "error": r["modeled_s"] / r["measured_s"] - 1, "held out s": r["held_out_s"],
                           "held-out error": r["held_out_s"] / r["measured_s"] - 1, "bytes on the wire": r["wire_bytes"]}
                          for r in detail["strategies"]])
    formats = {"measured s": "{:.4f}", "modeled s": "{:.4f}", "error": "{:+.1%}", "held out s": "{:.4f}",
               "held-out error": "{:+.1%}"}
    return {"sentence": sentence, "table": markdown_table(frame, formats),
            "ranking": ranking_sentence(detail.get("ranking") or {}) or ""}


def ledger_section(db: str | os.PathLike[str], current: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The ledger of ``db`` for the report template: tables per op and strategy, the ranking, the stored calibrations,
    the notes; over the runs of ``current`` (a :class:`~shardscope.results.selection.RunSelection`'s inputs: the
    current plan's runs) when given, as the rest of the report, else every run."""
    from markupsafe import Markup

    from shardscope.paper.context import markdown_table
    from shardscope.results.calibrations import latest_collective_check, latest_step_calibration
    from shardscope.results.ledger import ErrorSummary, stored_ledger
    from shardscope.results.sources import open_results

    with open_results(db, None, current) as con:
        book = stored_ledger(con, "all_runs")
        stored = latest_step_calibration(con)
        checks, calibrated_on = latest_collective_check(con)
        shown = None if current is None else {r for (r,) in con.execute("SELECT run_id FROM all_runs").fetchall()}
    if stored and shown is not None:
        stored = {**stored, "strategies": [r for r in stored["strategies"] if r["run_id"] in shown],
                  "shown_of": len(stored["run_ids"])}
    calibrated = [ErrorSummary(r["op_group"], r["pairs"], r["median_ratio"], r["median_error"], r["worst_error"],
                               r["worst_ratio"]) for r in checks]
    notes = list(book.notes)
    if not stored and not calibrated:
        notes.append(Markup("no calibration is stored in this database (`shardscope calibrate-step --store` fits the step "
                            "model and the gloo collective model to its measured runs and keeps them here)"))  # ours, no data
    return {
        "step_calibration": _calibration_text(stored) if stored else None,
        "has_pairs": bool(book.collectives or book.training or calibrated or stored),
        "collectives": markdown_table(_summary_frame(book.collectives, "op"), RATIO_FORMATS) if book.collectives else None,
        "training": markdown_table(_summary_frame(book.training, "strategy"), RATIO_FORMATS) if book.training else None,
        "calibrated": markdown_table(_summary_frame(calibrated, "op"), RATIO_FORMATS) if calibrated else None,
        "calibrated_on": calibrated_on,
        "ranking": ranking_sentence(book.ranking),
        "notes": notes,
    }
