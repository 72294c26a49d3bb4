"""``shardscope`` subcommands of the collectives stage (registered by :mod:`shardscope.cli`)."""

from __future__ import annotations

import argparse
import sys

from shardscope.fileio import add_max_input_flag, atomic_write_text, dump_json, write_output


def _cmd_collectives_import(args: argparse.Namespace) -> int:
    """Import one nccl-tests log: a one-line summary, the JSON document (``--json``) and/or a file (``--out``).

    Every note of the reader (rows left out, where the rank count came from) goes to stderr,
    one line each, so nothing is changed silently.
    """
    from shardscope.collectives.nccl_tests import read_nccl_tests, to_rows_for_db

    result = read_nccl_tests(args.file, world_size=args.world_size, max_input_mib=args.max_input_mib, op=args.op)
    rows = to_rows_for_db(result, str(args.file))
    doc = _reference_document(args.reference, args.file, result) if args.reference else {
        "schema": "shardscope.collectives-import/1",
        "kind": "collectives_import",
        "source_file": str(args.file),
        "op": result.op,
        "world_size": result.world_size,
        "world_size_source": result.world_size_source,
        "generation": result.generation,
        "version": result.version,
        "devices": result.devices,
        "peak_busbw_gbps": result.peak_busbw_gbps(),
        "reported_avg_busbw_gbps": result.reported_avg_busbw_gbps,
        "notes": list(result.notes),
        "rows": rows,
    }
    rows = doc["rows"]
    if args.placement:
        doc["placement"] = args.placement
    if args.transport:
        doc["transport"] = args.transport
    text = dump_json(doc)  # refuses NaN/Infinity before anything is written
    for note in result.notes:
        print(f"shardscope: note: {note}", file=sys.stderr)
    if args.out:
        atomic_write_text(args.out, text)
    if args.json:
        print(text, end="")
        return 0
    ranks = f"{result.world_size} ranks" if result.world_size is not None else "rank count unknown"
    target = f" -> {args.out}" if args.out else " (--json prints the rows, --out FILE writes them)"
    print(f"{args.file}: {result.op}, {ranks} (from {result.world_size_source.replace('_', ' ')}), {len(rows)} rows, "
          f"peak busbw {doc['peak_busbw_gbps']:.2f} GB/s{target}")
    return 0


def _reference_document(manifest: str, log: str, result: object) -> dict:
    """The import document of a bundled public log, labelled as the reference run ``manifest`` lists for it."""
    from shardscope.reference.documents import reference_document, run_for_log

    return reference_document(run_for_log(manifest, log), result)  # type: ignore[arg-type]


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
    p.add_argument("--world-size", type=int, metavar="N",
                   help="rank count of the run, used when the log does not tell it (no device lines, command line or usable busbw/algbw)")
    p.add_argument("--op", help="the collective (all_reduce, all_gather, ...), when neither the log nor its file name names it")
    p.add_argument("--reference", metavar="RUNS_JSON",
                   help="label the log as the public reference run this runs.json lists for its file name (source reference)")
    add_max_input_flag(p)
    p.set_defaults(func=_cmd_collectives_import)
    p = coll.add_parser("report", help="print our collective job results as nccl-tests tables")
    p.add_argument("files", nargs="+", metavar="FILE", help="collective job JSON files (results/collectives/*.json)")
    p.add_argument("--out", help="write the tables to this file instead of stdout")
    p.set_defaults(func=_cmd_collectives_report)
