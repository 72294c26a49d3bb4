"""``shardscope memory``: the analytic per-GPU memory of each strategy (registered by :mod:`.commands`).

The model's command lives with the model (it was the training stage's, which is the torch worker alone).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from shardscope.cli import gpu_count
from shardscope.contracts.names import GROUPED_STRATEGIES, STRATEGIES
from shardscope.costmodel.deepspeed_config import add_deepspeed_config_arg
from shardscope.errors import UserError
from shardscope.fileio import dump_json

if TYPE_CHECKING:
    from shardscope.contracts.models import ModelConfig


def _cmd_memory(args: argparse.Namespace) -> int:
    from shardscope.contracts.models import parse_model_spec, resolve_model
    from shardscope.costmodel.answer import memory_dtype
    from shardscope.costmodel.deepspeed_config import run_knobs
    from shardscope.costmodel.memory_model import assumptions, memory_table
    from shardscope.costmodel.memory_report import format_memory_table, format_peak_table

    try:
        dtype = memory_dtype(args.dtype)
        name, cfg = resolve_model(parse_model_spec(args.model))  # once: a config.json path is read here only
        args.deepspeed_knobs, args.offload_optimizer = run_knobs(args.deepspeed_config, cfg.d_model,
                                                                 args.offload_optimizer)
        optim_bytes = args.optimizer_bytes if args.optimizer_bytes is not None else _optimizer_bytes(args)
        per_param = assumptions(dtype, not args.no_master_weights, args.param_bytes, args.grad_bytes, optim_bytes,
                                half="fp16" if args.dtype == "float16" else "bf16")
        rows = memory_table({"name": name, **cfg.to_dict()}, args.strategy, args.gpus, dtype, per_param=per_param,
                            gpu_memory_gb=args.gpu_memory_gb, deepspeed_estimates=not args.no_deepspeed_estimate,
                            shard_group=_shard_group(args))
    except ValueError as exc:
        raise UserError(str(exc)) from None
    try:
        _add_whole_peak(rows, args, cfg)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if args.json:
        print(dump_json(rows), end="")
        return 0
    from shardscope.costmodel.advise import model_notes

    notes = "".join(f"note: {n}\n" for n in model_notes(cfg, parse_model_spec(args.model)))
    print(format_memory_table(rows) + format_peak_table(rows) + notes, end="")
    return 0


def _shard_group(args: argparse.Namespace) -> int | None:
    """``--shard-group``: HSDP's shard-group size or hpZ's partition size, a divisor of ``--gpus`` (None: all of them)."""
    if args.shard_group is None:
        return None
    group = positive_int("--shard-group", args.shard_group)
    if args.gpus % group:
        raise UserError(f"--shard-group must divide --gpus {args.gpus}, got {group}")
    return group


def _choice(flag: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise UserError(f"{flag} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def positive_int(flag: str, value: str | int, most: int | None = None) -> int:
    """``value`` as a whole number from 1 to ``most`` (the model's context, for ``--seq-len``), else a UserError in one
    sentence naming ``flag``; ``memory``'s and ``advise``'s flags share it."""
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
    master = optimizer.master_bytes if args.dtype != "float32" and not args.no_master_weights else 0.0
    return master + optimizer.moment_bytes


def _add_whole_peak(rows: list[dict], args: argparse.Namespace, cfg: ModelConfig) -> None:
    """Each row gains ``peak`` (every modeled term) of model ``cfg``, whether it fits the usable memory and the
    ``largest_micro_batch`` that does.

    The peak is :func:`shardscope.costmodel.answer.job_peak`'s, advise's and the report's: the implementation's model
    states unless bytes per parameter are given (``--param-bytes``, ``--grad-bytes``, ``--optimizer-bytes``,
    ``--no-master-weights``), which then replace them.
    """
    from dataclasses import replace

    from shardscope.costmodel.answer import job_peak, largest_fitting
    from shardscope.costmodel.memory_peak import ATTENTION_KERNELS, CHECKPOINTING
    from shardscope.costmodel.optimizer_step import ADAMW_IMPLEMENTATIONS
    from shardscope.costmodel.step import StepAssumptions

    if args.seq_len is None:
        seq = min(cfg.max_seq_len, 4096)
    else:
        seq = positive_int("--seq-len", args.seq_len, cfg.max_seq_len)
    micro = positive_int("--micro-batch", args.micro_batch)
    if not 0 <= args.overhead_fraction < 1:
        raise UserError(f"--overhead-fraction must be at least 0 and below 1, got {args.overhead_fraction:g}")
    if not 0 < args.usable_memory <= 1:
        raise UserError(f"--usable-memory must be above 0 and at most 1, got {args.usable_memory:g}")
    if not 0 < args.trainable_fraction <= 1:
        raise UserError(f"--trainable-fraction must be above 0 and at most 1, got {args.trainable_fraction:g}")
    step = StepAssumptions(micro_batch=micro, seq_len=seq, dtype=args.dtype, trainable_fraction=args.trainable_fraction,
                           checkpointing=_choice("--activation-checkpointing", args.activation_checkpointing,
                                                 CHECKPOINTING),
                           offload_optimizer=args.offload_optimizer, usable_fraction=args.usable_memory,
                           adamw=_choice("--adamw", args.adamw, ADAMW_IMPLEMENTATIONS),
                           ddp_bucket_view=args.ddp_bucket_view, deepspeed=args.deepspeed_knobs)
    overrides = (args.param_bytes, args.grad_bytes, args.optimizer_bytes)
    given = any(v is not None for v in overrides) or args.no_master_weights
    if args.attention is not None:  # the run's attention, in place of the one its model names
        cfg = replace(cfg, attention=_choice("--attention", args.attention, ATTENTION_KERNELS))
    knobs = {"optimizer": args.optimizer, "overhead_fraction": args.overhead_fraction}
    for row in rows:
        held = {key: row[key] for key in ("param_bytes", "grad_bytes", "optim_bytes")} if given else None
        group = row["shard_group"] if row["strategy"] in GROUPED_STRATEGIES else None
        usable = int(row["gpu_memory_bytes"] * args.usable_memory)
        peak = job_peak(row["strategy"], cfg, args.gpus, step, group, held=held, capacity_bytes=usable, **knobs)
        row["peak"] = peak.to_dict()
        row["usable_bytes"] = usable
        row["peak_fits"] = peak.fits(usable)
        row["largest_micro_batch"] = largest_fitting(
            lambda mb, r=row, g=group, h=held: job_peak(r["strategy"], cfg, args.gpus, replace(step, micro_batch=mb), g,
                                                         held=h, **knobs).fits(usable))


def register_memory(sub: argparse._SubParsersAction) -> None:
    """Add ``shardscope memory`` to the ``shardscope`` parser."""
    from shardscope.costmodel.step import DEFAULT_USABLE_FRACTION

    p = sub.add_parser("memory", help="analytic per-GPU memory per strategy: model states, activations, buffers, the whole peak")
    p.add_argument("--model", required=True, help="preset (tiny, gpt2-small, llama-1b, mistral-7b), a JSON object of "
                                                   "dimensions, or the path of a Hugging Face config.json")
    p.add_argument("--strategy", default="all", help=f"one of {', '.join(STRATEGIES)}, or 'all' (the default)")
    p.add_argument("--gpus", type=gpu_count, required=True, help="GPUs the model is sharded over")
    p.add_argument("--shard-group", help="hsdp: GPUs of one shard group; zero3_hpz: GPUs of one secondary parameter "
                                         "partition; a divisor of --gpus (default: all of them)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"],
                   help="sets the default bytes per parameter (float16 sized as bfloat16: the same bytes)")
    p.add_argument("--no-master-weights", action="store_true",
                   help="bf16 without a fp32 master copy: optimizer 8 B/param instead of 12 (Mistral-7B's model states unsharded, as under DDP: 87 GB)")
    p.add_argument("--param-bytes", type=float, help="override bytes per parameter for the parameters")
    p.add_argument("--grad-bytes", type=float, help="override bytes per parameter for the gradients")
    p.add_argument("--optimizer-bytes", type=float, help="override bytes per parameter for the optimizer state")
    p.add_argument("--gpu-memory-gb", type=float, default=80.0, help="GPU memory in GB (1e9 bytes) for the fits column (default 80)")
    p.add_argument("--no-deepspeed-estimate", action="store_true", help="skip DeepSpeed's own estimator (saves importing it)")
    p.add_argument("--seq-len", help="tokens per sequence for activations (default: the model's maximum, at most 4096)")
    p.add_argument("--micro-batch", default="1", help="sequences per GPU per step (default 1)")
    p.add_argument("--activation-checkpointing", default="none",
                   help="none, full (every block recomputed in backward), or torchtitan's selective_op or "
                        "selective_layer (see advise --help)")
    p.add_argument("--attention", help="sdpa (torch's fused kernel, flash: no score matrix kept) or eager (Hugging Face's "
                                       "eager code: the float32 softmax, its cast and any dropout kept per score); "
                                       "default: the model's config's, else eager for the families transformers "
                                       "runs eagerly only (T5, BLOOM, DeBERTa), else sdpa")
    p.add_argument("--optimizer", default="adamw", help="adamw (fp32 moments), adamw_bf16, adamw_bf16_states (bf16 master and moments) "
                   "or adamw_8bit: the optimizer bytes")
    p.add_argument("--offload-optimizer", default="none", help="none, or cpu (optimizer state and step on the host)")
    p.add_argument("--adamw", default="default",
                   help="fused (no temporaries in the step), foreach (torch's default on a GPU since 2.0: one "
                        "temporary per stepped parameter), for-loop (torch before 2.0, foreach=False, the Hugging Face "
                        "Trainer's adamw_hf: a few of its largest tensors) or default: the framework's (fused under "
                        "DeepSpeed, foreach under DDP and FSDP)")
    p.add_argument("--ddp-bucket-view", action="store_true",
                   help="the run's DDP uses gradient_as_bucket_view=True (see advise --help); by default its buckets "
                        "are a second copy of the gradients, as torch builds DDP")
    add_deepspeed_config_arg(p)
    p.add_argument("--trainable-fraction", type=float, default=1.0,
                   help="share of the parameters that train (LoRA-style frozen weights): gradients and optimizer state "
                        "for that share only (default 1)")
    p.add_argument("--usable-memory", type=float, default=DEFAULT_USABLE_FRACTION,
                   help="share of the GPU's memory the whole peak may use, as advise's "
                        f"(default {DEFAULT_USABLE_FRACTION})")
    p.add_argument("--overhead-fraction", type=float, default=0.0,
                   help="allocator/NCCL overhead as a share of the peak, calibrated from a measured run; it replaces the "
                        "modeled caching allocator's reserve (default 0: the modeled reserve)")
    p.add_argument("--json", action="store_true", help="rows as JSON (bytes, assumptions, fits, DeepSpeed's estimate, whole peak)")
    p.set_defaults(func=_cmd_memory)
