"""``shardscope`` subcommands of the training stage (registered by :mod:`shardscope.cli`)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from shardscope.errors import UserError
from shardscope.fileio import dump_json

if TYPE_CHECKING:
    from shardscope.training.job import TrainJob


def _cmd_memory(args: argparse.Namespace) -> int:
    from shardscope.training.memory_model import assumptions, memory_table
    from shardscope.training.memory_report import format_memory_table
    from shardscope.contracts.models import parse_model_spec

    try:
        per_param = assumptions(args.dtype, not args.no_master_weights, args.param_bytes, args.grad_bytes, args.optimizer_bytes)
        rows = memory_table(parse_model_spec(args.model), args.strategy, args.gpus, args.dtype, per_param=per_param,
                            gpu_memory_gb=args.gpu_memory_gb, deepspeed_estimates=not args.no_deepspeed_estimate)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    print(dump_json(rows) if args.json else format_memory_table(rows), end="")
    return 0


def _train_job(args: argparse.Namespace) -> TrainJob:
    """The job the flags describe, validated before torchrun starts (bad input is a UserError)."""
    from shardscope.training.job import TrainJob
    from shardscope.training.model import parse_model_spec

    try:
        return TrainJob(strategy=args.strategy, model=parse_model_spec(args.model), nproc=args.nproc,
                        micro_batch=args.micro_batch, seq_len=args.seq_len, warmup=args.warmup, steps=args.steps,
                        dtype=args.dtype, memory_budget_bytes=args.memory_budget_bytes, seed=args.seed,
                        repeats=args.repeats)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _cmd_train(args: argparse.Namespace) -> int:
    from shardscope.training.launch import launch

    job = _train_job(args)
    model = args.model if isinstance(job.model, str) else json.dumps(job.model, sort_keys=True)
    worker_args = ["--strategy", args.strategy, "--model", model, "--micro-batch", str(args.micro_batch),
                   "--seq-len", str(args.seq_len), "--warmup", str(args.warmup), "--steps", str(args.steps),
                   "--dtype", args.dtype, "--placement", args.placement, "--seed", str(args.seed),
                   "--repeats", str(args.repeats), "--reduce-dtype", args.reduce_dtype, "--buckets", args.buckets]
    if args.memory_budget_bytes is not None:
        worker_args += ["--memory-budget-bytes", str(args.memory_budget_bytes)]
    if args.job_id:
        worker_args += ["--job-id", args.job_id]
    if args.cpu:
        worker_args.append("--cpu")
    if args.comm_profile:
        worker_args.append("--comm-profile")
    described = {"job_id": args.job_id, "strategy": args.strategy, "model": job.model_name, "placement": args.placement}
    return launch(args.nproc, worker_args, described, args.out, args.log, cpu=args.cpu or not _cuda_available(),
                  nodes=args.nodes)


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands to the ``shardscope`` parser."""
    p = sub.add_parser("memory", help="analytic per-GPU memory (params/grads/optimizer) per strategy")
    p.add_argument("--model", required=True, help="preset (tiny, gpt2-small, llama-1b, mistral-7b) or a JSON object of dimensions")
    p.add_argument("--strategy", default="all", help="a strategy or 'all'")
    p.add_argument("--gpus", type=int, required=True, help="GPUs the model is sharded over")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="sets the default bytes per parameter")
    p.add_argument("--no-master-weights", action="store_true",
                   help="bf16 without a fp32 master copy: optimizer 8 B/param instead of 12 (the seed article's 87 GB)")
    p.add_argument("--param-bytes", type=float, help="override bytes per parameter for the parameters")
    p.add_argument("--grad-bytes", type=float, help="override bytes per parameter for the gradients")
    p.add_argument("--optimizer-bytes", type=float, help="override bytes per parameter for the optimizer state")
    p.add_argument("--gpu-memory-gb", type=float, default=80.0, help="GPU memory in GB (1e9 bytes) for the fits column (default 80)")
    p.add_argument("--no-deepspeed-estimate", action="store_true", help="skip DeepSpeed's own estimator (saves importing it)")
    p.add_argument("--json", action="store_true", help="rows as JSON (bytes, assumptions, fits, DeepSpeed's estimate)")
    p.set_defaults(func=_cmd_memory)

    p = sub.add_parser("train", help="launch one training job under torchrun; failures become outcome rows")
    p.add_argument("--strategy", required=True)
    p.add_argument("--model", required=True, help="preset name or a JSON object of dimensions")
    p.add_argument("--nproc", type=int, required=True, help="ranks on each node (one per GPU)")
    p.add_argument("--nodes", type=int, default=1,
                   help="nodes of this Slurm job to train on, one torchrun agent each (default 1: no Slurm needed)")
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5, help="timed steps per repeat")
    p.add_argument("--repeats", type=int, default=1, help="timed windows of --steps steps (median and 95%% CI stored)")
    p.add_argument("--reduce-dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="gradient-reduction dtype of every strategy (auto: the training dtype)")
    p.add_argument("--buckets", default="default", choices=["default", "equal"],
                   help="default: each framework's bucket sizes; equal: DDP's 25 MiB for DeepSpeed too")
    p.add_argument("--dtype", default="float32", choices=["bfloat16", "float32"])
    p.add_argument("--memory-budget-bytes", type=int)
    p.add_argument("--seed", type=int, default=0, help="seed of the initial weights (the same under every strategy)")
    p.add_argument("--comm-profile", action="store_true",
                   help="profile one extra step with torch.profiler and record the share of time in communication")
    p.add_argument("--placement", default="local")
    p.add_argument("--job-id")
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--out", required=True)
    p.add_argument("--log", required=True)
    p.set_defaults(func=_cmd_train)
