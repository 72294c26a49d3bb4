"""``shardscope`` subcommands of the paper stage (registered by :mod:`shardscope.cli`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from shardscope.figures.commands import add_run_selection


def _cmd_paper(args: argparse.Namespace) -> int:
    import sys

    from shardscope.paper.render import render_report

    if args.reference_db is None and not args.no_reference:
        print("shardscope: note: no --reference-db: the report lists this database's runs only "
              "(the reference stage builds results/reference/reference.duckdb)", file=sys.stderr)
    from shardscope.results.selection import select_runs

    render_report(args.db, args.figures, args.source, args.out, reference_db=args.reference_db,
                  runs=select_runs(args.db, args.runs, args.manifest))
    print(f"report written to {args.out}")
    return 0


def default_template() -> Path:
    """The source tree's ``paper/report.md``, found from the package itself so ``paper`` works from any folder.

    Without a source tree beside the package (an install from a wheel), ``paper/report.md`` of the
    current folder, as before.
    """
    found = Path(__file__).resolve().parents[3] / "paper" / "report.md"
    return found if found.is_file() else Path("paper/report.md")


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands to the ``shardscope`` parser."""
    p = sub.add_parser("paper", help="render the report from paper/ with numbers and figures from the database")
    p.add_argument("--db", required=True, help="the results database")
    p.add_argument("--figures", required=True, help="folder written by `shardscope figures`")
    p.add_argument("--source", default=str(default_template()),
                   help="the report template (default: paper/report.md of the source tree shardscope runs from)")
    p.add_argument("--out", required=True, help="the HTML report to write")
    ref = p.add_mutually_exclusive_group()
    ref.add_argument("--reference-db", help="attach the reference stage's database and list its public runs beside ours")
    ref.add_argument("--no-reference", action="store_true", help="report the database's own runs only, without the note that --reference-db is absent")
    add_run_selection(p)
    p.set_defaults(func=_cmd_paper)
