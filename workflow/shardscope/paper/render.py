"""Render ``paper/report.md`` (a Jinja2 template over Markdown) into one self-contained HTML file.

Values from the database are text, never markup: host and device names come from result files that anyone
can write, so each value is escaped for HTML and Markdown before Markdown sees the template (issue 35).

Every number and table in the report comes from a database query at build time (the same
queries the figures use, see :mod:`shardscope.paper.context`); figures are embedded as
base64 PNGs, so the HTML travels alone.
"""

from __future__ import annotations

import os
from pathlib import Path

import jinja2
import markdown

from shardscope.errors import UserError
from shardscope.fileio import atomic_write_text
from shardscope.paper.context import markdown_table, report_context, text_for_markdown
from shardscope.results.selection import RunSelection

__all__ = ["markdown_table", "render_report", "report_context"]

_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font-family: system-ui, sans-serif; max-width: 64rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.5; color: #222; }}
table {{ border-collapse: collapse; margin: 1rem 0; font-size: 0.8rem; width: 100%; }}
th, td {{ border: 1px solid #ccc; padding: 0.25rem 0.4rem; text-align: right; overflow-wrap: anywhere; min-width: 4em; }}
th {{ background: #f3f3f3; }} td:first-child, th:first-child {{ text-align: left; }}
figure {{ margin: 1.5rem 0; }} img {{ max-width: 100%; }} figcaption {{ font-size: 0.9rem; color: #444; }}
code {{ background: #f6f6f6; padding: 0 0.2rem; }} .modeled {{ color: #7a4d00; }}
</style></head><body>
{body}
</body></html>
"""


def render_report(db: str | os.PathLike[str], figures_dir: str | os.PathLike[str], source: str | os.PathLike[str],
                  out: str | os.PathLike[str], reference_db: str | os.PathLike[str] | None = None,
                  runs: RunSelection | None = None) -> Path:
    """Render the Markdown template ``source`` with :func:`report_context` to a self-contained HTML file."""
    src = Path(source)
    if not src.exists():
        raise UserError(f"{src}: report template not found")
    # Only the template is Markdown: every value it shows is text (text_for_markdown), except the tables and
    # figures this package builds (Markup, their cells and captions escaped the same way when built).
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(src.parent), undefined=jinja2.StrictUndefined,
                             autoescape=True, finalize=text_for_markdown)
    try:
        text = env.get_template(src.name).render(**report_context(db, figures_dir, reference_db, runs))
    except jinja2.TemplateError as exc:
        raise UserError(f"{src}: template error: {exc}") from None
    body = markdown.markdown(text, extensions=["tables", "fenced_code"])
    return atomic_write_text(out, _HTML.format(title="shardscope report", body=body))
