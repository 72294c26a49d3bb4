"""``shardscope`` subcommands of the training stage (registered by :mod:`shardscope.cli`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from shardscope.contracts.names import BUCKET_POLICIES, REDUCE_DTYPES
from shardscope.errors import UserError

if TYPE_CHECKING:
    from shardscope.contracts.jobs import TrainingJob


#: The ``shardscope train`` flag of each spec field whose flag is not simply ``--field-name``.
_FLAG_OF = {"model_spec": "--model", "world_size": "--nproc", "nproc_per_node": "--nproc", "wall_s": "--wall-s",
            "timeout_s": "--timeout-s"}


def training_spec(args: argparse.Namespace) -> TrainingJob:
    """The job spec the flags describe (the same :class:`TrainingJob` a plan lists), checked where it is built:
    bad input is a UserError naming the flag, before torchrun starts."""
    from shardscope.contracts.jobs import SpecError, TrainingJob
    from shardscope.contracts.models import parse_model_spec

    try:
        model = parse_model_spec(args.model)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    fields = {"strategy": args.strategy, "model_spec": model, "world_size": args.nproc * args.nodes,
              "nodes": args.nodes, "nproc_per_node": args.nproc, "placement": args.placement,
              "micro_batch": args.micro_batch, "seq_len": args.seq_len, "warmup": args.warmup, "steps": args.steps,
              "dtype": args.dtype, "memory_budget_bytes": args.memory_budget_bytes, "seed": args.seed,
              "repeats": args.repeats, "activation_checkpointing": args.activation_checkpointing,
              "optimizer": args.optimizer, "grad_accum": args.grad_accum, "comm_profile": args.comm_profile,
              "reduce_dtype": args.reduce_dtype, "buckets": args.buckets, "shard_size": args.shard_size,
              "timeout_s": args.timeout_s, "wall_s": args.wall_s}
    try:
        for name in ("world_size", "nodes", "nproc_per_node"):  # the model's name and the job id need them valid
            if isinstance(fields[name], bool) or fields[name] < 1:
                raise SpecError(name, f"is {fields[name]}; expected at least 1")
        named = TrainingJob(job_id=args.job_id or "unnamed", model="unnamed", **fields)
        model_name = named.resolved_model()[0]
        job_id = args.job_id or f"{args.strategy}-{model_name}-ws{fields['world_size']}-{args.placement}"
        return TrainingJob(job_id=job_id, model=model_name, **fields)
    except SpecError as exc:
        flag = _FLAG_OF.get(exc.field_name, "--" + exc.field_name.replace("_", "-"))
        raise UserError(f"{flag} {exc.problem}") from None


def _cmd_train(args: argparse.Namespace) -> int:
    from shardscope.training.launch import cuda_available, launch

    job = training_spec(args)
    return launch(job, args.out, args.log, cpu=args.cpu or not cuda_available())


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands to the ``shardscope`` parser."""
    p = sub.add_parser("train", help="launch one training job under torchrun; failures become outcome rows")
    p.add_argument("--strategy", required=True, help="ddp, fsdp, fsdp_grad_op, zero0..zero3, hsdp or zero3_hpz")
    p.add_argument("--model", required=True, help="preset name or a JSON object of dimensions")
    p.add_argument("--nproc", type=int, required=True, help="ranks on each node (one per GPU)")
    p.add_argument("--nodes", type=int, default=1,
                   help="nodes of this Slurm job to train on, one torchrun agent each (default 1: no Slurm needed)")
    p.add_argument("--micro-batch", type=int, default=2, help="sequences per rank and step (default 2)")
    p.add_argument("--grad-accum", type=int, default=1,
                   help="micro-batches per optimizer step, gradients accumulated (default 1)")
    p.add_argument("--seq-len", type=int, default=64, help="tokens per sequence (default 64)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps before the timed ones (default 2)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per repeat (default 5)")
    p.add_argument("--repeats", type=int, default=1, help="timed windows of --steps steps (median and 95%% CI stored)")
    p.add_argument("--reduce-dtype", default="auto", choices=REDUCE_DTYPES,
                   help="gradient-reduction dtype of every strategy (auto: the training dtype)")
    p.add_argument("--buckets", default="default", choices=BUCKET_POLICIES,
                   help="default: each framework's bucket sizes; equal: DDP's 25 MiB for DeepSpeed too")
    p.add_argument("--dtype", default="float32", choices=["bfloat16", "float32"], help="parameter dtype (default float32)")
    p.add_argument("--memory-budget-bytes", type=int, help="outcome over_budget when a rank's peak exceeds this")
    p.add_argument("--seed", type=int, default=0, help="seed of the initial weights (the same under every strategy)")
    p.add_argument("--comm-profile", action="store_true",
                   help="profile one extra step with torch.profiler and record the share of time in communication")
    p.add_argument("--activation-checkpointing", default="none",
                   help="none, full (every block recomputed in backward), or torchtitan's selective_op or selective_layer")
    p.add_argument("--optimizer", default="adamw",
                   help="adamw, or adamw_bf16_states (bf16 master and moments: zero1-3 with --dtype bfloat16)")
    p.add_argument("--shard-size", type=int, help="hsdp: ranks of one shard group; zero3_hpz: ranks of one secondary "
                                                  "partition (a divisor of the world size; default: the ranks of one node)")
    p.add_argument("--timeout-s", type=float, default=300.0,
                   help="seconds one collective may wait on a peer before the job fails (default 300)")
    p.add_argument("--wall-s", type=float, default=3600.0,
                   help="wall-clock limit of the job; past it every rank is ended and the outcome is failed (default 3600)")
    p.add_argument("--placement", default="local", help="placement label stored with the result (default local)")
    p.add_argument("--job-id", help="job id stored with the result")
    p.add_argument("--cpu", action="store_true", help="run on CPU processes with gloo even where GPUs exist")
    p.add_argument("--out", required=True, help="result JSON")
    p.add_argument("--log", required=True, help="log of torchrun and every rank")
    p.set_defaults(func=_cmd_train)
