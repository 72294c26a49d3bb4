"""``shardscope`` subcommands of the collectives stage (registered by :mod:`shardscope.cli`)."""

from __future__ import annotations

import argparse
from shardscope.fileio import atomic_write_json, dump_json


def _cmd_collectives_import(args: argparse.Namespace) -> int:
    from shardscope.collectives.nccl_tests import read_nccl_tests, to_rows_for_db

    result = read_nccl_tests(args.file)
    doc = {
        "schema": "shardscope.collectives-import/1",
        "kind": "collectives_import",
        "source_file": str(args.file),
        "op": result.op,
        "world_size": result.world_size,
        "generation": result.generation,
        "version": result.version,
        "devices": result.devices,
        "peak_busbw_gbps": result.peak_busbw_gbps(),
        "reported_avg_busbw_gbps": result.reported_avg_busbw_gbps,
        "rows": to_rows_for_db(result, str(args.file)),
    }
    if args.out:
        atomic_write_json(args.out, doc)
    if args.json or not args.out:
        print(dump_json(doc), end="")
    else:
        print(f"{args.file}: {result.op}, {result.world_size} ranks, {len(doc['rows'])} rows, "
              f"peak busbw {doc['peak_busbw_gbps']:.2f} GB/s -> {args.out}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands to the ``shardscope`` parser."""
    coll = sub.add_parser("collectives", help="collective benchmark results").add_subparsers(dest="action", required=True)
    p = coll.add_parser("import", help="read an nccl-tests log (any generation, or -J JSON) as rows")
    p.add_argument("file")
    p.add_argument("--out", help="write the rows as a JSON file that `shardscope collect` loads")
    p.add_argument("--json", action="store_true", help="print rows, peak busbw and world size as JSON")
    p.set_defaults(func=_cmd_collectives_import)
