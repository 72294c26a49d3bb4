"""``shardscope`` subcommands of the training stage (registered by :mod:`shardscope.cli`)."""

from __future__ import annotations

import argparse
from shardscope.fileio import dump_json


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


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands to the ``shardscope`` parser."""
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
