"""Modeled time and memory of one training step per data-parallel strategy.

Compute: ``flops_per_token(seq_len) × tokens per GPU / (peak × efficiency)``, split 1/3 forward and
2/3 backward (2N and 4N of the 6N FLOPs per token), times ``grad_accum`` micro-batches. The efficiency is a given
or calibrated MFU, else the matmuls' (:func:`matmul_efficiency`: a roofline, :func:`roofline_share`, at the tokens
per micro-batch and the width, against the GPU's datasheet bandwidth,
:data:`~shardscope.costmodel.hardware.MEMORY_BANDWIDTH_GBPS`, times a published efficiency ceiling per GPU class,
:data:`PUBLISHED_EFFICIENCY`) plus the bytes the other ops stream
(:mod:`shardscope.costmodel.elementwise`) at the memory's bandwidth (:func:`micro_batch_compute_s`), and the fused
attention kernel's FLOPs at its own share of the matmuls' rate (:data:`FUSED_ATTENTION_SHARE`), so a larger
micro-batch runs closer to the peak (up to the ridge point), a longer sequence further from it, and a 16-bit step is
bounded by its elementwise traffic.

Communication per step, Ψ parameters on the wire (the ZeRO paper's volumes, in nccl-tests sizes),
gradients in the dtype the run reduces in (``reduce_bytes``: the ``reduce_dtype`` setting, whose
``auto`` is the training dtype) and gathered parameters in the compute dtype (``comm_bytes``),
each collective timed by :mod:`shardscope.costmodel.collectives`:

- ``ddp`` / ``zero0``: all-reduce of the gradients (2Ψ moved) in buckets — torch DDP's
  25 MiB (``bucket_cap_mb``) during backward of the last micro-batch, DeepSpeed's ``reduce_bucket_size``
  of 5e8 elements after backward at the accumulation boundary (:func:`zero_gradient_phase`);
- ``zero1`` / ``zero2``: reduce-scatter of the gradients, then all-gather of the updated parameters
  after the optimizer step (Ψ + Ψ), DeepSpeed's 5e8-element buckets: ZeRO-1 reduces once, after
  backward at the boundary; ZeRO-2 in every micro-batch from its hooks, overlapped with backward only
  under ``overlap_comm`` (off by default for stages 1-2);
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

Overlap follows each strategy's schedule (:func:`scheduled_exposed_s`: a bucket's or unit's collective hides
behind the neighbouring compute, the last reduction and the first gather behind nothing; collectives after
backward or after the step hide behind nothing), or, where ``overlap`` is given or calibrated, a collective
issued in forward (backward) hides at most ``overlap`` of its time and at most the length of that compute.
On a GPU without a calibration the frameworks' host work (:func:`modeled_host_calls` × :data:`DEFAULT_HOST_CALL_S`,
and the gradient hooks' recount of DeepSpeed 0.18.5-0.18.6) runs beside the GPU's and adds only what exceeds compute
plus exposed communication. ``step = compute + exposed comm``,
plus ``call_overhead_s`` per collective call where a calibration measured one (host work that hides
behind nothing), plus ``host_call_s`` per Python function call of the step where a run recorded how
many it makes (``host_calls``: ``summary.host_calls_per_step``, :mod:`shardscope.training.host_calls`)
and a calibration fitted the seconds per call: the frameworks' host work (ZeRO-3's per-submodule
hooks, FSDP2's per-unit hooks and DTensor dispatch, per-parameter gradient hooks), which also hides
behind nothing. Both host terms are part of ``exposed_comm_time_s`` (and ``comm_time_s``) in the
predictions document, whose rows keep ``step = compute + exposed``; ``host_time_s`` holds them alone.

Memory is the whole modeled peak (:func:`whole_peak_terms`: the implementation's model states plus
activations and buffers, on the reserved basis, with the CUDA context and NCCL's buffers beside it) against
``usable_fraction`` of the GPU memory.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from shardscope.contracts.models import ModelConfig
from shardscope.contracts.names import CHECKPOINTING_MODES, GROUPED_STRATEGIES, OPS, STRATEGIES
from shardscope.contracts.peak_flops import float32_peak_flops
from shardscope.contracts.strategies import DDP_BUCKET_BYTES, DEEPSPEED_BUCKET_ELEMENTS, dtype_bytes
from shardscope.costmodel.hardware import GpuSpec
from shardscope.costmodel.deepspeed_config import DeepSpeedKnobs
from shardscope.costmodel.deepspeed_hooks import hook_recount_s
from shardscope.costmodel.elementwise import elementwise_bytes
from shardscope.costmodel.memory_peak import (DDP_BUCKET_VIEW_DEFAULT, compute_policy, recompute_shares,
                                            recomputed_flops_per_token)
from shardscope.costmodel.optimizer_step import STREAM_SHARE, check_adamw, optimizer_step_s

#: A constant model FLOPs utilisation, for callers that want one (``--mfu``): PaLM reports 46.2% MFU training 540B
#: on TPU v4 (Chowdhery et al. 2022, Table 3). The step model's default is the curve of :func:`achieved_mfu`.
DEFAULT_MFU = 0.45
#: A constant share of a collective's time that may hide behind compute of the same phase, for callers that want one
#: (``--overlap``, or a calibration). The step model's default is the strategy's schedule (:func:`scheduled_exposed_s`).
DEFAULT_OVERLAP = 0.5
#: Where the step model's defaults come from, as ``advise`` labels them (MFU, overlap).
STEP_DEFAULTS_LABEL = ("default: matmul roofline x published ceiling + traced traffic, no calibration",
                       "default: each strategy's schedule, no calibration")


@dataclass(frozen=True)
class EfficiencyPoint:
    """One published MFU of a large dense training run and the shape and GPU it was measured at."""

    mfu: float
    tokens: int
    """Tokens per GPU per micro-batch."""
    width: int
    """The model's hidden size."""
    peak_flops: float
    memory_gbps: float
    source: str
    model: ModelConfig | None = None
    """The run's model, whose non-matmul traffic (:mod:`shardscope.costmodel.elementwise`) is part of its step."""
    seq_len: int = 2048
    policy: str = "bf16"
    """Its compute policy: llm-foundry's FSDP ``mixed_precision: PURE`` holds the gathered weights in bf16."""


#: MPT-7B as llm-foundry trains it (github.com/mosaicml/llm-foundry, scripts/train/yamls/pretrain/mpt-7b.yaml):
#: 32 blocks of width 4096, 32 heads, a GELU MLP of 4 x the width (``expansion_ratio: 4``), LayerNorm
#: (``low_precision_layernorm``), a vocabulary padded to 50,432, tied embeddings, sequence 2048.
MPT_7B = ModelConfig(n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32, d_ff=16384, vocab_size=50432,
                     max_seq_len=2048, tie_embeddings=True, mlp="gelu", norm="layernorm")
#: The published runs the compute curve passes through, per GPU class: MosaicML's llm-foundry throughput tables
#: (github.com/mosaicml/llm-foundry, scripts/train/benchmarking/README.md), MPT-7B (d_model 4096), seq 2048,
#: micro-batch 6, 8 GPUs, FSDP FULL_SHARD, bf16, no activation checkpointing (so model FLOPs = hardware FLOPs).
PUBLISHED_EFFICIENCY: dict[str, EfficiencyPoint] = {
    "ampere": EfficiencyPoint(0.6423, 6 * 2048, 4096, 312e12, 2039.0,
                              "llm-foundry benchmarking README, 'A100 80GB' table, 7b / 2048 / mb 6: MFU 64.23%",
                              MPT_7B),
    "hopper": EfficiencyPoint(0.4644, 6 * 2048, 4096, 989.4e12, 3350.0,
                              "llm-foundry benchmarking README, 'H100 80GB BF16' table, 7b / 2048 / mb 6: MFU 46.44%",
                              MPT_7B),
}
#: GPU classes without a published point of their own borrow the nearest one's ceiling (an assumption, stated):
#: Hopper's for the generations whose peak outgrew memory bandwidth as Hopper's did (Blackwell, CDNA 3), Ampere's
#: for the rest; the roofline term then uses the GPU's own peak and bandwidth.
EFFICIENCY_CLASS = {"hopper": "hopper", "blackwell": "hopper", "cdna": "hopper"}
#: The fused attention kernel's rate on the FLOPs counted for it (the full square of scores,
#: :meth:`~shardscope.contracts.models.ModelConfig.attention_flops_per_token`) as a share of the matmuls' rate at the
#: same micro-batch, per GPU class. Fitted (least squares on log throughput, a 0.025 grid) on the 7B-70B rows of
#: llm-foundry's MPT benchmark table (77 rows, 512 to 65,536 tokens, A100 and H100: ``tests/data/published/compute``,
#: ``benchmarks/compute_curve_check.py --fit``) and checked on its 125M-3B rows (132): with the kernel at the
#: matmuls' rate the long sequences ran 25-39% slower on H100s than modeled and the short ones 10-18% faster, one
#: mechanism for both ends, since the anchor run's own attention then takes its share of the anchor's time. The
#: values agree with the kernels' published rates: FlashAttention-2 reaches 50-73% of an A100's peak (Dao 2023), where
#: matmuls reach about 80%; 35% of an H100's (the FlashAttention-3 paper), where they reach 60-70%. Eager attention's
#: score matmuls are plain batched matmuls (share 1; its other ops are timed as traffic). Ampere's moved from 0.85 to
#: 0.875 when the A100 40GB's rows were modeled at its own 1,555 GB/s instead of the 80GB part's 2,039; Hopper's from
#: 0.625 to 0.65 when the matmuls took the classic roofline (:func:`roofline_share`), where they had compute plus
#: memory time.
FUSED_ATTENTION_SHARE = {"ampere": 0.875, "hopper": 0.65}
#: Share of GPU memory the whole modeled peak may use: all of it, since the peak now counts the allocator's
#: reserve, the CUDA context and NCCL's buffers itself (:func:`shardscope.costmodel.memory_peak.gpu_runtime_bytes`).
DEFAULT_USABLE_FRACTION = 1.0
#: Python function calls of one step, counted by :class:`shardscope.training.host_calls.PythonCallCounter` in this
#: project's worker (``shardscope train --cpu --nproc 2 --steps 1 --warmup 1``, fp32, micro-batch 2 x 64 tokens, width
#: 128, 4 heads, MLP 512, vocabulary 1000) at 2 and 4 blocks, under each activation checkpointing mode: the counts
#: (at 2 blocks, at 4 blocks), from which :func:`host_calls_fixed_and_per_block` solves the calls outside the blocks
#: and per block exactly. The hooks are per module and per parameter, so the count follows the depth, not the width.
#: Without checkpointing ZeRO-3's per-submodule fetch/release hooks make 70x DDP's calls per block, FSDP2's per-unit
#: hooks and DTensor dispatch 25x. Checkpointing adds its own Python work to every checkpointed block (torch's
#: non-reentrant checkpoint packs and unpacks each saved tensor through Python hooks: +1,363 calls per block under
#: ``full`` in every strategy; torchtitan's per-op policy runs for every op: +5,087 under ``selective_op``), and under
#: ZeRO-3 the recompute fires every submodule's fetch and release hooks once more (+3,246 per block beyond that).
HOST_CALL_COUNTS: dict[str, dict[str, tuple[int, int]]] = {
    "none": {"ddp": (596, 868), "fsdp": (8515, 15205), "zero1": (2080, 3112), "zero2": (2015, 3023),
             "zero3": (23710, 42674)},
    "full": {"ddp": (3322, 6320), "fsdp": (11289, 20714), "zero1": (4806, 8564), "zero2": (4741, 8475),
             "zero3": (32928, 61110)},
    "selective_op": {"ddp": (10770, 21216), "fsdp": (18707, 35619), "zero1": (12254, 23460),
                     "zero2": (12189, 23371), "zero3": (41276, 77806)},
    "selective_layer": {"ddp": (1959, 3594), "fsdp": (9905, 17982), "zero1": (3443, 5837), "zero2": (3378, 5748),
                        "zero3": (28319, 51892)},
}


def host_calls_fixed_and_per_block(strategy: str, checkpointing: str = "none") -> tuple[float, float]:
    """(calls outside the blocks, calls per block) of one micro-batch of ``strategy`` under ``checkpointing``, solved
    from :data:`HOST_CALL_COUNTS`' two counts (``selective_layer`` checkpoints every other block, so its per-block
    figure is the average of a checkpointed block and a plain one)."""
    at2, at4 = HOST_CALL_COUNTS[checkpointing][HOST_CALLS_LIKE.get(strategy, strategy)]
    per_block = (at4 - at2) / 2
    return at2 - 2 * per_block, per_block


#: Strategies not counted take the count of the framework path they share.
HOST_CALLS_LIKE = {"zero0": "zero1", "fsdp_grad_op": "fsdp", "hsdp": "fsdp", "zero3_hpz": "zero3"}
#: Host seconds per counted Python call on a GPU node before a calibration replaces it: 1 microsecond, an assumption
#: of the order PyTorch's operator micro-benchmarks give, 2.3-3.4 us of host time per eager op on CUDA including its
#: Python wrapper calls (pytorch/pytorch#32194, ``split``), several counted calls each.
DEFAULT_HOST_CALL_S = 1e-6
PHASES = ("forward", "backward", "after_backward", "after_step")
#: Phases whose collectives hide behind no compute: issued after backward (or on the compute stream) and after the step.
SERIAL_PHASES = ("after_backward", "after_step")


@dataclass(frozen=True)
class StepAssumptions:
    """Everything the step model assumes beyond the machine and the model shape."""

    micro_batch: int = 1
    """Sequences per GPU per step."""
    seq_len: int | None = None
    """Tokens per sequence; None: the model's ``max_seq_len`` capped at 4096."""
    mfu: float | None = None
    """A constant MFU (given or calibrated); None: :func:`achieved_mfu`, which grows with the work per micro-batch."""
    overlap: float | None = None
    """A constant share of each phase's communication that may hide (given or calibrated); None: the strategy's
    schedule (:func:`scheduled_exposed_s`)."""
    grad_accum: int = 1
    """Micro-batches accumulated per optimizer step."""
    overlap_comm: bool | None = None
    """DeepSpeed's ``overlap_comm``; None: its default (on for ZeRO-3, off for ZeRO-1/2)."""
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
    """Activation checkpointing: ``none``, ``full`` (every block recomputed in backward: its forward but the last
    matmul, :func:`~shardscope.costmodel.memory_peak.recomputed_flops_per_token`), or
    torchtitan's ``selective_op`` and ``selective_layer`` (:mod:`shardscope.training.checkpointing`)."""
    trainable_fraction: float = 1.0
    """Share of the parameters that train (LoRA-style frozen weights): only they have gradients, optimizer state and
    weight-gradient FLOPs, and only their gradients are reduced."""
    offload_optimizer: str = "none"
    """``cpu``: the optimizer state lives in host memory (ZeRO-Offload); the GPU keeps none of it."""
    deepspeed: DeepSpeedKnobs | None = None
    """The run's own DeepSpeed config (``--deepspeed-config``): its reduce and all-gather buckets, ``overlap_comm`` and
    ZeRO-3's reuse distance, in place of :attr:`deepspeed_bucket_elements`, :attr:`overlap_comm`'s default and the
    memory model's defaults."""
    ddp_bucket_view: bool = DDP_BUCKET_VIEW_DEFAULT
    """DDP's ``gradient_as_bucket_view``: off (torch's default, what Hugging Face's Trainer, Accelerate and Lightning
    build) keeps its all-reduce buckets as a second copy of the gradients; on (this project's worker) the gradients
    are views of them (:data:`~shardscope.costmodel.memory_peak.DDP_BUCKET_VIEW_DEFAULT`)."""
    deepspeed_version: str | None = None
    """The DeepSpeed release the run uses (``advise``: the one installed, or ``--deepspeed-version``); 0.18.5 and 0.18.6
    add host time to every ZeRO backward (:mod:`shardscope.costmodel.deepspeed_hooks`). None: a release without it."""
    adamw: str = "default"
    """The AdamW implementation the run steps with (``--adamw``): ``fused``, ``foreach``, ``for-loop`` or
    ``default``, its framework's (:func:`~shardscope.costmodel.optimizer_step.adamw_implementation`): the update's
    bytes and, in the memory model, the step's temporaries."""

    def __post_init__(self) -> None:
        if self.reduce_bytes is not None and (isinstance(self.reduce_bytes, bool) or self.reduce_bytes not in (2, 4)):
            raise ValueError(f"reduce_bytes must be 2 (bf16) or 4 (fp32), got {self.reduce_bytes!r}")
        for name in ("micro_batch", "comm_bytes", "ddp_bucket_bytes", "deepspeed_bucket_elements", "grad_accum"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.seq_len is not None and (isinstance(self.seq_len, bool) or not isinstance(self.seq_len, int) or self.seq_len < 1):
            raise ValueError(f"seq_len must be a positive integer, got {self.seq_len!r}")
        if self.mfu is not None and not 0 < self.mfu <= 1:
            raise ValueError(f"mfu must be in (0, 1], got {self.mfu!r}")
        if self.overlap is not None and not 0 <= self.overlap <= 1:
            raise ValueError(f"overlap must be in [0, 1], got {self.overlap!r}")
        if not (self.call_overhead_s >= 0 and self.call_overhead_s < 1):
            raise ValueError(f"call_overhead_s must be in [0, 1) seconds, got {self.call_overhead_s!r}")
        if not (self.host_call_s >= 0 and self.host_call_s < 1e-3):
            raise ValueError(f"host_call_s must be in [0, 1e-3) seconds per call, got {self.host_call_s!r}")
        if not 0 < self.usable_fraction <= 1:
            raise ValueError(f"usable memory fraction must be in (0, 1], got {self.usable_fraction!r}")
        if self.dtype not in ("bfloat16", "float16", "float32"):
            raise ValueError(f"dtype must be bfloat16, float16 or float32, got {self.dtype!r}")
        if self.checkpointing not in CHECKPOINTING_MODES:
            raise ValueError(f"activation checkpointing must be one of {', '.join(CHECKPOINTING_MODES)}, "
                             f"got {self.checkpointing!r}")
        if not 0 < self.trainable_fraction <= 1:
            raise ValueError(f"trainable fraction must be in (0, 1], got {self.trainable_fraction!r}")
        if self.offload_optimizer not in ("none", "cpu"):
            raise ValueError(f"optimizer offload must be none or cpu, got {self.offload_optimizer!r}")
        check_adamw(self.adamw)
        if self.deepspeed_version is not None and not isinstance(self.deepspeed_version, str):
            raise ValueError(f"deepspeed_version must be a release string such as '0.18.7', got {self.deepspeed_version!r}")

    @property
    def gradient_bytes(self) -> int:
        """Bytes per gradient element on the wire where no strategy is named: the given reduce dtype's, else the
        gather dtype's (:func:`gradient_wire_bytes` gives a strategy's own)."""
        return self.reduce_bytes or self.comm_bytes

    def seq_len_for(self, cfg: ModelConfig) -> int:
        """Sequence length used for ``cfg``."""
        return self.seq_len or min(cfg.max_seq_len, 4096)

    def to_dict(self) -> dict[str, Any]:
        """Plain dictionary, stored with every prediction."""
        return asdict(self)


def gradient_wire_bytes(strategy: str, a: StepAssumptions) -> int:
    """Bytes per gradient element ``strategy`` reduces: the run's reduce dtype where given (``reduce_bytes``), else
    its framework's default. torch DDP all-reduces each parameter's ``.grad``, whose dtype is the parameter's: fp32
    under autocast, whatever dtype the matmuls ran in (a communication hook such as ``bf16_compress_hook`` is a
    choice a run states); DeepSpeed reduces in its engine's dtype (``communication_data_type`` defaults to it) and
    FSDP in ``MixedPrecisionPolicy.reduce_dtype``, which defaults to the parameter dtype it gathers in."""
    if a.reduce_bytes:
        return a.reduce_bytes
    if compute_policy(strategy, a.dtype, a.trainable_fraction < 1) == "autocast":
        return 4
    return a.comm_bytes


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
    per_micro_step: bool = True
    """Issued in every micro-batch (ZeRO-2/3's and FSDP's reductions and gathers), not once per optimizer step
    (DDP's all-reduce under ``no_sync``, ZeRO-0/1's reduction at the accumulation boundary, the all-gather after the
    step)."""

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
    mfu: float | None = None
    """The MFU the compute time assumed (constant or :func:`achieved_mfu`'s)."""
    memory_runtime_bytes: int = 0
    """Device memory outside the allocator at the peak (CUDA context, NCCL buffers; 0 on the allocated basis):
    "fits" compares ``memory_total_bytes`` plus these with the usable memory (:meth:`PeakTerms.fits`)."""
    optimizer_time_s: float = 0.0
    """The optimizer's update (on the GPU or offloaded), included in the compute time."""
    memory_allocated_bytes: int | None = None
    """The peak of the tensors alive (``max_memory_allocated``'s basis), without the allocator's reserve and cache."""

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError(f"gpus must be at least 1, got {self.gpus}")
        times = (self.step_time_s, self.compute_time_s, self.comm_time_s, self.exposed_comm_time_s)
        if any(t < 0 for t in times) or self.exposed_comm_time_s > self.comm_time_s + 1e-12:
            raise ValueError(f"inconsistent step times {times}")

    def to_row(self) -> dict[str, Any]:
        """The ``strategies`` row of the predictions document."""
        row = {k: v for k, v in asdict(self).items()
               if k not in ("messages", "host_time_s", "mfu", "memory_runtime_bytes", "optimizer_time_s",
                            "memory_allocated_bytes")}
        row["method"] = "modeled"
        return row


def matmul_intensity(tokens: int, width: int, element_bytes: int = 2) -> float:
    """FLOPs per byte of memory traffic of one ``[tokens x width] @ [width x width]`` matmul: ``2·T·h²`` FLOPs over
    the input, weight and output read or written once (``e·(2·T·h + h²)`` bytes)."""
    return 2.0 * tokens * width * width / (element_bytes * (2.0 * tokens * width + width * width))


def roofline_share(tokens: int, width: int, peak_flops: float, memory_bytes_s: float, element_bytes: int = 2) -> float:
    """Share of the peak a transformer's matmuls reach at ``tokens`` per micro-batch: the roofline of Williams,
    Waterman and Patterson (CACM 2009), ``min(1, I / R)`` (``I``: :func:`matmul_intensity`; ``R`` = peak / bandwidth,
    the GPU's ridge point). A matmul kernel loads its next tiles while it multiplies the current ones (software
    pipelining, on every generation), so one above the ridge point is bound by its math alone and one below it by
    its bytes."""
    intensity = matmul_intensity(tokens, width, element_bytes)
    return min(1.0, intensity / (peak_flops / memory_bytes_s))


def attention_share(arch: str) -> float:
    """:data:`FUSED_ATTENTION_SHARE` of a GPU's class (Ampere's for the classes without a curve of their own)."""
    return FUSED_ATTENTION_SHARE[EFFICIENCY_CLASS.get(arch, "ampere")]


def fused_attention_flops(cfg: ModelConfig, checkpointing: str, seq_len: int, tokens: int) -> float:
    """FLOPs the fused attention kernel computes for ``tokens`` tokens (forward, backward and what checkpointing
    computes again), as counted (the full square); 0 for eager attention, whose score matmuls run as matmuls."""
    if cfg.attention != "sdpa":
        return 0.0
    again = recomputed_flops_per_token(cfg, checkpointing, seq_len)[1]
    return tokens * (cfg.attention_flops_per_token(seq_len) + again)


@functools.lru_cache(maxsize=None)
def _ceiling(point: EfficiencyPoint, share_attention: float = 1.0) -> float:
    """The matmul-efficiency ceiling of ``point``'s GPU class: what the roofline share is multiplied by so that the
    published run's whole micro-batch (its matmuls at ``ceiling x roofline share`` of the peak, plus its non-matmul
    traffic at :data:`~shardscope.costmodel.optimizer_step.STREAM_SHARE` of the bandwidth, its attention's FLOPs at
    ``share_attention`` of the matmuls' rate) takes as long as its published MFU says."""
    share = roofline_share(point.tokens, point.width, point.peak_flops, point.memory_gbps * 1e9)
    if point.model is None:
        return point.mfu / share
    flops = point.model.flops_per_token(point.seq_len) * point.tokens
    attention = fused_attention_flops(point.model, "none", point.seq_len, point.tokens)
    traffic = elementwise_bytes(point.model, point.tokens, point.policy)
    matmul_s = flops / (point.peak_flops * point.mfu) - traffic / (point.memory_gbps * 1e9 * STREAM_SHARE)
    return (flops + attention * (1 / share_attention - 1)) / (point.peak_flops * matmul_s) / share


def matmul_efficiency(tokens: int, width: int, peak_flops: float, memory_gbps: float | None, arch: str = "ampere",
                      element_bytes: int = 2) -> float:
    """Share of the peak a transformer's matmuls reach at ``tokens`` per micro-batch on a model of hidden size
    ``width``: a published efficiency ceiling times the roofline, ``ceiling · roofline_share(T, h)``.

    The ceiling is the GPU class's published run (:data:`PUBLISHED_EFFICIENCY`) solved for its matmuls alone
    (:func:`_ceiling`: its MFU less the time its non-matmul traffic takes), so the curve passes through the published
    run and rises with the tokens per micro-batch and the width up to the GPU's ridge point (a larger micro-batch, or
    a wider model, moves the matmuls up to it; above it they are bound by their math). ``memory_gbps`` None (a GPU
    without a datasheet bandwidth here): the published GPU's ratio of peak to bandwidth is assumed.
    """
    point = PUBLISHED_EFFICIENCY[EFFICIENCY_CLASS.get(arch, "ampere")]
    bandwidth = _bandwidth(peak_flops, memory_gbps, arch)
    ceiling = _ceiling(point, attention_share(arch))
    return min(1.0, ceiling * roofline_share(tokens, width, peak_flops, bandwidth, element_bytes))


def _bandwidth(peak_flops: float, memory_gbps: float | None, arch: str) -> float:
    """Bytes/s of a GPU's memory: its datasheet ``memory_gbps``, else its class's published GPU's ratio of bandwidth
    to peak, at ``peak_flops``."""
    if memory_gbps:
        return memory_gbps * 1e9
    point = PUBLISHED_EFFICIENCY[EFFICIENCY_CLASS.get(arch, "ampere")]
    return peak_flops * point.memory_gbps * 1e9 / point.peak_flops


def bandwidth_bytes_s(peak_flops: float, gpu: GpuSpec | None) -> float:
    """The device-memory bandwidth the step model streams at: the GPU's datasheet figure, else (no GPU named, or
    none in the table) its curve's published GPU's ratio of bandwidth to peak, at this peak."""
    return _bandwidth(peak_flops, gpu.memory_bandwidth_gbps if gpu else None, gpu.arch if gpu else "ampere")


def streams_traffic(a: StepAssumptions, gpu: GpuSpec | None) -> bool:
    """Whether the step model times the non-matmul traffic apart: on a GPU (or none named) under the default curve;
    a given or calibrated MFU already holds it (it was measured on whole steps), and a CPU's rate is calibrated."""
    return a.mfu is None and not (gpu is not None and gpu.is_cpu)


def micro_batch_compute_s(strategy: str, cfg: ModelConfig, a: StepAssumptions, peak_flops: float,
                          gpu: GpuSpec | None = None, bandwidth: float | None = None) -> tuple[float, float]:
    """(seconds, MFU) of one micro-batch's forward and backward on one GPU: its matmul FLOPs (:meth:`ModelConfig.
    flops_per_token` x tokens x :func:`work_factor`) at :func:`compute_mfu` of ``peak_flops``, plus, under the
    default curve (:func:`streams_traffic`), the bytes its other ops stream (:func:`~shardscope.costmodel.
    elementwise.elementwise_bytes` in the strategy's :func:`~shardscope.costmodel.memory_peak.compute_policy`, a
    recomputed forward under full checkpointing) at :data:`STREAM_SHARE` of the bandwidth. The MFU is the whole
    micro-batch's: the FLOPs it computes (a recomputed forward included) over the peak times its seconds, so it is
    :func:`compute_mfu` itself where no traffic is timed apart. ``bandwidth`` (bytes/s): :func:`bandwidth_bytes_s`
    of the GPU's 16-bit peak where ``peak_flops`` is another dtype's."""
    seq = a.seq_len_for(cfg)
    tokens = a.micro_batch * seq
    flops = cfg.flops_per_token(seq) * tokens
    matmul_again, other_again = recompute_shares(cfg, a.checkpointing, seq)
    work = work_factor(a, matmul_again)
    efficiency = compute_mfu(cfg, a, peak_flops, gpu)
    seconds = flops / (peak_flops * efficiency) * work
    if streams_traffic(a, gpu):
        # the fused attention kernel at its own share of the matmuls' rate, and the other ops' bytes
        share = attention_share(gpu.arch if gpu is not None else "ampere")
        attention = fused_attention_flops(cfg, a.checkpointing, seq, tokens)
        seconds += attention / (peak_flops * efficiency) * (1 / share - 1)
        policy = compute_policy(strategy, a.dtype, a.trainable_fraction < 1)
        traffic = elementwise_bytes(cfg, tokens, policy, recompute=other_again, cast_share=a.trainable_fraction,
                                    seq_len=seq)
        seconds += traffic / ((bandwidth or bandwidth_bytes_s(peak_flops, gpu)) * STREAM_SHARE)
    return seconds, flops * work / (peak_flops * seconds)


def achieved_mfu(cfg: ModelConfig, tokens: int, seq_len: int, peak_flops: float, gpu: GpuSpec | None = None,
                 strategy: str = "fsdp", dtype: str = "bfloat16") -> float:
    """Modeled MFU of a micro-batch of ``tokens`` tokens of ``seq_len`` on ``cfg`` (no checkpointing), by
    :func:`micro_batch_compute_s`: its matmuls on the roofline curve and its other ops at the memory's bandwidth,
    so it rises with the tokens per micro-batch and the width, and is lower in autocast (``ddp``) than in a model
    held in 16 bits."""
    a = StepAssumptions(micro_batch=max(1, tokens // seq_len), seq_len=seq_len, dtype=dtype)
    return micro_batch_compute_s(strategy, cfg, a, peak_flops, gpu)[1]


def unit_params(cfg: ModelConfig) -> list[int]:
    """Parameters per FSDP/ZeRO-3 unit: one per transformer block, plus embeddings/norm/head."""
    total = cfg.param_count()
    block = (total - cfg.vocab_params() - cfg.norm_params) // cfg.n_layers
    return [block] * cfg.n_layers + [total - block * cfg.n_layers]


def _buckets(op: str, total_bytes: int, bucket: int, phase: str, per_micro_step: bool = True) -> list[Message]:
    full, rest = divmod(total_bytes, bucket)
    out = [Message(op, bucket, full, phase, per_micro_step=per_micro_step)] if full else []
    return out + ([Message(op, rest, 1, phase, per_micro_step=per_micro_step)] if rest else [])


def ddp_buckets(cfg: ModelConfig, a: StepAssumptions, grads: int) -> list[Message]:
    """torch DDP's all-reduces of one step's ``grads`` bytes, in the order the Reducer issues them.

    Its buckets hold parameters in reverse registration order, so the input embedding (``vocab x width``, the
    first parameter, tied or not) is in the last one, and its gradient is complete only when backward reaches the
    embedding lookup, its very last op: that bucket is all-reduced with no compute left to hide it. An embedding
    larger than ``bucket_cap_mb`` fills that bucket alone (the Reducer closes a bucket once a parameter takes it
    past the cap); the rest go in equal buckets before it. A frozen embedding (LoRA-style) sends nothing.
    """
    embedding = cfg.vocab_size * cfg.d_model * gradient_wire_bytes("ddp", a) if a.trainable_fraction >= 1 else 0
    if embedding <= a.ddp_bucket_bytes or embedding >= grads:
        return _buckets("all_reduce", grads, a.ddp_bucket_bytes, "backward", per_micro_step=False)
    return (_buckets("all_reduce", grads - embedding, a.ddp_bucket_bytes, "backward", per_micro_step=False)
            + [Message("all_reduce", embedding, 1, "backward", per_micro_step=False)])


def deepspeed_overlap_comm(strategy: str, a: StepAssumptions) -> bool:
    """DeepSpeed's ``overlap_comm`` for ``strategy``: the assumption's, else DeepSpeed's default (on for stage 3 only:
    ``DeepSpeedZeroConfig``'s validator sets it to ``stage == 3`` when unset)."""
    if a.overlap_comm is not None:
        return a.overlap_comm
    if a.deepspeed is not None and a.deepspeed.overlap_comm is not None:
        return a.deepspeed.overlap_comm
    return strategy in ("zero3", "zero3_hpz")


def zero_gradient_phase(strategy: str, a: StepAssumptions) -> str:
    """Where DeepSpeed ZeRO-0/1/2 reduce gradients (deepspeed/runtime/engine.py ``allreduce_gradients`` and
    zero/stage_1_and_2.py): stage 0 (``buffered_allreduce_fallback``) and stage 1 (``reduce_gradients``) only at the
    accumulation boundary, after backward has returned (``after_backward``: nothing to hide behind); stage 2 from its
    per-parameter hooks as each bucket fills, in every micro-batch, on a side stream only with ``overlap_comm``
    (``backward``), else on the compute stream, which waits for it (``after_backward``)."""
    if strategy == "zero2" and deepspeed_overlap_comm(strategy, a):
        return "backward"
    return "after_backward"


def messages_for(strategy: str, cfg: ModelConfig, a: StepAssumptions, gpus: int | None = None,
                 shard_group: int | None = None) -> list[Message]:
    """The collectives one step of ``strategy`` issues (see the module docstring).

    ``gpus`` and ``shard_group`` matter to ``hsdp`` only: with ``gpus // shard_group`` above 1 its
    gradient shards are all-reduced across the replica groups; ``shard_group`` None is all ``gpus`` (FSDP's messages).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    e, g = a.comm_bytes, gradient_wire_bytes(strategy, a)
    grads, params = int(cfg.param_count() * a.trainable_fraction) * g, cfg.param_count() * e
    reduce_elements = a.deepspeed.reduce_bucket_elements if a.deepspeed else a.deepspeed_bucket_elements
    gather_elements = a.deepspeed.allgather_bucket_elements if a.deepspeed else a.deepspeed_bucket_elements
    if strategy == "ddp":  # gradients synchronised in the last micro-batch only (no_sync before it)
        return ddp_buckets(cfg, a, grads)
    if strategy == "zero0":
        return _buckets("all_reduce", grads, reduce_elements * g, zero_gradient_phase(strategy, a),
                        per_micro_step=False)
    if strategy in ("zero1", "zero2"):
        return (_buckets("reduce_scatter", grads, reduce_elements * g, zero_gradient_phase(strategy, a),
                         per_micro_step=strategy == "zero2")
                + _buckets("all_gather", params, gather_elements * e, "after_step", per_micro_step=False))
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


def _default_phase(strategy: str, op: str, a: StepAssumptions | None = None) -> str:
    """Where a recorded op the modeled schedule lacks is issued: gradient reductions in backward (DeepSpeed
    ZeRO-0/1/2's where :func:`zero_gradient_phase` puts them), ZeRO-1/2's parameter all-gather after the step, a
    sharded strategy's gathers in forward, the rest after the step."""
    if op in ("all_reduce", "reduce_scatter"):
        if strategy in ("zero0", "zero1", "zero2"):
            return zero_gradient_phase(strategy, a or StepAssumptions())
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
        phases = modeled.get(rec.op) or {(_default_phase(strategy, rec.op, a), False, False): 1}
        total = sum(phases.values())
        for (phase, island, replicas), weight in phases.items():
            calls = max(1, round(rec.calls * weight / total))
            size = max(1, round(rec.size_bytes * weight / total / calls))
            out.append(Message(rec.op, size, calls, phase, island, replicas, per_micro_step=False))  # one step's
    return out


def work_factor(a: StepAssumptions, recomputed: float | None = None) -> float:
    """The step's FLOPs relative to ``6·N`` per token: forward 2, input gradients 2, weight gradients 2 × the
    trainable fraction (frozen weights need none), and the share of a forward that checkpointing computes again (2 ×
    ``recomputed``, :func:`~shardscope.costmodel.memory_peak.recompute_shares`; one whole forward under ``full``)."""
    if recomputed is None:
        if a.checkpointing not in ("none", "full"):
            raise ValueError(f"the recomputed share of {a.checkpointing!r} checkpointing depends on the model: pass it")
        recomputed = 1.0 if a.checkpointing == "full" else 0.0
    return (2 + 2 * recomputed + 2 + 2 * a.trainable_fraction) / 6


def whole_peak_terms(strategy: str, cfg: ModelConfig, gpus: int, a: StepAssumptions,
                     shard_group: int | None = None, capacity_bytes: int | None = None) -> Any:
    """The memory criterion of "fits": :func:`shardscope.costmodel.answer.job_peak`, the one whole-peak function.

    Its default model states are the implementation's (what this code's strategies hold), with
    activations and buffers at ``a.micro_batch`` and the sequence length, in ``a.dtype``, ``a.checkpointing``,
    ``a.trainable_fraction`` and ``a.offload_optimizer`` (``shard_group``: an hsdp shard group or a zero3_hpz
    partition), on the GPU's reserved basis; with ``capacity_bytes`` (the usable memory) the caching allocator's
    cache grows into the room the GPU leaves (:func:`~shardscope.costmodel.memory_peak.with_room`).
    """
    from shardscope.costmodel.answer import job_peak

    return job_peak(strategy, cfg, gpus, a, shard_group, capacity_bytes=capacity_bytes)


def whole_peak_bytes(strategy: str, cfg: ModelConfig, gpus: int, a: StepAssumptions,
                     shard_group: int | None = None, capacity_bytes: int | None = None) -> int:
    """:func:`whole_peak_terms`' peak, as the GPU's allocator reaches it (reserved basis)."""
    return int(whole_peak_terms(strategy, cfg, gpus, a, shard_group, capacity_bytes).peak_bytes)


def phase_comm_times(messages: list[Message] | tuple[Message, ...], collective_time: Callable[[str, int], float],
                     island_time: Callable[[str, int], float] | None = None,
                     replica_time: Callable[[str, int], float] | None = None) -> dict[str, float]:
    """Seconds of communication issued in each phase: a message inside one island timed by ``island_time``, one
    across the replica groups by ``replica_time`` where given, the rest (and those without a timer) by ``collective_time``."""
    per_phase: dict[str, float] = {}
    for m in messages:
        timer = _message_timer(m, collective_time, island_time, replica_time)
        per_phase[m.phase] = per_phase.get(m.phase, 0.0) + m.count * timer(m.op, m.size_bytes)
    return per_phase


def _phase_windows(compute_s: float) -> dict[str, float]:
    return {"forward": compute_s / 3.0, "backward": 2.0 * compute_s / 3.0, "after_backward": 0.0, "after_step": 0.0}


def exposed_comm_s(compute_s: float, per_phase: dict[str, float], overlap: float) -> float:
    """Communication left exposed: each phase's time less what hides behind its compute (forward 1/3, backward 2/3)."""
    windows = _phase_windows(compute_s)
    return sum(t - min(overlap * t, windows[phase]) for phase, t in per_phase.items())


def _message_timer(m: Message, collective_time: Callable[[str, int], float],
                   island_time: Callable[[str, int], float] | None,
                   replica_time: Callable[[str, int], float] | None) -> Callable[[str, int], float]:
    return (island_time if m.island else replica_time if m.replicas else None) or collective_time


def _slices(calls: list[float], k: int) -> list[list[float]]:
    """``calls`` (seconds each, in issue order) spread evenly over ``k`` compute slices."""
    out: list[list[float]] = [[] for _ in range(k)]
    for i, seconds in enumerate(calls):
        out[i * k // len(calls)].append(seconds)
    return out


def pipelined_exposed_s(window_s: float, gathers: list[float], others: list[float]) -> float:
    """Seconds a phase's communication adds to its ``window_s`` of compute, from the schedule that issues it.

    The compute is cut into equal slices, one per unit (or bucket). A gather (``gathers``: parameter all-gathers)
    must finish before its slice starts and is issued when the slice before it starts (FSDP2's and ZeRO-3's
    prefetch of the next unit); a reduction (``others``) is issued when its slice ends (a bucket ready, a unit's
    backward done). One communication stream serves them in issue order. The first gather and the last reduction
    can hide behind nothing; the rest hide behind the neighbouring slices' compute when they are shorter.
    """
    k = max(len(gathers), len(others), 1)
    pre = _slices(gathers, k) if gathers else [[] for _ in range(k)]
    post = _slices(others, k) if others else [[] for _ in range(k)]
    slice_s = window_s / k
    free = sum(pre[0])
    pre_done = free
    clock = 0.0
    for s in range(k):
        start = max(clock, pre_done) if pre[s] else clock
        if s + 1 < k and pre[s + 1]:
            free = max(free, start) + sum(pre[s + 1])
            pre_done = free
        clock = start + slice_s
        if post[s]:
            free = max(free, clock) + sum(post[s])
    return max(clock, free) - window_s


def scheduled_exposed_s(compute_s: float, messages: list[Message] | tuple[Message, ...],
                        time_of: Callable[[Message], float]) -> float:
    """Exposed communication of one micro-batch from each strategy's schedule instead of a fixed overlap share.

    Collectives issued after backward or after the step (:data:`SERIAL_PHASES`) hide behind nothing; those of the
    forward (1/3 of the compute) and the backward (2/3) pass through :func:`pipelined_exposed_s`: DDP's buckets
    hide all but the last bucket while backward runs longer than they do; ZeRO-3/FSDP hide all but the first
    unit's gather and the last unit's reduce-scatter, plus whatever a unit's collectives take beyond its compute.
    """
    windows = _phase_windows(compute_s)
    exposed = 0.0
    for phase in PHASES:
        calls = [(m.op, time_of(m)) for m in messages if m.phase == phase for _ in range(m.count)]
        if not calls:
            continue
        if phase in SERIAL_PHASES:
            exposed += sum(t for _, t in calls)
            continue
        gathers = [t for op, t in calls if op == "all_gather"]
        others = [t for op, t in calls if op != "all_gather"]
        exposed += max(pipelined_exposed_s(windows[phase], gathers, others), 0.0)
    return exposed


def compute_mfu(cfg: ModelConfig, a: StepAssumptions, peak_flops: float, gpu: GpuSpec | None = None) -> float:
    """The share of the peak one micro-batch's matmuls run at: ``a.mfu`` where given or calibrated (then of the whole
    micro-batch), else :func:`matmul_efficiency` at the tokens per micro-batch and the model's width on ``gpu`` (its
    datasheet bandwidth and class; Ampere's curve without one)."""
    if a.mfu is not None:
        return a.mfu
    tokens = a.micro_batch * a.seq_len_for(cfg)
    element = dtype_bytes(a.dtype)
    arch = gpu.arch if gpu is not None else "ampere"
    return matmul_efficiency(tokens, cfg.d_model, peak_flops, gpu.memory_bandwidth_gbps if gpu else None, arch,
                             element)


def dtype_peak_flops(peak_flops: float, dtype: str, gpu: GpuSpec | None) -> float:
    """The peak a ``dtype`` step's matmuls run at on ``gpu``, given its dense 16-bit peak: the fp32 CUDA-core rate
    for a float32 run on a GPU (:func:`~shardscope.contracts.peak_flops.float32_peak_flops`), else ``peak_flops``
    itself (16-bit runs; CPUs, whose peak is measured in the run's own dtype; no GPU named)."""
    if dtype != "float32" or gpu is None or gpu.is_cpu:
        return peak_flops
    return min(peak_flops, float32_peak_flops(gpu.reference_name, peak_flops, gpu.arch))


def modeled_host_calls(strategy: str, cfg: ModelConfig, checkpointing: str = "none") -> int:
    """Python function calls one micro-batch of ``strategy`` makes on ``cfg`` under ``checkpointing``
    (:func:`host_calls_fixed_and_per_block`: fixed + per block)."""
    fixed, per_block = host_calls_fixed_and_per_block(strategy, checkpointing)
    return round(fixed + per_block * cfg.n_layers)


def _comm_exposure(messages: list[Message], compute_s: float, a: StepAssumptions,
                   time_of: Callable[[Message], float]) -> float:
    """Exposed communication of a whole step: ``grad_accum - 1`` micro-batches with their per-micro-batch collectives,
    and the last one with those and the once-per-step ones (DDP's all-reduce, ZeRO-1's reduction, the after-step
    gather)."""
    def exposed(ms: list[Message]) -> float:
        if a.overlap is None:
            return scheduled_exposed_s(compute_s, ms, time_of)
        per_phase: dict[str, float] = {}
        for m in ms:
            per_phase[m.phase] = per_phase.get(m.phase, 0.0) + m.count * time_of(m)
        return exposed_comm_s(compute_s, per_phase, a.overlap)

    every = [m for m in messages if m.per_micro_step]
    return (a.grad_accum - 1) * (exposed(every) if every else 0.0) + exposed(messages)


def predict_step(strategy: str, model: str, cfg: ModelConfig, gpus: int, peak_flops: float,
                 collective_time: Callable[[str, int], float], memory_bytes: int | None,
                 a: StepAssumptions | None = None,
                 recorded: list[RecordedCollective] | tuple[RecordedCollective, ...] | None = None,
                 host_calls: int | None = None, island_time: Callable[[str, int], float] | None = None,
                 shard_group: int | None = None, replica_time: Callable[[str, int], float] | None = None,
                 gpu: GpuSpec | None = None, gpus_per_host: int | None = None) -> StepPrediction:
    """Modeled step of ``strategy`` on ``gpus`` GPUs; ``collective_time(op, size_bytes)`` times one call.

    ``recorded``: the bytes a measured run of the same job moved per step (:func:`recorded_messages`);
    without it, the modeled volumes in the reduce dtype (:func:`messages_for`). ``host_calls``: the
    Python function calls per step such a run recorded, each costing ``a.host_call_s``; None: no host
    term beyond the per-collective-call one (the count is measured, not modeled). ``island_time`` times
    the collectives issued inside one island (zero3_hpz's backward all-gather, hsdp's shard-group ones) and
    ``replica_time`` those across the replica groups (hsdp's all-reduce); default: ``collective_time``.
    ``shard_group`` is an hsdp job's shard group or a zero3_hpz job's partition (its messages and memory).
    ``gpu``: the GPU's spec, for the compute curve (:func:`compute_mfu`). One step is ``a.grad_accum``
    micro-batches of ``a.micro_batch`` sequences; a recorded run's collectives are taken as one step's. The
    optimizer's update runs once per step on the GPU, or on the host with ``a.offload_optimizer="cpu"``, whose
    ``gpus_per_host`` ranks (default: all ``gpus``) share its CPU under DeepSpeed and update side by side under
    torch (:mod:`shardscope.costmodel.optimizer_step`); it is part of the compute time. A DeepSpeed release that
    recounts the backward's parameters in every gradient hook (``a.deepspeed_version``) adds that host time to every
    micro-batch (:func:`~shardscope.costmodel.deepspeed_hooks.hook_recount_s`), beside the frameworks' other host
    work: without a calibration the step is the longer of the GPU's work and the host's.
    """
    if peak_flops <= 0:
        raise ValueError(f"peak FLOP/s must be positive, got {peak_flops}")
    a = a or StepAssumptions()
    seq = a.seq_len_for(cfg)
    tokens = a.micro_batch * seq
    bandwidth = bandwidth_bytes_s(peak_flops, gpu)
    peak_flops = dtype_peak_flops(peak_flops, a.dtype, gpu)
    micro_compute, mfu = micro_batch_compute_s(strategy, cfg, a, peak_flops, gpu, bandwidth)
    element = dtype_bytes(a.dtype)
    update = optimizer_step_s(strategy, cfg, gpus, gpu, dtype=a.dtype, trainable_fraction=a.trainable_fraction,
                              offload=a.offload_optimizer, ranks_per_host=gpus_per_host,
                              grad_bytes=gradient_wire_bytes(strategy, a), param_bytes=element, micro_batches=a.grad_accum,
                              shard_group=shard_group, adamw=a.adamw)
    compute = micro_compute * a.grad_accum + update
    if gpus < 2:
        messages: list[Message] = []
    elif recorded:
        messages = recorded_messages(strategy, cfg, a, recorded, gpus, shard_group)
    else:
        messages = messages_for(strategy, cfg, a, gpus, shard_group)

    def time_of(m: Message) -> float:
        return _message_timer(m, collective_time, island_time, replica_time)(m.op, m.size_bytes)

    exposed_comm = _comm_exposure(messages, micro_compute, a, time_of)
    step_messages = [replace(m, count=m.count * a.grad_accum) if m.per_micro_step else m for m in messages]
    per_phase = phase_comm_times(step_messages, collective_time, island_time, replica_time)
    calls = sum(m.count for m in step_messages)
    if host_calls is not None and host_calls < 0:
        raise ValueError(f"host_calls must be non-negative, got {host_calls}")
    if host_calls is None and a.host_call_s > 0 and gpu is not None:  # advise with a calibration: the modeled count
        host_calls = modeled_host_calls(strategy, cfg, a.checkpointing) * a.grad_accum
    host = calls * a.call_overhead_s + (host_calls or 0) * a.host_call_s
    comm = sum(per_phase.values()) + host
    exposed = min(exposed_comm, sum(per_phase.values())) + host
    on_gpu = gpu is not None and not gpu.is_cpu
    # a DeepSpeed release that recounts the backward's parameters in every gradient hook: host work of its own
    recount = hook_recount_s(strategy, cfg, a.deepspeed_version, a.trainable_fraction) * a.grad_accum if on_gpu else 0.0
    if host == 0 and on_gpu:
        # no calibration, on a GPU: the frameworks' host work (its counted calls and any recount) runs on one Python
        # thread while the GPU works through what it has been given, so it costs the step only where it takes longer
        # than the GPU's compute and exposed communication: the step is the longer of the two
        host_s = modeled_host_calls(strategy, cfg, a.checkpointing) * a.grad_accum * DEFAULT_HOST_CALL_S + recount
        added = max(0.0, host_s - (compute + exposed))
    else:  # a calibrated host term hides behind nothing, and the recount joins it
        added = recount
    host, comm, exposed = host + added, comm + added, exposed + added
    available = int(memory_bytes * a.usable_fraction) if memory_bytes else None
    terms = whole_peak_terms(strategy, cfg, gpus, a, shard_group, available)
    memory = {"total_bytes": terms.peak_bytes}
    fits = None if available is None else terms.fits(available)
    return StepPrediction(strategy=strategy, model=model, param_count=cfg.param_count(), gpus=gpus,
                          step_time_s=compute + exposed, compute_time_s=compute, comm_time_s=comm,
                          exposed_comm_time_s=exposed, memory_total_bytes=int(memory["total_bytes"]),
                          memory_available_bytes=available, fits=fits, tokens_per_step=tokens * gpus * a.grad_accum,
                          messages=tuple(step_messages), host_time_s=host, mfu=mfu,
                          memory_runtime_bytes=terms.runtime_bytes, optimizer_time_s=update,
                          memory_allocated_bytes=terms.allocated_peak_bytes)
