"""Stored script injection (issue 35): strings from result files reach the report as text, never as markup.

Every string field of a collectives and a training result that collect accepts with a payload appended gets
one; the files are collected, the figures drawn and the report rendered; the HTML is parsed and must hold no
element, attribute or link that the payloads carry, while their text is visible.
"""

from __future__ import annotations

import copy
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from factories import collective_doc, training_doc

PAYLOAD = ('<script>alert(1)</script><img src=x onerror=alert(2)>"><svg onload=alert(3)>'
           "[x](javascript:alert(4))![y](javascript:alert(5))`code`*em*")
TEMPLATE = Path(__file__).resolve().parents[2] / "paper" / "report.md"


def _string_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths (keys and list positions) of every string in a JSON document."""
    if isinstance(value, str):
        return [path]
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    return [found for key, child in items for found in _string_paths(child, (*path, key))]


def _set(doc: Any, path: tuple[Any, ...], value: str) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


def poisoned(doc: dict[str, Any], folder: Path) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    """``doc`` with the payload appended to every string that collect still accepts with it; those paths."""
    from shardscope.results.store import validate_inputs

    doc, taken = copy.deepcopy(doc), []
    for path in _string_paths(doc):
        trial = copy.deepcopy(doc)
        original = trial
        for key in path:
            original = original[key]
        _set(trial, path, f"{original}{PAYLOAD}")
        probe = folder / "probe.json"
        probe.write_text(json.dumps(trial))
        if not validate_inputs([str(probe)])[1]:
            doc, taken = trial, [*taken, path]
    return doc, taken


class _Markup(HTMLParser):
    """Every element and attribute of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_payloads_in_every_string_field_stay_text_in_the_report(tmp_path: Path) -> None:
    from shardscope.figures.plots import draw_all
    from shardscope.paper.render import render_report
    from shardscope.results.store import collect

    docs, taken = [], []
    for doc in (collective_doc("all_reduce"), training_doc("ddp"), training_doc("zero3", step_time_s=0.03)):
        bad, paths = poisoned(doc, tmp_path)
        docs.append(bad)
        taken += paths
    assert ("env", "host") in taken and ("env", "devices", 0) in taken  # the names the issue found raw
    db = tmp_path / "r.duckdb"
    inputs = [tmp_path / f"result-{i}.json" for i in range(len(docs))]
    for path, doc in zip(inputs, docs):
        path.write_text(json.dumps(doc))
    collect(db, [str(p) for p in inputs])
    draw_all(db, tmp_path / "figures")
    html = render_report(str(db), str(tmp_path / "figures"), str(TEMPLATE), str(tmp_path / "report.html")).read_text()

    page = _Markup()
    page.feed(html)
    tags = {tag for tag, _ in page.tags}
    assert not tags & {"script", "svg", "a"}, tags
    for tag, attrs in page.tags:
        assert not [name for name in attrs if name.startswith("on")], (tag, attrs)
        assert not any("javascript" in (value or "") for value in attrs.values()), (tag, attrs)
        if tag == "img":
            assert (attrs.get("src") or "").startswith("data:image/png;base64,"), attrs
    visible = html.replace("&lt;", "<")
    assert "<script>alert(1)</script>" in visible or "&lt;script&gt;" in html  # the host name is shown, as text
