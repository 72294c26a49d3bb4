"""``shardscope`` subcommands of the topology stage (registered by :mod:`shardscope.cli`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from shardscope.fileio import atomic_write_text, dump_json, write_output


def _cmd_topology_detect(args: argparse.Namespace) -> int:
    from shardscope.topology.detect import detect

    detection = detect()
    doc = detection.topology.to_dict()
    if args.out:
        raw_dir = Path(args.out).parent / "raw"
        for name, text in detection.raw.items():
            atomic_write_text(raw_dir / name, text)
        doc["source"]["raw_files"] = sorted(str(raw_dir / name) for name in detection.raw)
    write_output(dump_json(doc), args.out)
    return 0


def _cmd_topology_parse(args: argparse.Namespace) -> int:
    from shardscope.topology.parse import parse_file

    write_output(dump_json(parse_file(args.file).to_dict()), args.out)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands to the ``shardscope`` parser."""
    topo = sub.add_parser("topology", help="probe or parse a node's GPU interconnect").add_subparsers(dest="action", required=True)
    p = topo.add_parser("detect", help="probe this machine; JSON to stdout or FILE")
    p.add_argument("--out", help="write topology.json here (raw probe text goes to raw/ beside it)")
    p.set_defaults(func=_cmd_topology_detect)
    p = topo.add_parser("parse", help="parse saved nvidia-smi topo -m / rocm-smi --showtopo output")
    p.add_argument("file")
    p.add_argument("--out")
    p.set_defaults(func=_cmd_topology_parse)
