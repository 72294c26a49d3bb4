"""Our report in a real headless browser (Chromium from the distribution's packages): no JavaScript error, no
clipped table, no raw Markdown (issue 32); tests/e2e/test_pipeline.py opens the Snakemake report the same way.
Skips, with the reason, where chromium is not installed (.ci/run installs it)."""

from __future__ import annotations

from pathlib import Path

from browser import CLIPPED_TABLES, RAW_MARKDOWN, Browser, chromium_or_skip

from shardscope.paper.render import render_report

TEMPLATE = Path(__file__).resolve().parents[2] / "paper" / "report.md"


def test_our_report_has_no_error_no_clipped_table_and_no_raw_markdown(gpu_db, drawn_gpu, tmp_path):
    chromium_or_skip()
    report = render_report(str(gpu_db["db"]), str(drawn_gpu), str(TEMPLATE), str(tmp_path / "report.html"))
    with Browser() as browser:
        browser.open(report)
        assert browser.errors == []
        assert browser.evaluate(CLIPPED_TABLES) == []
        assert browser.evaluate(RAW_MARKDOWN) == []
        # the reference sources are an appendix: the page opens on the question, not on a table
        assert browser.evaluate("document.querySelector('table').getBoundingClientRect().top") > 900
        browser.screenshot(tmp_path / "report-top.png")
        emulated = browser.evaluate("[...document.querySelectorAll('table')].map(t => t.rows[0].innerText)"
                                    ".filter(h => h.startsWith('preset'))")
        assert emulated and all("placement" in header for header in emulated)


def test_the_checks_fail_on_a_page_that_has_each_fault(tmp_path):
    """The browser checks themselves: a page with a script error, a table wider than its box and raw Markdown."""
    chromium_or_skip()
    page = tmp_path / "bad.html"
    page.write_text("<!doctype html><html><body style='width:300px'><p>text - **bold** and `code`</p>"
                    "<div style='width:200px;overflow:hidden'><table style='display:block;overflow:hidden;width:200px'>"
                    f"<tr><td>{'x' * 400}</td></tr></table></div><script>null.mime_type</script></body></html>")
    with Browser() as browser:
        browser.open(page, 1)
        assert any("mime_type" in error for error in browser.errors)
        assert browser.evaluate(CLIPPED_TABLES)
        assert browser.evaluate(RAW_MARKDOWN)
