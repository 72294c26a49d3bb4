"""The ``shardscope`` command line: every stage runs without Snakemake from here.

User errors (bad files, bad values) print one sentence on stderr and exit with status 2;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from shardscope.errors import UserError
from shardscope.fileio import atomic_write_json, atomic_write_text, dump_json, read_json, write_output


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


def _cmd_plan(args: argparse.Namespace) -> int:
    import json

    import yaml

    from shardscope.plan.planner import make_plan

    if args.config_json:
        config = json.loads(args.config_json)
    else:
        try:
            with open(args.config, encoding="utf-8") as handle:
                config = yaml.safe_load(handle)
        except OSError as exc:
            raise UserError(f"{args.config}: cannot read the config ({exc.strerror})") from None
    write_output(dump_json(make_plan(read_json(args.topology), config)), args.out)
    return 0


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


def _cmd_memory(args: argparse.Namespace) -> int:
    from shardscope.training.memory_model import memory_table

    rows = memory_table(args.model, args.strategy, args.gpus, args.dtype)
    if args.json:
        print(dump_json(rows), end="")
    else:
        for row in rows:
            print(f"{row['strategy']:>13}  params {row['param_bytes'] / 2**30:8.2f} GiB  grads {row['grad_bytes'] / 2**30:8.2f} GiB  "
                  f"optimizer {row['optim_bytes'] / 2**30:8.2f} GiB  total {row['total_bytes'] / 2**30:8.2f} GiB")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from shardscope.training.launch import launch

    worker_args = ["--strategy", args.strategy, "--model", args.model, "--micro-batch", str(args.micro_batch),
                   "--seq-len", str(args.seq_len), "--warmup", str(args.warmup), "--steps", str(args.steps),
                   "--dtype", args.dtype, "--placement", args.placement]
    if args.memory_budget_bytes:
        worker_args += ["--memory-budget-bytes", str(args.memory_budget_bytes)]
    if args.job_id:
        worker_args += ["--job-id", args.job_id]
    if args.cpu:
        worker_args.append("--cpu")
    job = {"job_id": args.job_id, "strategy": args.strategy, "model": args.model, "placement": args.placement}
    return launch(args.nproc, worker_args, job, args.out, args.log, cpu=args.cpu or not _cuda_available())


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _cmd_collect(args: argparse.Namespace) -> int:
    from shardscope.results.store import collect

    summary = collect(args.db, args.inputs, manifest=args.manifest)
    print(f"{args.db}: loaded {summary['new_runs']} new runs ({summary['skipped_runs']} already present) from {len(args.inputs)} files")
    return 0


def _cmd_figures(args: argparse.Namespace) -> int:
    from shardscope.figures.plots import draw_all

    written = draw_all(args.db, args.out)
    print(f"{len(written)} figure files in {args.out}")
    return 0


def _cmd_paper(args: argparse.Namespace) -> int:
    from shardscope.paper.render import render_report

    render_report(args.db, args.figures, args.source, args.out)
    print(f"report written to {args.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand (the public command-line contract)."""
    parser = argparse.ArgumentParser(prog="shardscope", description="Which data-parallel strategy is fastest within memory on this machine, and why.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    topo = sub.add_parser("topology", help="probe or parse a node's GPU interconnect").add_subparsers(dest="action", required=True)
    p = topo.add_parser("detect", help="probe this machine; JSON to stdout or FILE")
    p.add_argument("--out", help="write topology.json here (raw probe text goes to raw/ beside it)")
    p.set_defaults(func=_cmd_topology_detect)
    p = topo.add_parser("parse", help="parse saved nvidia-smi topo -m / rocm-smi --showtopo output")
    p.add_argument("file")
    p.add_argument("--out")
    p.set_defaults(func=_cmd_topology_parse)

    p = sub.add_parser("plan", help="list the jobs to run from topology.json and a config")
    p.add_argument("--topology", required=True)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="the pipeline's config YAML (as validated by the Snakefile)")
    source.add_argument("--config-json", help="the effective config as a JSON string (what the pipeline passes)")
    p.add_argument("--out")
    p.set_defaults(func=_cmd_plan)

    coll = sub.add_parser("collectives", help="collective benchmark results").add_subparsers(dest="action", required=True)
    p = coll.add_parser("import", help="read an nccl-tests log (any generation, or -J JSON) as rows")
    p.add_argument("file")
    p.add_argument("--out", help="write the rows as a JSON file that `shardscope collect` loads")
    p.add_argument("--json", action="store_true", help="print rows, peak busbw and world size as JSON")
    p.set_defaults(func=_cmd_collectives_import)

    p = sub.add_parser("memory", help="analytic per-GPU memory (params/grads/optimizer) per strategy")
    p.add_argument("--model", required=True, help="preset (tiny, gpt2-small, llama-1b, mistral-7b)")
    p.add_argument("--strategy", default="all", help="a strategy or 'all'")
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_memory)

    p = sub.add_parser("train", help="launch one training job under torchrun; failures become outcome rows")
    p.add_argument("--strategy", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--nproc", type=int, required=True)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--dtype", default="float32", choices=["bfloat16", "float32"])
    p.add_argument("--memory-budget-bytes", type=int)
    p.add_argument("--placement", default="local")
    p.add_argument("--job-id")
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--out", required=True)
    p.add_argument("--log", required=True)
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("collect", help="validate per-job results and load them into DuckDB in one transaction")
    p.add_argument("--db", required=True)
    p.add_argument("--manifest", help="write a JSON summary of what was loaded here")
    p.add_argument("inputs", nargs="+", metavar="INPUT")
    p.set_defaults(func=_cmd_collect)

    p = sub.add_parser("figures", help="regenerate every figure from the database")
    p.add_argument("--db", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(func=_cmd_figures)

    p = sub.add_parser("paper", help="render the report from paper/ with numbers and figures from the database")
    p.add_argument("--db", required=True)
    p.add_argument("--figures", required=True)
    p.add_argument("--source", default="paper/report.md")
    p.add_argument("--out", required=True)
    p.set_defaults(func=_cmd_paper)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``shardscope`` console script."""
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except UserError as exc:
        print(f"shardscope: error: {exc}", file=sys.stderr)
        return 2

