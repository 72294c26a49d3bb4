"""``shardscope`` subcommands of the training stage (registered by :mod:`shardscope.cli`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from shardscope.cli import gpu_count
from shardscope.contracts.names import BUCKET_POLICIES, GROUPED_STRATEGIES, REDUCE_DTYPES, STRATEGIES
from shardscope.errors import UserError
from shardscope.fileio import dump_json

if TYPE_CHECKING:
    from shardscope.contracts.jobs import TrainingJob


def _cmd_memory(args: argparse.Namespace) -> int:
    from shardscope.contracts.models import parse_model_spec
    from shardscope.costmodel.memory_model import assumptions, memory_table
    from shardscope.costmodel.memory_report import format_memory_table, format_peak_table

    try:
        optim_bytes = args.optimizer_bytes if args.optimizer_bytes is not None else _optimizer_bytes(args)
        per_param = assumptions(args.dtype, not args.no_master_weights, args.param_bytes, args.grad_bytes, optim_bytes)
        rows = memory_table(parse_model_spec(args.model), args.strategy, args.gpus, args.dtype, per_param=per_param,
                            gpu_memory_gb=args.gpu_memory_gb, deepspeed_estimates=not args.no_deepspeed_estimate,
                            shard_group=_shard_group(args))
    except ValueError as exc:
        raise UserError(str(exc)) from None
    try:
        _add_whole_peak(rows, args)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    print(dump_json(rows) if args.json else format_memory_table(rows) + format_peak_table(rows), end="")
    return 0


def _shard_group(args: argparse.Namespace) -> int | None:
    """``--shard-group``: HSDP's shard-group size or hpZ's partition size, a divisor of ``--gpus`` (None: all of them)."""
    if args.shard_group is None:
        return None
    group = _positive_int("--shard-group", args.shard_group)
    if args.gpus % group:
        raise UserError(f"--shard-group must divide --gpus {args.gpus}, got {group}")
    return group


def _choice(flag: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise UserError(f"{flag} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _positive_int(flag: str, value: str, most: int | None = None) -> int:
    bound = f"between 1 and the model's maximum sequence length {most}" if most else "a positive integer"
    try:
        number = int(value)
    except ValueError:
        raise UserError(f"{flag} must be {bound}, got {value!r}") from None
    if number < 1 or (most is not None and number > most):
        raise UserError(f"{flag} must be {bound}, got {number}")
    return number


def _optimizer_bytes(args: argparse.Namespace) -> float | None:
    """Optimizer bytes per parameter implied by ``--optimizer``/``--offload-optimizer``; None keeps the dtype's default."""
    from shardscope.costmodel.memory_peak import OFFLOAD, OPTIMIZERS, OptimizerAssumption

    optimizer = OptimizerAssumption(_choice("--optimizer", args.optimizer, OPTIMIZERS),
                                    _choice("--offload-optimizer", args.offload_optimizer, OFFLOAD))
    if optimizer.offload == "cpu":
        return 0.0
    if optimizer.name == "adamw":
        return None
    master = optimizer.master_bytes if args.dtype == "bfloat16" and not args.no_master_weights else 0.0
    return master + optimizer.moment_bytes


def _add_whole_peak(rows: list[dict], args: argparse.Namespace) -> None:
    """Each row gains ``peak`` (every modeled term) and ``largest_micro_batch`` that fits the GPU."""
    from shardscope.contracts.models import parse_model_spec, resolve_model
    from shardscope.costmodel.memory_peak import ATTENTION_KERNELS, CHECKPOINTING, StepShape, largest_micro_batch, predict_peak

    _, cfg = resolve_model(parse_model_spec(args.model))
    if args.seq_len is None:
        seq = min(cfg.max_seq_len, 4096)
    else:
        seq = _positive_int("--seq-len", args.seq_len, cfg.max_seq_len)
    micro = _positive_int("--micro-batch", args.micro_batch)
    if not 0 <= args.overhead_fraction < 1:
        raise UserError(f"--overhead-fraction must be at least 0 and below 1, got {args.overhead_fraction:g}")
    shape = StepShape(micro_batch=micro, seq_len=seq, dtype=args.dtype,
                      attention=_choice("--attention", args.attention, ATTENTION_KERNELS),
                      checkpointing=_choice("--activation-checkpointing", args.activation_checkpointing, CHECKPOINTING))
    offloaded = args.offload_optimizer == "cpu"
    for row in rows:
        held = {key: row[key] for key in ("param_bytes", "grad_bytes", "optim_bytes")}
        kwargs = {"held": held, "overhead_fraction": args.overhead_fraction, "device": "gpu"}
        if offloaded:
            from shardscope.costmodel.memory_peak import OptimizerAssumption

            kwargs["optimizer"] = OptimizerAssumption(offload="cpu")
        if row["strategy"] in GROUPED_STRATEGIES:
            kwargs["shard_group"] = row["shard_group"]
        peak = predict_peak(row["strategy"], cfg, args.gpus, shape, **kwargs)
        row["peak"] = peak.to_dict()
        row["peak_fits"] = peak.peak_bytes <= row["gpu_memory_bytes"]
        row["largest_micro_batch"] = largest_micro_batch(row["strategy"], cfg, args.gpus, row["gpu_memory_bytes"], shape, **kwargs)


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
    p = sub.add_parser("memory", help="analytic per-GPU memory per strategy: model states, activations, buffers, the whole peak")
    p.add_argument("--model", required=True, help="preset (tiny, gpt2-small, llama-1b, mistral-7b) or a JSON object of dimensions")
    p.add_argument("--strategy", default="all", help=f"one of {', '.join(STRATEGIES)}, or 'all' (the default)")
    p.add_argument("--gpus", type=gpu_count, required=True, help="GPUs the model is sharded over")
    p.add_argument("--shard-group", help="hsdp: GPUs of one shard group; zero3_hpz: GPUs of one secondary parameter "
                                         "partition; a divisor of --gpus (default: all of them)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="sets the default bytes per parameter")
    p.add_argument("--no-master-weights", action="store_true",
                   help="bf16 without a fp32 master copy: optimizer 8 B/param instead of 12 (Mistral-7B's model states unsharded, as under DDP: 87 GB)")
    p.add_argument("--param-bytes", type=float, help="override bytes per parameter for the parameters")
    p.add_argument("--grad-bytes", type=float, help="override bytes per parameter for the gradients")
    p.add_argument("--optimizer-bytes", type=float, help="override bytes per parameter for the optimizer state")
    p.add_argument("--gpu-memory-gb", type=float, default=80.0, help="GPU memory in GB (1e9 bytes) for the fits column (default 80)")
    p.add_argument("--no-deepspeed-estimate", action="store_true", help="skip DeepSpeed's own estimator (saves importing it)")
    p.add_argument("--seq-len", help="tokens per sequence for activations (default: the model's maximum, at most 4096)")
    p.add_argument("--micro-batch", default="1", help="sequences per GPU per step (default 1)")
    p.add_argument("--activation-checkpointing", default="none", help="none, or full (every block recomputed in backward)")
    p.add_argument("--attention", default="sdpa", help="sdpa (fused/flash: no score matrix kept) or eager (softmax kept)")
    p.add_argument("--optimizer", default="adamw", help="adamw (fp32 moments), adamw_bf16, adamw_bf16_states (bf16 master and moments) "
                   "or adamw_8bit: the optimizer bytes")
    p.add_argument("--offload-optimizer", default="none", help="none, or cpu (optimizer state and step on the host)")
    p.add_argument("--overhead-fraction", type=float, default=0.0,
                   help="allocator/NCCL overhead as a share of the peak, calibrated from a measured run (default 0)")
    p.add_argument("--json", action="store_true", help="rows as JSON (bytes, assumptions, fits, DeepSpeed's estimate, whole peak)")
    p.set_defaults(func=_cmd_memory)

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
    p.add_argument("--activation-checkpointing", default="none", help="none, or full (every block recomputed in backward)")
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
