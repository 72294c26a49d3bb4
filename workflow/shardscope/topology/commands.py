"""``shardscope`` subcommands of the topology stage (registered by :mod:`shardscope.cli`).

``detect`` and ``parse`` write ``topology.json`` (validated against its schema first); with
``--out`` the raw probe text (or the parsed file) is kept in ``raw/`` beside it, and
``source.raw_files`` lists those files relative to the folder of ``topology.json``.
``show`` prints a short summary of a topology.json, any parseable probe text, or this machine.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from shardscope.fileio import TOPOLOGY_MAX_INPUT_MIB, add_max_input_flag, atomic_write_bytes, atomic_write_text, dump_json, write_output

RAW_DIR = "raw"


def _validated_with_raw(doc: dict[str, Any], out: str | None, raw_names: list[str]) -> dict[str, Any]:
    """``doc`` with ``source.raw_files`` set when writing to a file, validated before anything is written."""
    from shardscope.topology.document import validate_topology

    if out not in (None, "-"):
        doc["source"]["raw_files"] = sorted(f"{RAW_DIR}/{name}" for name in raw_names)
    return validate_topology(doc, out if out not in (None, "-") else "topology.json on stdout")


def _print_warnings(warnings: list[str], name: str) -> None:
    """Each warning of a topology on stderr, one line each (the document keeps them too)."""
    for warning in warnings:
        print(f"shardscope: warning: {name}: {warning}", file=sys.stderr)


def _cmd_topology_detect(args: argparse.Namespace) -> int:
    from shardscope.topology.detect import detect

    detection = detect()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible and detection.topology.gpus:
        from shardscope.topology.views import visible_devices_warning

        detection.topology.warnings.append(visible_devices_warning(visible))
    _print_warnings(detection.topology.warnings, "this machine")
    doc = _validated_with_raw(detection.topology.to_dict(), args.out, list(detection.raw))
    if args.out not in (None, "-"):
        raw_dir = Path(args.out).parent / RAW_DIR
        for name, text in detection.raw.items():
            atomic_write_text(raw_dir / name, text)
    write_output(dump_json(doc), args.out)
    return 0


def _cmd_topology_parse(args: argparse.Namespace) -> int:
    from shardscope.topology.parse import parse_file

    source = Path(args.file)
    topology = parse_file(source, args.max_input_mib)  # refuses a file over the size limit before reading it
    _print_warnings(topology.warnings, args.file)
    doc = _validated_with_raw(topology.to_dict(), args.out, [source.name])
    if args.out not in (None, "-"):
        atomic_write_bytes(Path(args.out).parent / RAW_DIR / source.name, source.read_bytes())
    write_output(dump_json(doc), args.out)
    return 0


def _cmd_topology_show(args: argparse.Namespace) -> int:
    from shardscope.topology.document import validate_topology
    from shardscope.topology.show import render_text, summarize

    if args.file:
        from shardscope.topology.parse import parse_file

        doc = parse_file(args.file, args.max_input_mib).to_dict()
        name = args.file
    else:
        from shardscope.topology.detect import detect

        doc = detect().topology.to_dict()
        name = "this machine's topology"
    summary = summarize(validate_topology(doc, name))
    write_output(dump_json(summary) if args.format == "json" else render_text(summary), None)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands to the ``shardscope`` parser."""
    topo = sub.add_parser("topology", help="probe or parse a node's GPU interconnect").add_subparsers(dest="action", required=True)
    p = topo.add_parser("detect", help="probe this machine; JSON to stdout or FILE")
    p.add_argument("--out", help="write topology.json here (raw probe text goes to raw/ beside it)")
    p.set_defaults(func=_cmd_topology_detect)
    p = topo.add_parser("parse", help="parse saved nvidia-smi topo -m / rocm-smi --showtopo output")
    p.add_argument("file", help="saved `nvidia-smi topo -m` or `rocm-smi --showtopo` output")
    p.add_argument("--out", help="write topology.json here (a copy of FILE goes to raw/ beside it)")
    add_max_input_flag(p, TOPOLOGY_MAX_INPUT_MIB)
    p.set_defaults(func=_cmd_topology_parse)
    p = topo.add_parser("show", help="summarise a topology: fabric, GPUs, islands, NUMA nodes, nearest NICs")
    p.add_argument("file", nargs="?", help="topology.json or saved probe text (default: probe this machine)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="text for people, json for scripts")
    add_max_input_flag(p, TOPOLOGY_MAX_INPUT_MIB)
    p.set_defaults(func=_cmd_topology_show)
