"""Modeled time and memory of one training step per data-parallel strategy.

Compute: ``flops_per_token(seq_len) × tokens per GPU / (peak × mfu)``, split 1/3 forward and
2/3 backward (2N and 4N of the 6N FLOPs per token).

Communication per step, Ψ parameters on the wire (the ZeRO paper's volumes, in nccl-tests sizes),
gradients in the dtype the run reduces in (``reduce_bytes``: the ``reduce_dtype`` setting, whose
``auto`` is the training dtype) and gathered parameters in the compute dtype (``comm_bytes``),
each collective timed by :mod:`shardscope.costmodel.collectives`:

- ``ddp`` / ``zero0``: all-reduce of the gradients (2Ψ moved) in buckets — torch DDP's
  25 MiB (``bucket_cap_mb``), DeepSpeed's ``reduce_bucket_size`` of 5e8 elements — during backward;
- ``zero1`` / ``zero2``: reduce-scatter of the gradients during backward, then all-gather of
  the updated parameters after the optimizer step (Ψ + Ψ), DeepSpeed's 5e8-element buckets;
- ``zero3`` / ``fsdp``: per unit (each transformer block; embeddings, norm and head as one
  more) an all-gather of its parameters in forward and again in backward and a
  reduce-scatter of its gradients in backward (3Ψ);
- ``fsdp_grad_op``: all-gather per unit in forward, reduce-scatter in backward (2Ψ).
- ``zero3_hpz`` (ZeRO-3 with hpZ): ZeRO-3's 3Ψ, its backward all-gather from the secondary partition
  inside one island (``Message.island``).
- ``hsdp`` (FSDP2 on a 2-D mesh, ``reshard_after_forward``): FSDP's per-unit all-gather in forward
  and again in backward and reduce-scatter in backward, all inside one shard group of ``shard_group``
  ranks (``Message.island``), then an all-reduce of each unit's gradient shard (Ψ/shard_group) across
  the ``gpus / shard_group`` replica groups (``Message.replicas``; none when one group holds every rank).

A message inside one island is timed by ``island_time`` (a timer of one island's ranks), one across
the replica groups by ``replica_time`` (a timer of one rank of each group), where the caller gives
them (:func:`shardscope.costmodel.advise.setup` builds both from the placement), else by the job's own
timer: an upper bound for the island's, an estimate for the replicas'.

Where a training run recorded the bytes of every collective of one step (``summary.comm_bytes``,
the ``training_comm`` table: calls and summed size per op), :func:`recorded_messages` replaces
these volumes by the recorded ones, issued in the phases the strategy issues that op in (so
DeepSpeed ZeRO-1/2's gradient all-reduce, 2Ψ where the paper counts Ψ, is timed as it ran).

Overlap is explicit: a collective issued in forward (backward) can hide behind forward
(backward) compute, at most ``overlap`` of its time and at most the length of that compute;
the all-gather after the optimizer step hides behind nothing. ``step = compute + exposed comm``,
plus ``call_overhead_s`` per collective call where a calibration measured one (host work that hides
behind nothing), plus ``host_call_s`` per Python function call of the step where a run recorded how
many it makes (``host_calls``: ``summary.host_calls_per_step``, :mod:`shardscope.training.host_calls`)
and a calibration fitted the seconds per call: the frameworks' host work (ZeRO-3's per-submodule
hooks, FSDP2's per-unit hooks and DTensor dispatch, per-parameter gradient hooks), which also hides
behind nothing. Both host terms are part of ``exposed_comm_time_s`` (and ``comm_time_s``) in the
predictions document, whose rows keep ``step = compute + exposed``; ``host_time_s`` holds them alone.

Memory is the whole modeled peak (:func:`whole_peak_bytes`: the implementation's model states plus
activations and buffers) against ``usable_fraction`` of the GPU memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from shardscope.collectives.factors import OPS
from shardscope.contracts.models import ModelConfig
from shardscope.contracts.names import GROUPED_STRATEGIES, STRATEGIES

#: Model FLOPs utilisation assumed for compute: PaLM reports 46.2% MFU training 540B on TPU v4
#: (Chowdhery et al. 2022, Table 3); Megatron-LM/torchtitan Llama runs report 40–50% on H100.
DEFAULT_MFU = 0.45
#: Share of a collective's time that may hide behind compute of the same phase. Not measured:
#: a neutral midpoint between no overlap (0) and perfect overlap (1); set it from
#: ``summary.comm_share`` of measured runs or pass ``--overlap``.
DEFAULT_OVERLAP = 0.5
#: Share of GPU memory the whole modeled peak may use; the rest is headroom for the allocator's
#: cache and NCCL, until an overhead fraction calibrated from measured runs replaces it.
DEFAULT_USABLE_FRACTION = 0.9
DDP_BUCKET_BYTES = 25 * 2**20
PHASES = ("forward", "backward", "after_step")
DEEPSPEED_BUCKET_ELEMENTS = 500_000_000


@dataclass(frozen=True)
class StepAssumptions:
    """Everything the step model assumes beyond the machine and the model shape."""

    micro_batch: int = 1
    """Sequences per GPU per step."""
    seq_len: int | None = None
    """Tokens per sequence; None: the model's ``max_seq_len`` capped at 4096."""
    mfu: float = DEFAULT_MFU
    overlap: float = DEFAULT_OVERLAP
    comm_bytes: int = 2
    """Bytes per gathered parameter element on the wire (2: bf16; 4: fp32)."""
    reduce_bytes: int | None = None
    """Bytes per gradient element on the wire (the run's ``reduce_dtype``: 4 for fp32); None: ``comm_bytes``."""
    dtype: str = "bfloat16"
    """dtype of the memory model (bf16: 2 + 2 + 12 bytes per parameter)."""
    usable_fraction: float = DEFAULT_USABLE_FRACTION
    call_overhead_s: float = 0.0
    """Host time per collective call that overlaps nothing (framework dispatch, buffer copies); 0 unless calibrated
    from measured runs (:mod:`shardscope.costmodel.step_calibration`)."""
    host_call_s: float = 0.0
    """Host time per Python function call of a step (framework hooks, dispatch), times the step's recorded count;
    0 unless calibrated from measured runs. Calibrated on CPU processes; on a GPU the same seconds per call
    apply to the host thread's work (an assumption: a faster host CPU makes it smaller)."""
    ddp_bucket_bytes: int = DDP_BUCKET_BYTES
    deepspeed_bucket_elements: int = DEEPSPEED_BUCKET_ELEMENTS
    checkpointing: str = "none"
    """Activation checkpointing, ``none`` or ``full`` (every block recomputed in backward: one more forward)."""
    trainable_fraction: float = 1.0
    """Share of the parameters that train (LoRA-style frozen weights): only they have gradients, optimizer state and
    weight-gradient FLOPs, and only their gradients are reduced."""
    offload_optimizer: str = "none"
    """``cpu``: the optimizer state lives in host memory (ZeRO-Offload); the GPU keeps none of it."""

    def __post_init__(self) -> None:
        if self.reduce_bytes is not None and (isinstance(self.reduce_bytes, bool) or self.reduce_bytes not in (2, 4)):
            raise ValueError(f"reduce_bytes must be 2 (bf16) or 4 (fp32), got {self.reduce_bytes!r}")
        for name in ("micro_batch", "comm_bytes", "ddp_bucket_bytes", "deepspeed_bucket_elements"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.seq_len is not None and (isinstance(self.seq_len, bool) or not isinstance(self.seq_len, int) or self.seq_len < 1):
            raise ValueError(f"seq_len must be a positive integer, got {self.seq_len!r}")
        if not 0 < self.mfu <= 1:
            raise ValueError(f"mfu must be in (0, 1], got {self.mfu!r}")
        if not 0 <= self.overlap <= 1:
            raise ValueError(f"overlap must be in [0, 1], got {self.overlap!r}")
        if not (self.call_overhead_s >= 0 and self.call_overhead_s < 1):
            raise ValueError(f"call_overhead_s must be in [0, 1) seconds, got {self.call_overhead_s!r}")
        if not (self.host_call_s >= 0 and self.host_call_s < 1e-3):
            raise ValueError(f"host_call_s must be in [0, 1e-3) seconds per call, got {self.host_call_s!r}")
        if not 0 < self.usable_fraction <= 1:
            raise ValueError(f"usable memory fraction must be in (0, 1], got {self.usable_fraction!r}")
        if self.dtype not in ("bfloat16", "float16", "float32"):
            raise ValueError(f"dtype must be bfloat16, float16 or float32, got {self.dtype!r}")
        if self.checkpointing not in ("none", "full"):
            raise ValueError(f"activation checkpointing must be none or full, got {self.checkpointing!r}")
        if not 0 < self.trainable_fraction <= 1:
            raise ValueError(f"trainable fraction must be in (0, 1], got {self.trainable_fraction!r}")
        if self.offload_optimizer not in ("none", "cpu"):
            raise ValueError(f"optimizer offload must be none or cpu, got {self.offload_optimizer!r}")

    @property
    def gradient_bytes(self) -> int:
        """Bytes per gradient element on the wire."""
        return self.reduce_bytes or self.comm_bytes

    def seq_len_for(self, cfg: ModelConfig) -> int:
        """Sequence length used for ``cfg``."""
        return self.seq_len or min(cfg.max_seq_len, 4096)

    def to_dict(self) -> dict[str, Any]:
        """Plain dictionary, stored with every prediction."""
        return asdict(self)


@dataclass(frozen=True)
class Message:
    """``count`` calls of one collective of ``size_bytes`` issued in ``phase``."""

    op: str
    size_bytes: int
    count: int
    phase: str
    """``forward``, ``backward`` or ``after_step`` (cannot overlap)."""
    island: bool = False
    """Issued inside one group of ranks (an NVLink island), not over all of them: hpZ's backward all-gather,
    HSDP's shard-group collectives."""
    replicas: bool = False
    """Issued across the groups, one rank of each: HSDP's all-reduce of the gradient shards."""

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown collective {self.op!r}")
        if self.island and self.replicas:
            raise ValueError("a message runs inside one island or across the replica groups, not both")
        if self.size_bytes < 1 or self.count < 1:
            raise ValueError(f"a message needs a positive size and count, got {self.size_bytes} x {self.count}")
        if self.phase not in PHASES:
            raise ValueError(f"phase must be one of {', '.join(PHASES)}, got {self.phase!r}")


@dataclass(frozen=True)
class RecordedCollective:
    """One op's collectives in one step of a measured training run (a ``training_comm`` row, summed over dtypes)."""

    op: str
    calls: int
    size_bytes: int
    """Their summed nccl-tests size."""

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown collective {self.op!r}")
        if self.calls < 1 or self.size_bytes < 1:
            raise ValueError(f"a recorded collective needs positive calls and size, got {self.calls} x {self.size_bytes}")


@dataclass(frozen=True)
class StepPrediction:
    """Modeled step of one strategy: times in seconds, memory in bytes."""

    strategy: str
    model: str
    param_count: int
    gpus: int
    step_time_s: float
    compute_time_s: float
    comm_time_s: float
    exposed_comm_time_s: float
    memory_total_bytes: int
    memory_available_bytes: int | None
    fits: bool | None
    tokens_per_step: int
    messages: tuple[Message, ...] = field(default_factory=tuple)
    host_time_s: float = 0.0
    """The host terms alone (per collective call and per recorded Python call), included in the exposed time."""

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError(f"gpus must be at least 1, got {self.gpus}")
        times = (self.step_time_s, self.compute_time_s, self.comm_time_s, self.exposed_comm_time_s)
        if any(t < 0 for t in times) or self.exposed_comm_time_s > self.comm_time_s + 1e-12:
            raise ValueError(f"inconsistent step times {times}")

    def to_row(self) -> dict[str, Any]:
        """The ``strategies`` row of the predictions document."""
        row = {k: v for k, v in asdict(self).items() if k not in ("messages", "host_time_s")}
        row["method"] = "modeled"
        return row


def unit_params(cfg: ModelConfig) -> list[int]:
    """Parameters per FSDP/ZeRO-3 unit: one per transformer block, plus embeddings/norm/head."""
    total = cfg.param_count()
    block = (total - (1 if cfg.tie_embeddings else 2) * cfg.vocab_size * cfg.d_model - cfg.d_model) // cfg.n_layers
    return [block] * cfg.n_layers + [total - block * cfg.n_layers]


def _buckets(op: str, total_bytes: int, bucket: int, phase: str) -> list[Message]:
    full, rest = divmod(total_bytes, bucket)
    out = [Message(op, bucket, full, phase)] if full else []
    return out + ([Message(op, rest, 1, phase)] if rest else [])


def messages_for(strategy: str, cfg: ModelConfig, a: StepAssumptions, gpus: int | None = None,
                 shard_group: int | None = None) -> list[Message]:
    """The collectives one step of ``strategy`` issues (see the module docstring).

    ``gpus`` and ``shard_group`` matter to ``hsdp`` only: with ``gpus // shard_group`` above 1 its
    gradient shards are all-reduced across the replica groups; ``shard_group`` None is all ``gpus`` (FSDP's messages).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    e, g = a.comm_bytes, a.gradient_bytes
    grads, params = int(cfg.param_count() * a.trainable_fraction) * g, cfg.param_count() * e
    if strategy == "ddp":
        return _buckets("all_reduce", grads, a.ddp_bucket_bytes, "backward")
    if strategy == "zero0":
        return _buckets("all_reduce", grads, a.deepspeed_bucket_elements * g, "backward")
    if strategy in ("zero1", "zero2"):
        return (_buckets("reduce_scatter", grads, a.deepspeed_bucket_elements * g, "backward")
                + _buckets("all_gather", params, a.deepspeed_bucket_elements * e, "after_step"))
    units = unit_params(cfg)
    hsdp = strategy == "hsdp"
    out = [Message("all_gather", p * e, 1, "forward", island=hsdp) for p in units]
    if strategy in ("zero3", "fsdp", "zero3_hpz", "hsdp"):
        out += [Message("all_gather", p * e, 1, "backward", island=strategy in GROUPED_STRATEGIES) for p in units]
    out += [Message("reduce_scatter", p * g, 1, "backward", island=hsdp) for p in units]
    shard = shard_group or gpus
    if hsdp and gpus and shard and gpus // shard > 1:
        # FSDP2's HSDP: after the reduce-scatter inside the shard group, each rank's gradient shard
        # (its unit's parameters / shard_group, padded up) is all-reduced across the replica groups
        out += [Message("all_reduce", -(-p // shard) * g, 1, "backward", replicas=True) for p in units]
    return out


def _default_phase(strategy: str, op: str) -> str:
    """Where a recorded op the modeled schedule lacks is issued: gradient reductions in backward,
    ZeRO-1/2's parameter all-gather after the step, a sharded strategy's gathers in forward, the rest after the step."""
    if op in ("all_reduce", "reduce_scatter"):
        return "backward"
    if op == "all_gather":
        return "after_step" if strategy in ("zero1", "zero2") else "forward"
    return "after_step"


def recorded_messages(strategy: str, cfg: ModelConfig, a: StepAssumptions,
                      recorded: list[RecordedCollective] | tuple[RecordedCollective, ...],
                      gpus: int | None = None, shard_group: int | None = None) -> list[Message]:
    """The messages of one step from what a training run recorded, in the phases ``strategy`` issues each op in.

    Each op's recorded bytes and calls are split over phases as :func:`messages_for` splits that
    op's bytes (ZeRO-3/FSDP all-gathers: forward and backward alike); an op the modeled schedule
    does not issue goes to :func:`_default_phase`. Message size = the phase's bytes / its calls.
    """
    modeled: dict[str, dict[tuple[str, bool, bool], int]] = {}
    for m in messages_for(strategy, cfg, a, gpus, shard_group):
        modeled.setdefault(m.op, {}).setdefault((m.phase, m.island, m.replicas), 0)
        modeled[m.op][(m.phase, m.island, m.replicas)] += m.size_bytes * m.count
    out = []
    for rec in recorded:
        phases = modeled.get(rec.op) or {(_default_phase(strategy, rec.op), False, False): 1}
        total = sum(phases.values())
        for (phase, island, replicas), weight in phases.items():
            calls = max(1, round(rec.calls * weight / total))
            size = max(1, round(rec.size_bytes * weight / total / calls))
            out.append(Message(rec.op, size, calls, phase, island, replicas))
    return out


def work_factor(a: StepAssumptions) -> float:
    """The step's FLOPs relative to ``6·N`` per token: forward 2, input gradients 2, weight gradients 2 × the
    trainable fraction (frozen weights need none), and one more forward (2) under full activation checkpointing."""
    return (2 + (2 if a.checkpointing == "full" else 0) + 2 + 2 * a.trainable_fraction) / 6


def whole_peak_bytes(strategy: str, cfg: ModelConfig, gpus: int, a: StepAssumptions, shard_group: int | None = None) -> int:
    """The memory criterion of "fits": :func:`shardscope.costmodel.answer.job_peak`, the one whole-peak function.

    Its default model states are the implementation's (what this code's strategies hold), with
    activations and buffers at ``a.micro_batch`` and the sequence length, in ``a.dtype``, ``a.checkpointing``,
    ``a.trainable_fraction`` and ``a.offload_optimizer`` (``shard_group``: an hsdp shard group or a zero3_hpz
    partition).
    """
    from shardscope.costmodel.answer import job_peak

    return job_peak(strategy, cfg, gpus, a, shard_group).peak_bytes


def phase_comm_times(messages: list[Message] | tuple[Message, ...], collective_time: Callable[[str, int], float],
                     island_time: Callable[[str, int], float] | None = None,
                     replica_time: Callable[[str, int], float] | None = None) -> dict[str, float]:
    """Seconds of communication issued in each phase: a message inside one island timed by ``island_time``, one
    across the replica groups by ``replica_time`` where given, the rest (and those without a timer) by ``collective_time``."""
    per_phase: dict[str, float] = {}
    for m in messages:
        timer = (island_time if m.island else replica_time if m.replicas else None) or collective_time
        per_phase[m.phase] = per_phase.get(m.phase, 0.0) + m.count * timer(m.op, m.size_bytes)
    return per_phase


def exposed_comm_s(compute_s: float, per_phase: dict[str, float], overlap: float) -> float:
    """Communication left exposed: each phase's time less what hides behind its compute (forward 1/3, backward 2/3)."""
    windows = {"forward": compute_s / 3.0, "backward": 2.0 * compute_s / 3.0, "after_step": 0.0}
    return sum(t - min(overlap * t, windows[phase]) for phase, t in per_phase.items())


def predict_step(strategy: str, model: str, cfg: ModelConfig, gpus: int, peak_flops: float,
                 collective_time: Callable[[str, int], float], memory_bytes: int | None,
                 a: StepAssumptions | None = None,
                 recorded: list[RecordedCollective] | tuple[RecordedCollective, ...] | None = None,
                 host_calls: int | None = None, island_time: Callable[[str, int], float] | None = None,
                 shard_group: int | None = None, replica_time: Callable[[str, int], float] | None = None) -> StepPrediction:
    """Modeled step of ``strategy`` on ``gpus`` GPUs; ``collective_time(op, size_bytes)`` times one call.

    ``recorded``: the bytes a measured run of the same job moved per step (:func:`recorded_messages`);
    without it, the modeled volumes in the reduce dtype (:func:`messages_for`). ``host_calls``: the
    Python function calls per step such a run recorded, each costing ``a.host_call_s``; None: no host
    term beyond the per-collective-call one (the count is measured, not modeled). ``island_time`` times
    the collectives issued inside one island (zero3_hpz's backward all-gather, hsdp's shard-group ones) and
    ``replica_time`` those across the replica groups (hsdp's all-reduce); default: ``collective_time``.
    ``shard_group`` is an hsdp job's shard group or a zero3_hpz job's partition (its messages and memory).
    """
    if peak_flops <= 0:
        raise ValueError(f"peak FLOP/s must be positive, got {peak_flops}")
    a = a or StepAssumptions()
    seq = a.seq_len_for(cfg)
    tokens = a.micro_batch * seq
    compute = cfg.flops_per_token(seq) * tokens / (peak_flops * a.mfu) * work_factor(a)
    if gpus < 2:
        messages: list[Message] = []
    else:
        messages = (recorded_messages(strategy, cfg, a, recorded, gpus, shard_group) if recorded
                    else messages_for(strategy, cfg, a, gpus, shard_group))
    per_phase = phase_comm_times(messages, collective_time, island_time, replica_time)
    calls = sum(m.count for m in messages)
    if host_calls is not None and host_calls < 0:
        raise ValueError(f"host_calls must be non-negative, got {host_calls}")
    host = calls * a.call_overhead_s + (host_calls or 0) * a.host_call_s
    exposed = exposed_comm_s(compute, per_phase, a.overlap) + host
    comm = sum(per_phase.values()) + host
    memory = {"total_bytes": whole_peak_bytes(strategy, cfg, gpus, a, shard_group)}
    available = int(memory_bytes * a.usable_fraction) if memory_bytes else None
    fits = None if available is None else memory["total_bytes"] <= available
    return StepPrediction(strategy=strategy, model=model, param_count=cfg.param_count(), gpus=gpus,
                          step_time_s=compute + exposed, compute_time_s=compute, comm_time_s=comm,
                          exposed_comm_time_s=exposed, memory_total_bytes=int(memory["total_bytes"]),
                          memory_available_bytes=available, fits=fits, tokens_per_step=tokens * gpus,
                          messages=tuple(messages), host_time_s=host)
