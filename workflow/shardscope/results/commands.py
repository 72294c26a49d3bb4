"""``shardscope`` subcommands of the results stage (registered by :mod:`shardscope.cli`).

``collect`` loads per-job results and topology files; ``db merge``, ``db export`` and
``db schema`` combine, export and describe the database.
"""

from __future__ import annotations

import argparse
import json


def _cmd_collect(args: argparse.Namespace) -> int:
    from shardscope.results.store import collect

    summary = collect(args.db, args.inputs, manifest=args.manifest)
    print(f"{args.db}: loaded {summary['new_runs']} new runs ({summary['skipped_runs']} already present) and "
          f"{summary['new_topologies']} new topologies ({summary['skipped_topologies']} already present) "
          f"from {len(args.inputs)} files")
    return 0


def _cmd_db_merge(args: argparse.Namespace) -> int:
    from shardscope.results.merge import merge

    summary = merge(args.out, args.inputs)
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        print(f"{args.out}: merged {summary['new_runs']} new runs ({summary['skipped_runs']} already present) and "
              f"{summary['new_topologies']} new topologies ({summary['skipped_topologies']} already present) "
              f"from {len(args.inputs)} databases")
    return 0


def _cmd_db_export(args: argparse.Namespace) -> int:
    from shardscope.results.export import export_database

    counts = export_database(args.db, args.out, args.format, force=args.force)
    if args.json:
        print(json.dumps(counts, indent=2, sort_keys=True))
    elif args.format == "jsonl":
        print(f"{args.out}: wrote training_steps.jsonl ({counts['training_steps']} steps)")
    else:
        print(f"{args.out}: wrote {len(counts)} {args.format} files ({sum(counts.values())} rows) and schema.sql")
    return 0


def _cmd_db_schema(args: argparse.Namespace) -> int:
    from shardscope.results.ddl import dictionary_text, schema_text

    print(schema_text() if args.sql else dictionary_text(), end="")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands to the ``shardscope`` parser."""
    p = sub.add_parser("collect", help="validate per-job results and topology files and load them into DuckDB in one transaction")
    p.add_argument("--db", required=True, help="the DuckDB file to load into (created if missing)")
    p.add_argument("--manifest", help="write a JSON summary of what was loaded here")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="per-job result JSON files and topology.json files")
    p.set_defaults(func=_cmd_collect)

    db = sub.add_parser("db", help="merge, export or describe results databases").add_subparsers(dest="action", required=True)
    p = db.add_parser("merge", help="combine databases from several machines into OUT, keeping each run's provenance")
    p.add_argument("out", metavar="OUT.duckdb", help="the combined database (created if missing)")
    p.add_argument("inputs", nargs="+", metavar="IN.duckdb", help="databases to merge into OUT")
    p.add_argument("--json", action="store_true", help="print counts of new and already present runs as JSON")
    p.set_defaults(func=_cmd_db_merge)
    p = db.add_parser("export", help="write every table and view as Parquet (or CSV) files with schema.sql, "
                                     "or each training run's per-step metrics as JSONL for experiment trackers")
    p.add_argument("--db", required=True, help="the database to export")
    p.add_argument("--out", required=True, metavar="DIR", help="a new folder for the files (an existing one is refused)")
    p.add_argument("--format", default="parquet", choices=["parquet", "csv", "jsonl"],
                   help="parquet (units and meanings in each field's metadata), csv, or jsonl (training_steps.jsonl: "
                        "loss, step time, tokens/s, MFU and memory per step); default parquet")
    p.add_argument("--force", action="store_true", help="replace DIR whole if it exists")
    p.add_argument("--json", action="store_true", help="print rows per file as JSON")
    p.set_defaults(func=_cmd_db_export)
    p = db.add_parser("schema", help="print the data dictionary: table, column, type, unit and meaning of every column")
    p.add_argument("--sql", action="store_true", help="print the DDL instead (tables, views and their comments)")
    p.set_defaults(func=_cmd_db_schema)
