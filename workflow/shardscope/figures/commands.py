"""``shardscope`` subcommands of the figures stage (registered by :mod:`shardscope.cli`)."""

from __future__ import annotations

import argparse


def _cmd_figures(args: argparse.Namespace) -> int:
    import sys

    from shardscope.figures.plots import draw_all

    if args.reference_db is None and not args.no_reference:
        print("shardscope: note: no --reference-db: figures 1 and 2 show this database's runs only "
              "(the reference stage builds results/reference/reference.duckdb)", file=sys.stderr)
    from shardscope.results.selection import select_runs

    written = draw_all(args.db, args.out, reference_db=args.reference_db,
                       runs=select_runs(args.db, args.runs, args.manifest))
    print(f"{len(written)} figure files in {args.out}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands to the ``shardscope`` parser."""
    p = sub.add_parser("figures", help="regenerate every figure from the database")
    p.add_argument("--db", required=True, help="the results database")
    p.add_argument("--out", required=True, help="folder for the figures, their data and captions")
    ref = p.add_mutually_exclusive_group()
    ref.add_argument("--reference-db", help="attach the reference stage's database and draw its public runs beside ours")
    ref.add_argument("--no-reference", action="store_true", help="draw the database's own runs only, without the note that --reference-db is absent")
    add_run_selection(p)
    p.set_defaults(func=_cmd_figures)


def add_run_selection(p: argparse.ArgumentParser) -> None:
    """--runs and --manifest: which of the database's runs are drawn (shardscope.results.selection)."""
    p.add_argument("--runs", choices=("current", "all"), default="current",
                   help="current (default): the runs of the current plan, the newest of each result file the latest "
                        "collect loaded; all: every run in the database (history)")
    p.add_argument("--manifest", help="the collect manifest naming the current plan's result files "
                                      "(default: db/collect.json beside the database's folder)")

