"""``shardscope doctor``, ``shardscope verdict`` and ``shardscope nccl-log`` (registered by :mod:`shardscope.cli`).

``doctor --out FILE`` and ``verdict --out FILE`` write their JSON document atomically, for the
pipeline's ``doctor`` and ``verdicts`` rules and ``shardscope collect``.
"""

from __future__ import annotations

import argparse
from typing import Any
import sys

from shardscope.fileio import add_max_input_flag, atomic_write_json, dump_json


def _cmd_doctor(args: argparse.Namespace) -> int:
    from shardscope.diagnose.doctor import format_report, run_doctor

    topology = None
    if args.topology:
        from shardscope.costmodel.commands import load_topology

        topology, _ = load_topology(args.topology)
    doc = run_doctor(topology, peer_check=not args.no_peer_check)
    if args.out:
        atomic_write_json(args.out, doc)
    print(dump_json(doc) if args.json else format_report(doc), end="")
    return 0


def _cmd_verdict(args: argparse.Namespace) -> int:
    from shardscope.diagnose.evaluate import evaluate, format_verdicts

    from shardscope.diagnose import inputs

    inputs.max_input_mib = args.max_input_mib
    topology, name = None, None
    if args.topology:
        from shardscope.costmodel.commands import load_topology

        topology, name = load_topology(args.topology)
    doc = evaluate(args.files, topology, name, gpu=args.gpu, nic_gbps=args.nic_gbps, transport=args.transport)
    for sweep in doc["sweeps"]:
        for note in sweep.get("input_notes") or []:
            print(f"shardscope: note: {note}", file=sys.stderr)
    if topology is not None:
        from shardscope.topology.identity import topology_hash

        # the key of the topology in the results database, so stored verdicts join their machine
        doc["topology_hash"] = topology_hash(topology)
    if args.out:
        atomic_write_json(args.out, doc)
    print(dump_json(doc) if args.json else format_verdicts(doc), end="")
    return 0


def _cmd_nccl_log(args: argparse.Namespace) -> int:
    from shardscope.diagnose.nccl_log import summarize_files, transport_flags

    summary = summarize_files(args.files, args.max_input_mib)
    topology = None
    if args.topology:
        from shardscope.costmodel.commands import load_topology

        topology, _ = load_topology(args.topology)
    doc = {"schema": "shardscope.nccl-log/1", "kind": "nccl_log", "files": list(args.files), **summary.to_dict(),
           "flags": transport_flags(summary, args.transport, topology)}
    if args.json:
        print(dump_json(doc), end="")
        return 0
    print(nccl_log_table(summary, doc["flags"]), end="")
    return 0


def _logged(value: Any) -> str:
    """A summary value for people: ``not logged`` for None or empty, yes/no, ``k v, k v`` for counts."""
    if value is None or value == {} or value == []:
        return "not logged"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return str(value)


def nccl_log_table(summary: Any, flags: list[str]) -> str:
    """What ``nccl-log`` prints without --json: one row per thing NCCL may log (``not logged`` where it did not),
    then each flag (issue 32: it printed Python dicts and ``None``)."""
    rows = [("NCCL version", summary.version), ("network", summary.network),
            ("transports (connections)", summary.transports), ("channels", summary.channels),
            ("NVLS available", summary.nvls_available), ("NVLS used", summary.nvls_used if summary.nvls_available
                                                          is not None or summary.nvls_used else None),
            ("GPUDirect RDMA on network connections", summary.gdr_rdma), ("algorithms (calls)", summary.algorithms),
            ("protocols (calls)", summary.protocols), ("NCCL variables NCCL reported", summary.env)]
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {_logged(value)}" for name, value in rows]
    lines += [f"FLAG: {flag}" for flag in flags]
    return "\n".join(lines) + "\n"


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``doctor``, ``verdict`` and ``nccl-log`` to the ``shardscope`` parser."""
    p = sub.add_parser("doctor", help="check this node (ACS, IOMMU, PCIe links, peer access, NCCL variables, NUMA, VM)")
    p.add_argument("--json", action="store_true", help="print the shardscope.doctor/1 document")
    p.add_argument("--topology", metavar="FILE|auto|preset:NAME", help="topology to check against (default: probe this machine)")
    p.add_argument("--no-peer-check", action="store_true", help="skip the per-pair collective correctness check")
    p.add_argument("--out", metavar="FILE", help="also write the shardscope.doctor/1 document to FILE (for shardscope collect)")
    p.set_defaults(func=_cmd_doctor)

    p = sub.add_parser("verdict", help="is this bandwidth normal? expected busbw, summary and verdict per job")
    p.add_argument("files", nargs="+", metavar="FILE", help="collectives result JSON or nccl-tests logs (repeats are grouped)")
    p.add_argument("--topology", metavar="FILE|auto|preset:NAME",
                   help="saved nvidia-smi topo -m / topology.json, 'auto' to probe, or preset:NAME")
    p.add_argument("--gpu", metavar="NAME", help="GPU model when neither the topology nor the files name it")
    p.add_argument("--nic-gbps", type=float, help="NIC line rate in Gb/s for multi-node runs")
    p.add_argument("--transport", choices=("default", "pcie"), help="transport label of nccl-tests logs")
    p.add_argument("--json", action="store_true", help="print the shardscope.verdicts/1 document")
    p.add_argument("--out", metavar="FILE", help="also write the shardscope.verdicts/1 document to FILE (for shardscope collect)")
    add_max_input_flag(p)
    p.set_defaults(func=_cmd_verdict)

    p = sub.add_parser("nccl-log", help="what NCCL did: transports, channels, NVLS, variables, algorithms")
    p.add_argument("files", nargs="+", metavar="FILE", help="NCCL_DEBUG=INFO log file(s), one per rank or interleaved")
    p.add_argument("--transport", choices=("default", "pcie"), default="default",
                   help="the job's transport label, to flag a PCIe-forced job that used NVLink")
    p.add_argument("--topology", metavar="FILE|auto|preset:NAME", help="topology, to tell P2P over NVLink from PCIe")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_max_input_flag(p)
    p.set_defaults(func=_cmd_nccl_log)
