"""``shardscope reference``: the reference stage in one command, for use without Snakemake."""

from __future__ import annotations

import argparse
from pathlib import Path


def _cmd_reference(args: argparse.Namespace) -> int:
    from shardscope.results.reference_manifest import REFERENCE_DIR
    from shardscope.reference.build import build_reference_db

    docs = args.docs or str(default_docs(args.db))
    summary = build_reference_db(args.db, docs, folder=args.source or REFERENCE_DIR, manifest=args.manifest)
    print(f"{args.db}: {summary['reference_runs']} reference runs (public nccl-tests results, not measured here) and their"
          f" verdicts; documents in {docs}")
    return 0


def default_docs(db: str) -> Path:
    """The folder of the import documents when --docs is not given: ``<db>.documents/`` beside the database, so that
    its two dozen JSON files never land loose beside it (issue 32); the pipeline passes results/reference/."""
    path = Path(db)
    return path.with_name(f"{path.stem}.documents")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``reference`` to the ``shardscope`` parser."""
    r = sub.add_parser("reference", help="load the bundled public nccl-tests runs into a reference database")
    r.add_argument("--db", required=True, help="the reference database to (re)build")
    r.add_argument("--docs", help="folder for the import documents (default: <db name>.documents/ beside the database)")
    r.add_argument("--source", help="folder with runs.json and the logs (default: the bundled reference folder)")
    r.add_argument("--manifest", help="write a JSON summary of what was loaded here")
    r.set_defaults(func=_cmd_reference)
