"""``shardscope`` subcommands of the collectives stage (registered by :mod:`shardscope.cli`)."""

from __future__ import annotations

import argparse

from shardscope.fileio import atomic_write_json, dump_json, write_output


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
    if args.placement:
        doc["placement"] = args.placement
    if args.transport:
        doc["transport"] = args.transport
    if args.out:
        atomic_write_json(args.out, doc)
    if args.json:
        print(dump_json(doc), end="")
    else:
        print(f"{args.file}: {result.op}, {result.world_size} ranks, {len(doc['rows'])} rows, "
              f"peak busbw {doc['peak_busbw_gbps']:.2f} GB/s" + (f" -> {args.out}" if args.out else " (--json for the rows)"))
    return 0


def _cmd_collectives_report(args: argparse.Namespace) -> int:
    from shardscope.collectives.report import report

    write_output(report(args.files), args.out)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands to the ``shardscope`` parser."""
    coll = sub.add_parser("collectives", help="collective benchmark results").add_subparsers(dest="action", required=True)
    p = coll.add_parser("import", help="read an nccl-tests log (any generation, or -J JSON) as rows")
    p.add_argument("file", help="an nccl-tests log (stdout of *_perf) or its -J JSON output")
    p.add_argument("--out", help="write the rows as a JSON file that `shardscope collect` loads")
    p.add_argument("--json", action="store_true", help="print rows, peak busbw and world size as JSON")
    p.add_argument("--placement", help="label of the GPU placement the log was measured on (e.g. from the plan)")
    p.add_argument("--transport", help="label of the transport the log was measured with (default, pcie)")
    p.set_defaults(func=_cmd_collectives_import)
    p = coll.add_parser("report", help="print our collective job results as nccl-tests tables")
    p.add_argument("files", nargs="+", metavar="FILE", help="collective job JSON files (results/collectives/*.json)")
    p.add_argument("--out", help="write the tables to this file instead of stdout")
    p.set_defaults(func=_cmd_collectives_report)
