"""Render ``paper/report.md`` (a Jinja2 template over Markdown) into one self-contained HTML file.

Every number and table in the report comes from a database query at build time (the same
queries the figures use); figures are embedded as base64 PNGs, so the HTML travels alone.
"""

from __future__ import annotations

import base64
import datetime as _dt
import os
from pathlib import Path
from typing import Any

import jinja2
import markdown
import pandas as pd

from shardscope.errors import UserError
from shardscope.fileio import atomic_write_text
from shardscope.figures import queries
from shardscope.figures.plots import FIGURES
from shardscope.results.store import connect_readonly
from shardscope.training.memory_model import memory_table

_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.5; color: #222; }}
table {{ border-collapse: collapse; margin: 1rem 0; font-size: 0.9rem; }}
th, td {{ border: 1px solid #ccc; padding: 0.25rem 0.6rem; text-align: right; }}
th {{ background: #f3f3f3; }} td:first-child, th:first-child {{ text-align: left; }}
img {{ max-width: 100%; }} figcaption {{ font-size: 0.9rem; color: #555; }}
code {{ background: #f6f6f6; padding: 0 0.2rem; }}
</style></head><body>
{body}
</body></html>
"""


def markdown_table(df: pd.DataFrame, formats: dict[str, str] | None = None) -> str:
    """A DataFrame as a Markdown table, with per-column format specs (``'{:.2f}'``)."""
    if df.empty:
        return "_(no rows)_"
    formats = formats or {}

    def cell(col: str, value: Any) -> str:
        if value is None or (isinstance(value, float) and pd.isna(value)):
            return "–"
        return formats[col].format(value) if col in formats else str(value)

    header = "| " + " | ".join(df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(cell(c, v) for c, v in zip(df.columns, row)) + " |" for row in df.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def _figure_html(figures_dir: Path, name: str, question: str, number: int) -> str:
    png = figures_dir / f"{name}.png"
    if not png.exists():
        raise UserError(f"{png}: figure not found; run `shardscope figures` first")
    data = base64.b64encode(png.read_bytes()).decode()
    return (f'<figure><img alt="{name}" src="data:image/png;base64,{data}">'
            f"<figcaption>Figure {number}. {question}</figcaption></figure>")


def report_context(db: str | os.PathLike[str], figures_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Everything the template may use: tables, facts and figures, all from the database."""
    with connect_readonly(db) as con:
        speed = queries.strategy_speed(con)
        peaks = con.execute("""SELECT host, source, op, world_size, placement, transport, peak_busbw_gbps, peak_at_size_bytes
                               FROM collective_peaks ORDER BY source, host, op, world_size""").df()
        runs = con.execute("""SELECT count(*) AS runs, count(DISTINCT host) AS hosts, min(measured_at) AS first,
                                     max(measured_at) AS last, any_value(devices) AS devices,
                                     any_value(torch_version) AS torch, any_value(comm_library) AS comm
                              FROM runs WHERE source = 'measured'""").df().iloc[0].to_dict()
    ok = speed[speed["outcome"] == "ok"]
    fastest = ok.sort_values("median_step_time_s").iloc[0].to_dict() if not ok.empty else None
    smallest = ok.sort_values("held_bytes").iloc[0].to_dict() if not ok.empty else None
    mistral = pd.DataFrame(memory_table("mistral-7b", "all", 8))
    mistral_ddp_1 = memory_table("mistral-7b", "ddp", 1)[0]
    gb = "{:.1f}"
    figures = {f.name: _figure_html(Path(figures_dir), f.name, f.question, i + 1) for i, f in enumerate(FIGURES)}
    return {
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "runs": runs,
        "fastest": fastest,
        "smallest": smallest,
        "mistral_ddp_gb": mistral_ddp_1["total_bytes"] / 1e9,
        "figures": figures,
        "tables": {
            "strategy_summary": markdown_table(
                speed[["host", "model", "world_size", "strategy", "outcome", "median_step_time_s", "tokens_per_s",
                       "step_time_vs_ddp", "held_bytes", "held_bytes_vs_ddp", "peak_memory_bytes"]],
                {"median_step_time_s": "{:.4f}", "tokens_per_s": "{:.0f}", "step_time_vs_ddp": "{:.2f}",
                 "held_bytes_vs_ddp": "{:.2f}", "held_bytes": "{:,}", "peak_memory_bytes": "{:,}"}),
            "collective_peaks": markdown_table(peaks, {"peak_busbw_gbps": "{:.3f}", "peak_at_size_bytes": "{:,}"}),
            "mistral_memory": markdown_table(
                mistral.assign(params_gb=mistral["param_bytes"] / 1e9, grads_gb=mistral["grad_bytes"] / 1e9,
                               optimizer_gb=mistral["optim_bytes"] / 1e9, total_gb=mistral["total_bytes"] / 1e9)
                [["strategy", "gpus", "params_gb", "grads_gb", "optimizer_gb", "total_gb"]],
                {"params_gb": gb, "grads_gb": gb, "optimizer_gb": gb, "total_gb": gb}),
        },
    }


def render_report(db: str, figures_dir: str, source: str, out: str) -> Path:
    """Render the Markdown template ``source`` with :func:`report_context` to a self-contained HTML file."""
    src = Path(source)
    if not src.exists():
        raise UserError(f"{src}: report template not found")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(src.parent), undefined=jinja2.StrictUndefined, autoescape=False)
    try:
        text = env.get_template(src.name).render(**report_context(db, figures_dir))
    except jinja2.TemplateError as exc:
        raise UserError(f"{src}: template error: {exc}") from None
    body = markdown.markdown(text, extensions=["tables", "fenced_code"])
    return atomic_write_text(out, _HTML.format(title="shardscope report", body=body))
