"""``shardscope fabric …``: emulated fabrics from the command line (registered by :mod:`shardscope.cli`).

``fabric list`` shows the presets, ``fabric check`` says whether this machine can build them,
``fabric collectives`` / ``fabric train`` run one job over a preset, ``fabric cleanup`` removes
namespaces left behind by killed jobs. ``python -m shardscope.emulated …`` is the same group.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from shardscope.errors import UserError
from shardscope.fileio import dump_json, loads_bounded


def _section(args: argparse.Namespace) -> dict[str, Any]:
    """The ``emulated`` config section given with ``--config-json`` (the whole config or the section)."""
    if not args.config_json:
        return {}
    try:
        data = loads_bounded(args.config_json, "--config-json")
    except json.JSONDecodeError as exc:
        raise UserError(f"--config-json is not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise UserError("--config-json must be a JSON object: the config or its emulated section")
    return dict(data.get("emulated", data))


def _job(args: argparse.Namespace) -> Any:
    from shardscope.emulated.launch import EmulatedJob
    from shardscope.emulated.presets import get_preset

    section = _section(args)
    return EmulatedJob(
        get_preset(args.preset, section), args.placement,
        prefix=args.prefix or section.get("prefix") or "ssfab-",
        subnet=args.subnet or section.get("subnet") or "10.213.0.0/24",
        timeout_s=args.timeout_s or section.get("timeout_s") or 600.0,
    )


def _cmd_list(args: argparse.Namespace) -> int:
    from shardscope.emulated.presets import all_presets

    presets = {name: p.to_dict() for name, p in sorted(all_presets(_section(args)).items())}
    if args.json:
        print(dump_json(presets), end="")
        return 0
    for name, p in presets.items():
        links = ", ".join(_link_text(ln) for ln in p["links"])
        print(f"{name}: {p['hosts']} hosts; {links}; placements {', '.join(p['placements'])}")
    return 0


def _link_text(link: dict[str, Any]) -> str:
    rate = "uncapped" if link["rate_mbit"] is None else f"{link['rate_mbit']:g} Mbit/s"
    delay = f" +{link['delay_ms']:g} ms" if link["delay_ms"] else ""
    return f"{link['a']}-{link['b']} {rate}{delay}"


def _cmd_check(args: argparse.Namespace) -> int:
    from shardscope.emulated.netns import support_problem

    problem = support_problem(need_delay=args.delay, prefix=args.prefix)
    print(f"emulated fabrics: {'unavailable: ' + problem if problem else 'available'}")
    return 1 if problem else 0


def _cmd_cleanup(args: argparse.Namespace) -> int:
    from shardscope.emulated.netns import cleanup

    removed = cleanup(args.prefix, include_live=args.all)
    print(f"removed {len(removed)} namespaces" + (": " + " ".join(removed) if removed else ""))
    return 0


def _cmd_collectives(args: argparse.Namespace) -> int:
    from shardscope.contracts.names import OPS
    from shardscope.emulated.launch import run_collective

    if args.op not in OPS:
        raise UserError(f"--op {args.op!r} is not a collective; expected one of {', '.join(OPS)}")
    job = _job(args)
    worker = ["--op", args.op, "-b", str(args.min_bytes), "-e", str(args.max_bytes), "-f", str(args.factor),
              "-w", str(args.warmup), "-n", str(args.iters), "--dtype", args.dtype, "--placement", job.placement_label,
              "--transport", "default", "--job-id", args.job_id or f"emulated-{job.preset.name}-{job.placement}-{args.op}"]
    if args.check:
        worker.append("--check")
    doc = run_collective(job, worker, args.out, args.log)
    peak = max((r["busbw_gbps"] for r in doc["rows"]), default=0.0)
    print(f"{args.op} over {job.fabric_label} ({job.placement}): peak busbw {peak:.4f} GB/s; {args.out}")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from shardscope.emulated.launch import run_training
    from shardscope.contracts.names import STRATEGIES

    if args.strategy not in STRATEGIES:
        raise UserError(f"--strategy {args.strategy!r} is not a strategy; expected one of {', '.join(STRATEGIES)}")
    job = _job(args)
    job_id = args.job_id or f"emulated-{job.preset.name}-{job.placement}-{args.strategy}"
    flags = ["--strategy", args.strategy, "--model", args.model, "--micro-batch", str(args.micro_batch),
             "--seq-len", str(args.seq_len), "--warmup", str(args.warmup), "--steps", str(args.steps),
             "--dtype", args.dtype, "--placement", job.placement_label, "--job-id", job_id]
    if args.memory_budget_bytes:
        flags += ["--memory-budget-bytes", str(args.memory_budget_bytes)]
    with tempfile.TemporaryDirectory(prefix="shardscope-emulated-spec-") as folder:
        spec = _training_spec_file(flags, len(job.hosts), Path(folder))
        doc = run_training(job, ["--spec", str(spec)], {"job_id": job_id, "strategy": args.strategy,
                                                        "model": args.model}, args.out, args.log)
    step = doc.get("summary", {}).get("median_step_time_s")
    print(f"{args.strategy} over {job.fabric_label} ({job.placement}): outcome {doc['outcome']}"
          + (f", median step {step * 1e3:.1f} ms" if step else "") + f"; {args.out}")
    return 0


def _job_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", required=True, help="fabric preset (fast, pcie_like, nvl_groups or one from the config)")
    p.add_argument("--placement", default="all", help="which hosts run ranks (a placement of the preset)")
    p.add_argument("--config-json", help="the pipeline config (or its emulated section) as JSON: user presets, prefix, subnet")
    p.add_argument("--prefix", help="namespace name prefix (default: config emulated.prefix or ssfab-)")
    p.add_argument("--subnet", help="private IPv4 range of the hosts (default: config emulated.subnet or 10.213.0.0/24)")
    p.add_argument("--timeout-s", type=float, help="stop the job after this many seconds (default 600)")
    p.add_argument("--job-id", help="job id stored with the result (default: derived from the flags)")
    p.add_argument("--out", required=True, help="result JSON")
    p.add_argument("--log", required=True, help="log of every rank")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``fabric`` and its subcommands to the ``shardscope`` parser."""
    fabric = sub.add_parser("fabric", help="emulated fabrics: measure strategies over capped links in network namespaces (root)")
    fsub = fabric.add_subparsers(dest="fabric_command", required=True, metavar="SUBCOMMAND")

    p = fsub.add_parser("list", help="the presets and their links")
    p.add_argument("--config-json", help="the pipeline config (or its emulated section) as JSON")
    p.add_argument("--json", action="store_true", help="print the presets as JSON")
    p.set_defaults(func=_cmd_list)

    p = fsub.add_parser("check", help="can this machine build emulated fabrics? (exit status 1 if not)")
    p.add_argument("--delay", action="store_true", help="also require link delays (the netem qdisc)")
    p.add_argument("--prefix", default="ssfab-", help="namespace prefix to test with (default ssfab-)")
    p.set_defaults(func=_cmd_check)

    p = fsub.add_parser("cleanup", help="remove namespaces (and their processes and links) left by killed jobs")
    p.add_argument("--prefix", default="ssfab-", help="namespace prefix (default ssfab-)")
    p.add_argument("--all", action="store_true", help="also those of jobs still running")
    p.set_defaults(func=_cmd_cleanup)

    p = fsub.add_parser("collectives", help="time one collective over an emulated fabric")
    _job_flags(p)
    p.add_argument("--op", required=True, help="the collective, e.g. all_reduce, all_gather, reduce_scatter")
    p.add_argument("--min-bytes", "-b", type=int, default=65536, help="smallest message in bytes")
    p.add_argument("--max-bytes", "-e", type=int, default=4 * 1024 * 1024, help="largest message in bytes")
    p.add_argument("--factor", "-f", type=int, default=4, help="size multiplier between messages")
    p.add_argument("--warmup", "-w", type=int, default=1, help="untimed iterations per size")
    p.add_argument("--iters", "-n", type=int, default=3, help="timed iterations per size")
    p.add_argument("--dtype", default="float32", help="element dtype (default float32)")
    p.add_argument("--check", action="store_true", help="verify every result against the expected values")
    p.set_defaults(func=_cmd_collectives)

    p = fsub.add_parser("train", help="one training job over an emulated fabric; failures become outcome rows")
    _job_flags(p)
    p.add_argument("--strategy", required=True, help="ddp, fsdp, fsdp_grad_op or zero0..zero3")
    p.add_argument("--model", default="tiny", help="model preset (default tiny)")
    p.add_argument("--micro-batch", type=int, default=2, help="sequences per rank and step")
    p.add_argument("--seq-len", type=int, default=64, help="tokens per sequence")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps")
    p.add_argument("--steps", type=int, default=5, help="timed steps")
    p.add_argument("--dtype", default="float32", choices=["bfloat16", "float32"], help="parameter dtype")
    p.add_argument("--memory-budget-bytes", type=int, help="outcome over_budget when a rank's peak exceeds this")
    p.set_defaults(func=_cmd_train)


def main(argv: list[str] | None = None) -> int:
    """``python -m shardscope.emulated ARGS`` = ``shardscope fabric ARGS`` (before the CLI lists the stage)."""
    from shardscope.cli import Parser

    parser = Parser(prog="shardscope")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["fabric", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.func(args))
    except UserError as exc:
        print(f"shardscope: error: {exc}", file=sys.stderr)
        return 2


def _training_spec_file(flags: list[str], ranks: int, folder: Path) -> Path:
    """The spec the worker reads (``--spec``): the ``TrainingJob`` ``shardscope train`` builds from the same
    ``flags``, one rank on each of the fabric's ``ranks`` hosts; its bounds are checked here, before any fabric."""
    from shardscope.cli import build_parser
    from shardscope.training.commands import training_spec
    from shardscope.training.launch import write_spec

    argv = ["train", *flags, "--nproc", "1", "--nodes", str(ranks), "--out", "unused", "--log", "unused"]
    return write_spec(training_spec(build_parser().parse_args(argv)), folder)
