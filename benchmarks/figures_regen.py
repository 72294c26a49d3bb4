"""How long regenerating every figure and the report from a database takes (the budget is 20 s).

    .venv/bin/python benchmarks/figures_regen.py --db results/shardscope.duckdb \
        [--reference-db results/reference/reference.duckdb] [--limit-s 20]

Writes into a temporary folder (never into results/), prints the seconds spent drawing the
figures and rendering the report, and exits with status 1 when the total exceeds the limit.
Without --reference-db the bundled reference runs are loaded into a temporary database first
(not timed).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    """Time ``draw_all`` and ``render_report`` on ``--db``; non-zero exit when over ``--limit-s``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--reference-db")
    parser.add_argument("--limit-s", type=float, default=20.0)
    args = parser.parse_args(argv)

    start = time.perf_counter()
    from shardscope.figures.plots import draw_all
    from shardscope.reference.build import build_reference_db
    from shardscope.paper.render import render_report
    imported = time.perf_counter() - start

    with tempfile.TemporaryDirectory(prefix="figures_regen.") as tmp:
        reference = args.reference_db
        if reference is None:
            reference = str(Path(tmp) / "reference" / "reference.duckdb")
            build_reference_db(reference, Path(tmp) / "reference")
        start = time.perf_counter()
        draw_all(args.db, Path(tmp) / "figures", reference_db=reference)
        figures = time.perf_counter() - start
        start = time.perf_counter()
        render_report(args.db, Path(tmp) / "figures", REPO / "paper" / "report.md", Path(tmp) / "report.html",
                      reference_db=reference)
        paper = time.perf_counter() - start
    total = imported + figures + paper
    print(f"imports {imported:.2f} s, figures {figures:.2f} s, report {paper:.2f} s: total {total:.2f} s"
          f" (limit {args.limit_s:.0f} s)")
    return 0 if total <= args.limit_s else 1


if __name__ == "__main__":
    sys.exit(main())
