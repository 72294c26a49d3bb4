"""``shardscope`` subcommands of the results stage (registered by :mod:`shardscope.cli`)."""

from __future__ import annotations

import argparse


def _cmd_collect(args: argparse.Namespace) -> int:
    from shardscope.results.store import collect

    summary = collect(args.db, args.inputs, manifest=args.manifest)
    print(f"{args.db}: loaded {summary['new_runs']} new runs ({summary['skipped_runs']} already present) from {len(args.inputs)} files")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands to the ``shardscope`` parser."""
    p = sub.add_parser("collect", help="validate per-job results and load them into DuckDB in one transaction")
    p.add_argument("--db", required=True)
    p.add_argument("--manifest", help="write a JSON summary of what was loaded here")
    p.add_argument("inputs", nargs="+", metavar="INPUT")
    p.set_defaults(func=_cmd_collect)
