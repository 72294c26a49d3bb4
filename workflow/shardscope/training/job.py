"""What one training job is: strategy, model, ranks, batch and steps, validated in one place.

The launcher builds a :class:`TrainJob` before torchrun starts, so bad input (an unknown
preset, dimensions that do not divide, a batch that cannot be formed) stops with one sentence
and exit status 2 instead of a ``failed`` result; the worker builds the same object again, so
its own checks match the launcher's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shardscope.contracts.models import ModelConfig, resolve_model
from shardscope.contracts.names import STRATEGIES
from shardscope.contracts.names import TRAINING_DTYPES as DTYPE_NAMES


def _positive_int(name: str, value: Any, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer of at least {minimum}, got {value!r}")


@dataclass(frozen=True)
class TrainJob:
    """One training job, checked before any process starts."""

    strategy: str
    """One of :data:`shardscope.training.strategies.STRATEGIES`."""
    model: str | dict[str, Any]
    """A preset name or a dict of dimensions (optionally with ``preset`` and ``name``)."""
    nproc: int
    """Ranks (processes, one per GPU) on this node."""
    micro_batch: int = 2
    """Sequences per rank per step."""
    seq_len: int = 64
    """Tokens per sequence; at most the model's ``max_seq_len``."""
    warmup: int = 2
    """Untimed steps first (at least 1: optimizer state exists only after a step)."""
    steps: int = 5
    """Timed steps per repeat."""
    dtype: str = "float32"
    """``float32`` or ``bfloat16`` (bf16 compute, fp32 master weights)."""
    memory_budget_bytes: int | None = None
    """Peak memory above this makes the outcome ``over_budget``; ``None`` for no budget."""
    seed: int = 0
    """Seed of the initial weights, the same on every rank and under every strategy."""
    repeats: int = 1
    """Timed windows of ``steps`` steps each; the result stores their median and 95% interval."""
    activation_checkpointing: str = "none"
    """``none`` or ``full`` (every block recomputed in backward: :mod:`shardscope.training.checkpointing`)."""
    optimizer: str = "adamw"
    """Optimizer-state variant (:mod:`shardscope.contracts.optimizers`)."""
    grad_accum: int = 1
    """Micro-batches per optimizer step (:mod:`shardscope.training.accumulation`)."""
    model_name: str = field(init=False)
    """Name of the resolved model (the preset, the given ``name``, or ``custom``)."""
    config: ModelConfig = field(init=False)
    """The resolved model shape."""

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r}; expected one of {', '.join(STRATEGIES)}")
        name, config = resolve_model(self.model)
        object.__setattr__(self, "model_name", name)
        object.__setattr__(self, "config", config)
        _positive_int("--nproc", self.nproc)
        _positive_int("--micro-batch", self.micro_batch)
        _positive_int("--seq-len", self.seq_len)
        _positive_int("--warmup", self.warmup)
        _positive_int("--steps", self.steps)
        _positive_int("--seed", self.seed, minimum=0)
        _positive_int("--repeats", self.repeats)
        _positive_int("--grad-accum", self.grad_accum)
        if self.seq_len > config.max_seq_len:
            raise ValueError(f"--seq-len {self.seq_len} is longer than model {name}'s max_seq_len {config.max_seq_len}")
        if self.dtype not in DTYPE_NAMES:
            raise ValueError(f"unknown dtype {self.dtype!r}; expected one of {', '.join(DTYPE_NAMES)}")
        if self.memory_budget_bytes is not None:
            _positive_int("--memory-budget-bytes", self.memory_budget_bytes)
        _check_memory_knobs(self)

    @property
    def tokens_per_step(self) -> int:
        """Tokens the whole job trains on per optimizer step (every rank's micro-batches)."""
        return self.micro_batch * self.grad_accum * self.seq_len * self.nproc


def _check_memory_knobs(job: TrainJob) -> None:
    """Activation checkpointing and the optimizer variant: one of the allowed values, for a strategy that runs it."""
    from shardscope.training.checkpointing import MODES
    from shardscope.contracts.optimizers import check_optimizer

    if job.activation_checkpointing not in MODES:
        raise ValueError(f"--activation-checkpointing must be one of {', '.join(MODES)}, got {job.activation_checkpointing!r}")
    check_optimizer(job.optimizer, job.strategy, job.dtype)
