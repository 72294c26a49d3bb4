"""``shardscope`` subcommands of the figures stage (registered by :mod:`shardscope.cli`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def _cmd_figures(args: argparse.Namespace) -> int:
    from shardscope.figures.plots import draw_all

    written = draw_all(args.db, args.out, reference_db=args.reference_db, bundled_reference=not args.no_reference)
    print(f"{len(written)} figure files in {args.out}")
    return 0


def _cmd_reference(args: argparse.Namespace) -> int:
    from shardscope.figures.reference import REFERENCE_DIR, build_reference_db

    docs = args.docs or str(Path(args.db).parent)
    summary = build_reference_db(args.db, docs, folder=args.source or REFERENCE_DIR, manifest=args.manifest)
    print(f"{args.db}: {summary['reference_runs']} reference runs (public nccl-tests results, not measured here) and their"
          f" verdicts; documents in {docs}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands to the ``shardscope`` parser."""
    p = sub.add_parser("figures", help="regenerate every figure from the database")
    p.add_argument("--db", required=True, help="the results database")
    p.add_argument("--out", required=True, help="folder for the figures, their data and captions")
    ref = p.add_mutually_exclusive_group()
    ref.add_argument("--reference-db", help="draw the reference runs of this database (default: the bundled ones)")
    ref.add_argument("--no-reference", action="store_true", help="draw the database's own runs only")
    p.set_defaults(func=_cmd_figures)

    r = sub.add_parser("reference", help="load the bundled public nccl-tests runs into a reference database")
    r.add_argument("--db", required=True, help="the reference database to (re)build")
    r.add_argument("--docs", help="folder for the import documents (default: the database's folder)")
    r.add_argument("--source", help="folder with runs.json and the logs (default: the bundled reference folder)")
    r.add_argument("--manifest", help="write a JSON summary of what was loaded here")
    r.set_defaults(func=_cmd_reference)
