"""``shardscope`` subcommands of the figures stage (registered by :mod:`shardscope.cli`)."""

from __future__ import annotations

import argparse


def _cmd_figures(args: argparse.Namespace) -> int:
    from shardscope.figures.plots import draw_all

    written = draw_all(args.db, args.out)
    print(f"{len(written)} figure files in {args.out}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands to the ``shardscope`` parser."""
    p = sub.add_parser("figures", help="regenerate every figure from the database")
    p.add_argument("--db", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(func=_cmd_figures)
