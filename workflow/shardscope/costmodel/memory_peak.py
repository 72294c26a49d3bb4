"""The whole per-GPU peak of one training step, term by term (modeled, torch-free).

One function answers "does it fit?" everywhere (advise, the decision map, the report):
:func:`whole_peak` ``(strategy, model, gpus, seq_len, micro_batch, checkpointing, *, dtype, ...)``
returns every term; ``.peak_bytes`` is the peak and ``.fits(capacity_bytes)`` the verdict.

``peak = model states + max over phases(activations + buffers alive then) + overhead``

Every term is counted from what :class:`shardscope.training.model.GPT` and the strategies in
:mod:`shardscope.training.strategies` keep alive, with ``T = micro_batch x seq_len`` tokens per
GPU, hidden ``h``, KV width ``kv = n_kv_heads x head_dim``, FFN ``f``, vocabulary ``V``, ``a`` heads:

activations (saved for backward, alive when forward returns)
    Per block, fp32: ``4T(6h + 3q + 3kv + 4f + a + 2) + 8·s·head_dim`` bytes (``q = n_heads x head_dim``, the
    queries' width, ``h`` unless the heads say otherwise): the block input and
    the mid-block residual, each RMSNorm's normalised and scaled outputs, rotated q and k, the
    fused KV projection (v is a view of it), the attention output and its re-layout copy, the
    MLP's gate, silu, up and product, one fp32 ``rsqrt`` per norm, the fused kernel's
    log-sum-exp per head, and the rotary cos/sin tables. bf16 under autocast (DDP): the fp32
    residual stream and norms, bf16 casts of each matmul input, and the bf16 copy of every
    weight autocast makes (saved by the matmuls): ``T(24h + 6q + 6kv + 8f + 4a + 8) + 2·W_block``.
    Pure bf16 (DeepSpeed, FSDP's mixed precision): ``T(24h + 6q + 6kv + 8f + 4a + 8)`` (each norm
    upcasts its input twice, and both fp32 copies are saved). The output
    side: the final norm, the head's input and the fp32 log-softmax ``4TV``. Derived by
    listing the tensors and confirmed exactly with the tensor tracker at world size 1.
    A fused norm (torch's LayerNorm, a fused RMSNorm kernel) saves its input and per-token statistics instead of
    the eager RMSNorm's fp32 copies: ``8h`` bytes a token less per block in fp32 and autocast, ``16h`` in bf16
    (LayerNorm's mean 8 bytes a token more), traced the same way.
    Eager attention (``ModelConfig.attention``, Hugging Face's code) adds the float32 softmax of every score, its cast
    and any dropout's mask and output, with k and v repeated to every head (:func:`eager_attention_bytes`);
    SDPA/flash keeps none. Hugging Face's ``gelu_new`` as Python tensor ops (``ModelConfig.activation``
    ``eager_tanh``) keeps three ``T·f`` tensors more than the fused GELU (:func:`eager_activation_bytes`).
    Full checkpointing keeps each block's input and one
    block's activations while that block is recomputed in backward (:func:`activation_bytes`); torchtitan's
    ``selective_op`` keeps beside each input the attention output and every other matmul's
    (:func:`selective_op_saved_bytes`), its ``selective_layer`` checkpoints every second block;
    The blocks' backward also holds a few gradients (:func:`block_backward_temporaries`).
buffers (temporary, by phase)
    forward end: the logits (and their fp32 copy in bf16); FSDP keeps the root's unsharded
    embedding/head and the last block's all-gather output; ``fsdp_grad_op`` keeps every unit unsharded
    plus one gather buffer.
    backward, the head's: the largest of three moments, the log-softmax's backward (the loss's gradient, the
    log-softmax output and the logits' gradient, three ``T·V`` fp32 tensors at once) and two of its matmul's
    backward, the logits' gradient beside its first gradient, or both its gradients with the logits' gradient freed
    (:func:`head_backward`; DeepSpeed's bucket, allocated at the first gradient hook, only
    beside the last); FSDP the root and the last block's gather still unsharded; ZeRO-1/2 the reduce
    bucket; ZeRO-3 what its prefetch fills up to ``stage3_max_live_parameters`` or, where more, every module whose
    next use comes within ``stage3_max_reuse_distance`` of the step's trace (:func:`zero3_gathered_elements`; 1e9
    elements each by default) still gathered, plus the bucket; inside the blocks ZeRO-3 has released the head's and the
    final norm's (:func:`zero3_released_before_blocks`) and its prefetch refills the live limit
    (:func:`zero3_gathered_in_blocks`). The bucket is ``reduce_bucket_size`` elements as the run
    configures DeepSpeed (:func:`shardscope.contracts.fairness.deepspeed_bucket_elements`: 5e8 by
    default, 25 MiB under ``--buckets equal``), allocated whole however small the model
    (DeepSpeed's ``torch.empty(reduce_bucket_size)``: 2 GB in fp32 for the tiny model too);
    ZeRO-1/2 allocate it in the model's dtype (two with ``overlap_comm``, off by default for
    stages 1-2), ZeRO-3 one in the reduction dtype (:func:`zero_reduce_bucket`).
    backward, inside the blocks (the output side's activations gone): the largest moment of
    an MLP's backward, its gradients and the activations it has freed
    (:func:`block_backward_temporaries`); FSDP, in the block that peaks, the root unsharded with
    its head/norm gradients, the block unsharded, the next block's prefetched gather and the
    previous block's reduce-scatter input (:func:`fsdp_backward_blocks`); ZeRO-1 the full gradients so far, which stage 1 keeps until the end of backward
    (:func:`zero1_backward`). backward, at its end (ZeRO-2/3 when one bucket holds every
    gradient, as DeepSpeed's default 5e8 elements do for models below 5e8 parameters, reduced
    only then): ZeRO-2 every gradient whole beside the bucket, ZeRO-3 the reduce-scatter's
    model-sized copies and the still-gathered embedding (:func:`zero3_backward_end`), no
    activations left.
    step: the optimizer's temporaries (see :func:`step_temporaries`).
    every phase, DDP on more than one GPU as torch builds it by default: its all-reduce buckets, a second copy of the
    trainable gradients (:data:`DDP_BUCKET_VIEW_DEFAULT`; none under ``gradient_as_bucket_view``, as the worker runs).
HSDP (``hsdp``, a shard group of ``g`` GPUs)
    FSDP inside each group, replicas across groups: model states sharded ``g`` ways, FSDP's
    buffers (:func:`hsdp_shard_group`).
ZeRO-3 with hpZ (``zero3_hpz``, a secondary partition over ``p`` GPUs)
    ZeRO-3's states and buffers, plus the secondary parameter partition, alive through the
    whole step: the parameters in the training dtype over ``p`` GPUs
    (:func:`shardscope.costmodel.memory_model.hpz_secondary_bytes`).
overhead and basis
    ``allocated`` (the CPU tracker, ``torch.cuda.max_memory_allocated``): the terms above, plus a fraction
    *calibrated* from a measured run where one is given (:func:`calibrate_overhead`). ``reserved`` (the default on a
    GPU: the peak as the caching allocator reaches it): the allocator's reserve over that
    (:data:`ALLOCATOR_RESERVE_FRACTION`, from published traces; a calibrated fraction replaces it), and beside the peak,
    outside the allocator, the CUDA context and NCCL's buffers (:func:`gpu_runtime_bytes`): ``device_bytes``, what
    nvidia-smi shows, is what must fit the GPU (:meth:`PeakTerms.fits`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from shardscope.contracts.models import ATTENTION_KINDS, ModelConfig
from shardscope.contracts.names import CHECKPOINTING_MODES, SELECTIVE_LAYER_EVERY, STRATEGIES
from shardscope.contracts.fairness import FairSettings, deepspeed_bucket_elements, dtype_bytes
from shardscope.contracts.strategies import OFFLOAD_HOLDS, SHARDED, uses_deepspeed
from shardscope.costmodel.deepspeed_config import ZERO3_SUB_GROUP_ELEMENTS, DeepSpeedKnobs
from shardscope.costmodel.deepspeed_estimate import largest_layer_params
from shardscope.costmodel.optimizer_step import adamw_implementation, check_adamw

#: Strategies the memory model answers for: the worker's, HSDP (shard inside a group of
#: ``shard_group`` GPUs, replicate across groups) and ZeRO-3 with hpZ (secondary partition over ``shard_group``).
MODELED_STRATEGIES = STRATEGIES
ATTENTION_KERNELS = ATTENTION_KINDS
CHECKPOINTING = CHECKPOINTING_MODES
OPTIMIZERS = ("adamw", "adamw_bf16", "adamw_bf16_states", "adamw_8bit")
OFFLOAD = ("none", "cpu")
#: Bases a modeled peak can be stated on: ``allocated`` (tensors alive: ``torch.cuda.max_memory_allocated``, the CPU
#: tracker), ``reserved`` (what the caching allocator holds: ``torch.cuda.max_memory_reserved``), and the device's
#: whole use (``nvidia-smi``: reserved plus the CUDA context and NCCL's buffers, :attr:`PeakTerms.device_bytes`).
BASES = ("allocated", "reserved")
#: A training process's device memory outside the caching allocator besides NCCL: the CUDA context with the kernels
#: of the libraries a step loads (cuBLAS, cuDNN, attention) and their own workspaces. PyTorch's OOM message states it
#: ("Including non-PyTorch memory, this process has X in use" less reserved): 78.09 - 75.31 - 1.83 = 0.95 GiB
#: (vllm-project/compressed-tensors#587, one GPU) and 22.27 - 14.73 - 6.39 = 1.15 GiB (kohya-ss/sd-scripts#2029,
#: training on one GPU); the smaller is taken. A one-kernel script's context alone is 287 MB with lazy loading,
#: 667 MB without (pytorch/pytorch#86509), "around 400MB" (pytorch/pytorch#109888). nvidia-smi sees it, reserved
#: does not.
CUDA_CONTEXT_BYTES = int(0.95 * 2**30)
#: NCCL's buffers per connection at its defaults (src/init.cc): LL ``8 lines x 512 threads x 8 steps x 16 B`` =
#: 524,288, LL128 ``120 x 640 x 8 x 8 B`` = 4,915,200, Simple ``NCCL_BUFFSIZE`` = 4 MiB; one connection to each ring
#: neighbour per channel, allocated with cudaMalloc outside PyTorch's allocator.
NCCL_CONNECTION_BYTES = 524_288 + 4_915_200 + 4 * 2**20
#: Channels NCCL opens per communicator: ``MAXCHANNELS`` = 32 (src/include/device.h), what it builds on NVLink
#: nodes; PCIe nodes build fewer (``nccl_channels`` of :func:`predict_peak`), so this is an upper bound there.
NCCL_DEFAULT_CHANNELS = 32
#: The caching allocator's reserve over its allocated peak (rounding to 2 MiB blocks and 20 MiB segments,
#: fragmentation): the largest of three published LLM traces that log both, max cached / max allocated
#: = 9382 / 9039 MiB (microsoft/onnxruntime#19620), 26406 / 26215 MiB (microsoft/onnxruntime#16213), and reserved
#: but unallocated 1.83 of 75.31 GiB allocated at an OOM (vllm-project/compressed-tensors#587). Workloads whose
#: shapes vary step to step fragment far more (6.39 of 14.73 GiB, kohya-ss/sd-scripts#2029); a fixed-shape training
#: step is what is modeled. Other fixed-shape traces spread widely and are not used: FSDP1 LoRA on Llama-2-7B, peak
#: reserved over peak active 1.26-1.35 (meta-llama/llama-cookbook#41, three settings); DeepSpeed ZeRO-2 with offload
#: in 2022, reserved over max allocated 1.15 and 1.26 (deepspeedai/DeepSpeed#522); a 2025 DeepSpeed ZeRO-2 run
#: 1.006-1.019 (TensorAuto/OpenTau#273). Near a full GPU the allocator frees its unused cache and retries before it
#: fails, so a run that fits keeps only the fragmentation inside its live segments (the OOM trace above).
ALLOCATOR_RESERVE_FRACTION = 9382 / 9039 - 1
#: The caching allocator's reserved peak over its allocated peak where the GPU has room to spare: freed blocks stay
#: cached for reuse and blocks of one size do not serve another, so a training process holds more than its tensors
#: until an allocation finds no free memory, when PyTorch frees its unused cache and retries before it fails. The
#: median of the six published training traces, one figure per source (max reserved over max allocated unless said):
#: 1.012 (TensorAuto/OpenTau#273, DeepSpeed ZeRO-2, the middle of 1.006-1.019), 1.022 (onnxruntime's two LLM traces
#: above), 1.149 (17.354 / 15.098 GiB, ecmwf/WeatherGenerator#2628, step 280), 1.205 (deepspeedai/DeepSpeed#522: 1.15
#: and 1.26), 1.208 (93 / 77 GiB, meta-pytorch/torchrec#4584's baseline), 1.30 (peak reserved over peak active,
#: meta-llama/llama-cookbook#41: 1.26-1.35): (1.149 + 1.205) / 2. Two more traces are left out because their
#: workloads are not stated, so they need not be training steps, what this models: 1.030 (14766 / 14341 MB,
#: pytorch/pytorch#44742's memory summary) and 1.113 (16726 / 15006 and 19354 / 17402 MB, pytorch/pytorch#40989);
#: with them the median of eight was 1.131. A peak reported where the GPU's memory is known grows to it, within what
#: the GPU leaves (:func:`with_room`); "fits" keeps :data:`ALLOCATOR_RESERVE_FRACTION`, the fragmentation that
#: remains at the retry.
ALLOCATOR_CACHE_FRACTION = (1.149 + 1.205) / 2 - 1
#: torch DDP's default (``gradient_as_bucket_view=False``): the reducer allocates its all-reduce buckets when DDP is
#: built, flat tensors as large as every gradient together, and copies each gradient into them, so the gradients are
#: held twice for the whole run. With ``gradient_as_bucket_view=True`` (this project's worker) the gradients are views
#: of the buckets: "peak memory dropped ~1GB (8250MB-7183MB)" for a model of ~1 GB of parameters (pytorch/pytorch
#: #41954, the change that made the option; the saving is the gradients' size, as torch's DDP documentation says).
DDP_BUCKET_VIEW_DEFAULT = False


@dataclass(frozen=True)
class StepShape:
    """What one step of one GPU computes on: the shape of its activations."""

    micro_batch: int
    seq_len: int
    dtype: str = "float32"
    attention: str = "sdpa"
    checkpointing: str = "none"
    cast_share: float = 1.0
    """Share of the weights held in fp32 that autocast casts to bf16 and caches for the forward (its weight-cast
    cache): all of them when every weight trains; the trainable share when frozen weights are held in 16 bits and
    need no cast (LoRA-style, :func:`shardscope.costmodel.answer.trainable_states`)."""

    def __post_init__(self) -> None:
        if not 0 < self.cast_share <= 1:
            raise ValueError(f"cast share must be in (0, 1], got {self.cast_share!r}")
        for name in ("micro_batch", "seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"dtype must be float32 or bfloat16, got {self.dtype!r}")
        if self.attention not in ATTENTION_KERNELS:
            raise ValueError(f"attention kernel must be one of {', '.join(ATTENTION_KERNELS)}, got {self.attention!r}")
        if self.checkpointing not in CHECKPOINTING:
            raise ValueError(f"activation checkpointing must be one of {', '.join(CHECKPOINTING)}, got {self.checkpointing!r}")

    @property
    def tokens(self) -> int:
        """Tokens per GPU per micro-batch."""
        return self.micro_batch * self.seq_len

    @property
    def frozen_weights(self) -> bool:
        """The base weights are frozen (a trainable share below 1; LoRA-style: small adapters train on the
        attention's input projections): a frozen matmul computes no weight gradient, so autograd saves none of its
        inputs for one (:func:`frozen_saved`), and weights frozen in 16 bits make the whole block compute in 16 bits
        (:func:`compute_policy`)."""
        return self.cast_share < 1


def compute_policy(strategy: str, dtype: str, frozen_weights: bool = False) -> str:
    """How a strategy computes in ``dtype``: ``fp32``, ``autocast`` (DDP: fp32 weights, bf16 matmuls) or ``bf16``.

    Frozen weights held in 16 bits (LoRA-style) make DDP's autocast a 16-bit model: the embedding's output, and so
    the residual stream and every norm's output, are bf16 (LitGPT's ``bf16-true``, PEFT over a bf16 base)."""
    if dtype == "float32":
        return "fp32"
    return "autocast" if strategy == "ddp" and not frozen_weights else "bf16"


def frozen_saved(cfg: ModelConfig, shape: StepShape, policy: str) -> int:
    """Bytes per block that frozen weights do not save: the inputs autograd keeps only for weight gradients.

    Traced with ``torch.autograd.graph.saved_tensors_hooks`` on this project's block (all weights frozen, an
    adapter on the query projection), SwiGLU and GELU, fp32 and bf16: the two norms' normalized inputs (saved for
    their gains' gradients), the output projection's input (the attention output's contiguous copy) and the MLP's
    input and down projection's input (SwiGLU's product, GELU's output): three ``T x h`` tensors, one ``T x q``
    (the queries' width) and one ``T x d_ff``. The attention's normed input stays, saved by the adapter; the adapters'
    own rank-sized outputs (a few elements per token) are not counted. A fused LayerNorm saves its input for its
    input's gradient whatever trains, so under it the norms' two are saved still. 0 unless ``shape.frozen_weights``.
    """
    if not shape.frozen_weights:
        return 0
    e = 4 if policy == "fp32" else 2
    widths = (1 if cfg.fused_norm else 3) * cfg.d_model  # a fused norm saves its input for its input's grad
    return shape.tokens * e * (widths + cfg.q_dim + cfg.token_mlp_width)


def block_weights(cfg: ModelConfig) -> int:
    """Matmul weights of one block (the RMSNorm gains excluded)."""
    return cfg.block_matmul_params()


def block_params(cfg: ModelConfig) -> int:
    """Parameters of one block: its matmuls and two norms (gains, and LayerNorm's biases)."""
    return block_weights(cfg) + 2 * cfg.norm_params


def root_params(cfg: ModelConfig) -> int:
    """Parameters outside the blocks: embedding, head (unless tied) and the final norm."""
    return cfg.param_count() - cfg.n_layers * block_params(cfg)


def _cast_cache(cfg: ModelConfig, shape: StepShape) -> int:
    """Bytes of one block's bf16 weight copies in autocast's cast cache (the fp32 weights' share that is cast)."""
    return int(2 * block_weights(cfg) * shape.cast_share)


def eager_attention_bytes(cfg: ModelConfig, shape: StepShape, policy: str, device: str = "gpu") -> int:
    """Bytes one block's eager attention (:func:`shardscope.training.model.eager_attention`, Hugging Face's code) keeps
    beyond what the fused kernel's terms of :func:`block_activation_bytes` count.

    Per score element (``T·a·s`` of them): the float32 softmax output and its cast back to the compute dtype (4, or
    4 + 2 in 16 bits); with attention dropout in training, the dropped probabilities and the mask (a bool on a GPU,
    torch's fused kernel; the compute dtype on a CPU, whose dropout multiplies by a noise tensor) in place of the
    freed cast. Beside them the repeated keys and values the two matmuls keep (``2·e·T·q``) replace what the fused
    kernel kept and eager does not: its output, its log-sum-exp and its copies of the keys and values
    (``e·T·(q + 3·kv) + 4·T·a``). Traced with the tensor tracker on seven shapes (MHA, GQA, MQA, wide heads), three
    precisions, with and without dropout (``tests/training/test_memory_peak.py``)."""
    t, s, a, q = shape.tokens, shape.seq_len, cfg.n_heads, cfg.q_dim
    kv = cfg.n_kv_heads * cfg.head_dim
    e = 4 if policy == "fp32" else 2
    cast = 0 if e == 4 else e
    per_score = 4 + cast
    if cfg.attention_dropout > 0:
        per_score += (1 if device == "gpu" else e) + e - cast
    return t * a * s * per_score + 2 * e * t * q - e * t * (q + 3 * kv) - 4 * t * a


def block_activation_bytes(cfg: ModelConfig, shape: StepShape, policy: str, device: str = "gpu") -> int:
    """Bytes one block saves for backward (see the module docstring for the list). Three of the width-sized tensors
    are the queries' width ``q = n_heads x head_dim`` (the rotated queries, the attention output and its re-layout
    copy), which is the width unless the model's heads say otherwise (``head_size``)."""
    t, s = shape.tokens, shape.seq_len
    h, f, a, hd, q = cfg.d_model, cfg.token_mlp_width, cfg.n_heads, cfg.head_dim, cfg.q_dim
    kv = cfg.n_kv_heads * hd
    # the MLP's T x d_ff tensors saved: SwiGLU's gate, up, silu and product; GELU's up and gelu outputs. Under
    # autocast each input matmul of the MLP saves its own bf16 copy of the (fp32) normed input: two, or one.
    hidden, input_casts = (4, 2) if cfg.mlp == "swiglu" else (2, 1)
    if policy == "fp32":
        out, e = 4 * t * (6 * h + 3 * q + 3 * kv + hidden * f + a + 2) + 2 * 2 * s * (hd // 2) * 4, 4
    elif policy == "autocast":
        out = t * ((20 + 2 * input_casts) * h + 6 * q + 6 * kv + 2 * hidden * f + 4 * a + 8) + 2 * 2 * s * (hd // 2) * 2
        out, e = out + _cast_cache(cfg, shape), 2
    else:
        out, e = t * (24 * h + 6 * q + 6 * kv + 2 * hidden * f + 4 * a + 8) + 2 * 2 * s * (hd // 2) * 2, 2
    out -= 2 * t * fused_norm_saves_less(cfg, policy)  # the block's two norms
    if shape.attention == "eager" or cfg.attention == "eager":
        out += eager_attention_bytes(cfg, shape, policy, device)
    out += expert_dispatch_bytes(cfg, shape, policy)
    return out + eager_activation_bytes(cfg, shape, policy, device) - frozen_saved(cfg, shape, policy)


def expert_dispatch_bytes(cfg: ModelConfig, shape: StepShape, policy: str) -> int:
    """Bytes a mixture-of-experts block saves beyond a dense block of its routed width (:attr:`~shardscope.contracts.
    models.ModelConfig.token_mlp_width`) when it routes as Hugging Face's Mixtral code does (traced with autograd's
    saved-tensor hooks in ``tests/training/test_expert_activations.py``, every policy, exactly). Per token, the
    router's float32 softmax (4 bytes per expert), its top-k indices (8 per routed expert) and the renormalising
    division's operands (4 per routed expert and 4). Per routed token, ``torch.where``'s index pair (16), its routing
    weight, and three copies of its hidden state: the expert's gathered input (under autocast, each of the expert's
    input matmuls' bf16 cast of it instead, the router keeping one cast where a dense MLP keeps its own), the
    expert's output (kept by the product with the weight) and that product (kept by ``index_add_``). 0 for a dense
    block."""
    if not cfg.experts:
        return 0
    h, k = cfg.d_model, cfg.experts_per_token
    router = 4 * cfg.experts + 12 * k + 4
    if policy == "fp32":
        routed = 16 + 4 + 3 * h * 4
    elif policy == "bf16":
        routed = 16 + 2 + 3 * h * 2
    else:  # autocast: bf16 casts of the gathered input and a bf16 output, promoted to fp32 by the fp32 weight
        casts = 2 if cfg.mlp == "swiglu" else 1
        routed = 16 + 4 + casts * h * 2 + h * 2 + h * 4
        router -= (casts - 1) * h * 2
    return shape.tokens * (router + k * routed)


def eager_activation_bytes(cfg: ModelConfig, shape: StepShape, policy: str, device: str = "gpu") -> int:
    """Bytes one block's eager tanh GELU (``ModelConfig.activation``: Hugging Face's ``gelu_new``,
    :func:`shardscope.training.model.eager_tanh_gelu`) keeps beyond torch's fused kernel, which saves only its input.

    Autograd keeps, per MLP element, ``pow``'s input, ``tanh``'s output and the two factors of the last product
    (``0.5·x`` and ``1 + tanh(...)``), where the fused kernel keeps the input alone: three more ``T·f`` tensors, 12 bytes
    in fp32 and 6 in bf16 (traced with the tensor tracker). Under autocast on a GPU ``pow`` is one of the ops CUDA's
    autocast runs in fp32, so its input is saved as an fp32 copy and everything after it up to the last product is
    fp32 (``tanh``'s output, ``1 + tanh``), with only ``0.5·x`` in bf16: 16 bytes kept against the fused kernel's 4,
    12 more (derived from torch.amp's op reference, whose "CUDA Ops that can autocast to float32" list names ``pow``;
    not traced: CPU autocast keeps ``pow`` in bf16, 6 more, as traced).
    0 for the fused kernel."""
    if cfg.activation != "eager_tanh":
        return 0
    per_element = 12 if policy == "fp32" or (policy == "autocast" and device == "gpu") else 6
    return per_element * shape.tokens * cfg.token_mlp_width


def fused_norm_saves_less(cfg: ModelConfig, policy: str) -> int:
    """Bytes a token that one fused norm (torch's LayerNorm, a fused RMSNorm kernel) saves for backward fewer than
    the eager RMSNorm, which keeps fp32 copies where a fused norm keeps its input and per-token statistics: one
    ``h``-wide fp32 tensor in fp32 and autocast (less LayerNorm's 4-byte mean beside its rstd), two bf16-sized ones
    in bf16; traced with ``saved_tensors_hooks`` and the tensor tracker as the RMSNorm terms are. 0 for the eager
    RMSNorm."""
    if not cfg.fused_norm:
        return 0
    if policy == "bf16":
        return 8 * cfg.d_model
    return 4 * cfg.d_model - (4 if cfg.norm == "layernorm" else 0)


def head_activation_bytes(cfg: ModelConfig, shape: StepShape, policy: str) -> int:
    """Bytes the output side saves: final norm, head input, fp32 log-softmax, targets and token ids."""
    t, h, v = shape.tokens, cfg.d_model, cfg.head_outputs
    ids = 8 * t + 8 * shape.micro_batch * (shape.seq_len + 1)
    fused = t * fused_norm_saves_less(cfg, policy)  # the final norm
    if policy == "fp32":
        return 4 * t * (3 * h + 1 + v) + ids - fused
    if policy == "autocast":
        return t * (10 * h + 4 + 4 * v) + int(2 * h * v * shape.cast_share) + ids - fused
    return t * (12 * h + 4 + 4 * v) + ids - fused


def residual_bytes(shape: StepShape, cfg: ModelConfig, policy: str) -> int:
    """One block's input, all that full checkpointing keeps of it."""
    return shape.tokens * cfg.d_model * (2 if policy == "bf16" else 4)


#: Under full checkpointing, block inputs beside one recomputed block, beyond ``per_block``, in units of one
#: block input (measured with the tensor tracker at world size 1, both test shapes): fp32 -1 (the block
#: input is one of ``per_block``'s tensors and also the saved checkpoint input), autocast 0, bf16 +1 (the
#: mid-block residual, held by the recompute's frame though nothing saves it).
RECOMPUTE_EXTRA_INPUTS = {"fp32": -1, "autocast": 0, "bf16": 1}
#: The same under a fused norm (LayerNorm or a fused RMSNorm; traced likewise): it saves the mid-block residual itself
#: (its input), so the bf16 block holds no extra copy of it and its own saved input counts once: -1.
RECOMPUTE_EXTRA_INPUTS_FUSED_NORM = {"fp32": -1, "autocast": 0, "bf16": -1}


def block_matmul_widths(cfg: ModelConfig) -> list[int]:
    """Output widths of one block's matmuls in the order its forward runs them: queries, the fused key/value
    projection, the attention's output projection, then the MLP's (SwiGLU's gate, up and down; GELU's up and down)."""
    kv = cfg.n_kv_heads * cfg.head_dim
    f = cfg.token_mlp_width
    mlp = [f, f, cfg.d_model] if cfg.mlp == "swiglu" else [f, cfg.d_model]
    return [cfg.q_dim, 2 * kv, cfg.d_model, *mlp]


def selective_op_saved_bytes(cfg: ModelConfig, shape: StepShape, policy: str) -> int:
    """Bytes one block keeps beyond its input under ``selective_op``: the first, third, ... matmul's output, and the
    attention kernel's output with its fp32 log-sum-exp (traced with the tensor tracker on five shapes, each policy)."""
    e = 4 if policy == "fp32" else 2
    kept_matmuls = sum(block_matmul_widths(cfg)[0::2])
    return shape.tokens * (e * (kept_matmuls + cfg.q_dim) + 4 * cfg.n_heads)


def block_matmul_inputs(cfg: ModelConfig) -> list[int]:
    """Input widths of one block's matmuls, in the order of :func:`block_matmul_widths`."""
    return [cfg.d_model, cfg.d_model, cfg.q_dim, *([cfg.d_model] * (cfg.mlp_matrices - 1)), cfg.token_mlp_width]


def check_checkpointing(cfg: ModelConfig, mode: str, attention: str = "sdpa") -> None:
    """ValueError for ``selective_op`` beside eager attention: torchtitan's policy keeps the fused kernel's outputs;
    eager attention's matmuls are batched ones it neither counts nor keeps, a combination not traced here."""
    if mode == "selective_op" and "eager" in (cfg.attention, attention):
        raise ValueError("selective_op checkpointing keeps the fused attention kernel's outputs; with eager attention "
                         "it is not modeled: use sdpa attention, or full or selective_layer checkpointing")


def recomputed_flops_per_token(cfg: ModelConfig, mode: str, seq_len: int) -> tuple[float, float]:
    """(matmul, attention) FLOPs per token that backward computes again under checkpointing ``mode``.

    torch's non-reentrant checkpoint stops a recompute once the last tensor backward needs is saved (``early_stop``),
    so a block's last matmul (its MLP's down projection) is not run again when its output is not kept: nothing saves
    the block's output. ``full`` and ``selective_layer`` recompute each wrapped block's other matmuls and its attention;
    ``selective_op`` the matmuls it did not keep (the second, fourth, ..., less the last) and no attention (kept).
    Counted with ``FlopCounterMode`` on the worker's steps (``tests/training/test_memory_peak.py``)."""
    check_checkpointing(cfg, mode)
    widths, inputs = block_matmul_widths(cfg), block_matmul_inputs(cfg)
    macs = [i * o for i, o in zip(inputs, widths)]
    if mode == "selective_op":
        unkept = macs[1::2]
        if len(macs) % 2 == 0:  # the last matmul is unkept and, its output unused, never recomputed
            unkept = unkept[:-1]
        return 2.0 * cfg.n_layers * sum(unkept), 0.0
    wrapped = sum(_checkpointed_blocks(cfg, mode))
    return 2.0 * wrapped * sum(macs[:-1]), 4.0 * wrapped * cfg.q_dim * seq_len


def recompute_shares(cfg: ModelConfig, mode: str, seq_len: int) -> tuple[float, float]:
    """(FLOPs, other) shares of one forward that backward computes again under checkpointing ``mode``: of its FLOPs
    (:func:`recomputed_flops_per_token` over :meth:`ModelConfig.flops_per_token`'s forward third, the head's
    included) and of its blocks' other ops' traffic (every wrapped block's: ``selective_op`` keeps matmuls only)."""
    matmul, attention = recomputed_flops_per_token(cfg, mode, seq_len)
    return (matmul + attention) / (cfg.flops_per_token(seq_len) / 3), sum(_checkpointed_blocks(cfg, mode)) / cfg.n_layers


def _checkpointed_blocks(cfg: ModelConfig, mode: str) -> list[bool]:
    """Which blocks, in forward order, a checkpoint wraps (``selective_op`` wraps every block, keeping more of each)."""
    if mode == "none":
        return [False] * cfg.n_layers
    if mode == "selective_layer":
        return [(i + 1) % SELECTIVE_LAYER_EVERY == 0 for i in range(cfg.n_layers)]
    return [True] * cfg.n_layers


def activation_bytes(cfg: ModelConfig, shape: StepShape, policy: str, device: str = "gpu") -> dict[str, int]:
    """Activations: ``total`` alive when forward returns, ``blocks`` inside the blocks' backward, ``peak`` the larger;
    ``in_block_backward[j]`` what is alive while the ``j``-th block of the backward (``j = 0`` the model's last)
    runs its backward, its recompute included.

    Without checkpointing every block keeps ``per_block`` until its backward. With ``full``
    checkpointing forward keeps each block's input (and, under autocast, the bf16 weight copies
    autocast caches until its region ends: ``2·W_block`` per block), and backward recomputes one
    block at a time: every block input still alive plus one block's activations
    (:data:`RECOMPUTE_EXTRA_INPUTS`). ``selective_op`` keeps, beside each input, what
    :func:`selective_op_saved_bytes` says, and its recompute makes the rest of one block (and holds the block's MLP
    output when the block's last matmul is kept: an odd number of them). ``selective_layer`` checkpoints every second
    block as ``full`` does and keeps the others whole. Each traced with the tensor tracker at world size 1.
    """
    check_checkpointing(cfg, shape.checkpointing, shape.attention)
    per_block = block_activation_bytes(cfg, shape, policy, device)
    head = head_activation_bytes(cfg, shape, policy)
    layers, mode = cfg.n_layers, shape.checkpointing
    kept = residual_bytes(shape, cfg, policy)
    cache = _cast_cache(cfg, shape) if policy == "autocast" else 0
    extra = (RECOMPUTE_EXTRA_INPUTS_FUSED_NORM if cfg.fused_norm else RECOMPUTE_EXTRA_INPUTS)[policy]
    if mode == "selective_op":
        saved = selective_op_saved_bytes(cfg, shape, policy)
        # a kept last matmul (an odd number of them) leaves its output, the block's MLP output, alive in the recompute
        last_kept = len(block_matmul_widths(cfg)) % 2 * shape.tokens * cfg.d_model * (4 if policy == "fp32" else 2)
        stored, recomputed = kept + saved, per_block - saved + extra * kept + last_kept
    else:
        stored, recomputed = kept, per_block + extra * kept
    wrapped = _checkpointed_blocks(cfg, mode)
    # forward end: a wrapped block keeps what it stores (and autocast's cast cache until the region ends), the others
    # all they save; backward of block i: the blocks before it as forward left them, and block i whole (recomputed)
    held = [stored if w else per_block for w in wrapped]
    forward_end = sum(stored + cache if w else per_block for w in wrapped) + head
    head_backward = sum(held) + head  # autocast's cache is gone once forward's autocast region ends
    in_block = [sum(held[:i]) + (stored + recomputed if w else per_block) for i, w in enumerate(wrapped)][::-1]
    blocks = max(in_block)
    return {"blocks": blocks, "head": head, "total": forward_end, "head_backward": head_backward,
            "peak": max(forward_end, blocks), "per_block": per_block, "in_block_backward": in_block,
            "recomputed": recomputed if any(wrapped) else 0}


def mlp_backward_moments(cfg: ModelConfig, shape: StepShape, policy: str, input_grad_first: bool = False,
                         device: str = "gpu") -> list[dict[str, int]]:
    """The largest moments inside one block's MLP backward, between operators, in time order.

    Traced operator by operator with the tensor tracker, which counts an operator's outputs beside the inputs it
    releases (world size 1, fp32 and autocast, the shapes of ``tests/training/test_memory_peak.py``; SwiGLU
    ``down(silu(gate(x)) * up(x))`` and GELU ``down(gelu(up(x)))``). The gradient flowing into the block (``T·h``, the
    residual's dtype) is alive throughout. torch's matmul backward makes a weight's gradient before its input's;
    DeepSpeed ZeRO-3's own linear (``zero3_linear_wrap``) the input's first (``input_grad_first``). The moments, each
    with the weight gradients alive if the strategy keeps them (``weight_grads_kept``: FSDP until the block's
    reduce-scatter, ZeRO-1 until the end of backward) or only until their ``AccumulateGrad`` copies them away
    (``weight_grads_transient``: DDP's buckets, ZeRO-2/3's), the activations' gradients, and the block's activations
    ``freed`` by then:

    ``down_weight_grad`` (torch) or ``product_grad`` (ZeRO-3): ``down``'s first output made; ``down_done``: the
    gradient of ``down``'s input (``T·f``) made beside ``down``'s weight gradient, with the input (the product, or
    GELU's output) still alive, since ``down`` frees what it saved only once it returns (under autocast beside a
    bf16 copy of the flowing gradient and the weight's bf16 gradient, cast to fp32 after). SwiGLU: ``product_grads``:
    the product's backward makes the gradients of silu's and up's outputs (two ``T·f``) beside the product's gradient,
    the product (and under autocast ``down``'s bf16 weight copy) freed; ``gate_weight_grad`` and ``gate_input_grad``:
    all three weight gradients made, the gradient of ``up``'s input (``T·h``) and of ``gate``'s output (``T·f``)
    alive, then ``gate``'s input's gradient beside them, gate's, up's, silu's outputs and the product freed (4
    ``T·f``). GELU: ``gelu_grad``: GELU's backward makes the gradient of up's output beside the gradient of its own,
    GELU's output freed; ``up_grads``: up's gradients, with GELU's input freed as well. The eager tanh GELU
    (``ModelConfig.activation``, :func:`eager_activation_bytes`) peaks instead at ``product_grads``: its last
    product's backward makes the gradients of both its factors beside the product's gradient, the product (``down``'s
    input) freed and the factors still saved (traced, fp32 and bf16, on the tracker's live set at the peak); under
    autocast on a GPU the product and its ``1 + tanh`` factor are fp32 and ``0.5·x`` bf16, so those gradients are 4, 4
    and 2 bytes (derived: see :func:`eager_activation_bytes`); by ``up_grads`` its intermediates are freed too.
    """
    t, h, f = shape.tokens, cfg.d_model, cfg.token_mlp_width
    e_act = 4 if policy == "fp32" else 2  # matmul and SwiGLU outputs (bf16 under autocast too)
    e_residual = 2 if policy == "bf16" else 4
    e_grad = 4 if policy in ("fp32", "autocast") else 2
    flowing, hidden, weight = t * h * e_residual, t * f * e_act, h * f * e_grad
    # down's saved input (SwiGLU's product, GELU's output); frozen weights: no weight gradients, and it was never saved
    # (:func:`frozen_saved`), so not freed
    down_input = 0 if shape.frozen_weights else hidden
    weight = 0 if shape.frozen_weights else weight
    first = ({"weight_grads_kept": 0, "weight_grads_transient": 0, "activation_grads": flowing + hidden, "freed": 0}
             if input_grad_first else
             {"weight_grads_kept": weight, "weight_grads_transient": weight, "activation_grads": flowing, "freed": 0})
    # under autocast down's matmul ran in bf16: its input's gradient is made beside a bf16 copy of the flowing one and
    # its weight's bf16 gradient (cast to fp32 after), and its bf16 weight copy, saved for it, is freed with the product
    autocast = policy == "autocast"
    bf16_weight = h * f * 2 if autocast else 0  # down's bf16 weight copy, and its weight's bf16 gradient
    down_done = {"weight_grads_kept": weight,
                 "weight_grads_transient": bf16_weight if bf16_weight and weight else weight,
                 "activation_grads": flowing + hidden + (t * h * 2 if autocast else 0), "freed": 0}
    if cfg.mlp != "swiglu" and cfg.activation == "eager_tanh":  # the last product's backward, then up's gradients
        grads = t * f * (10 if autocast and device == "gpu" else 3 * e_act)
        return [first, down_done,
                {"weight_grads_kept": weight, "weight_grads_transient": 0, "activation_grads": flowing + grads,
                 "freed": down_input},
                {"weight_grads_kept": 2 * weight, "weight_grads_transient": weight,
                 "activation_grads": flowing + hidden + t * h * e_act,
                 "freed": hidden + down_input + eager_activation_bytes(cfg, shape, policy, device)}]
    if cfg.mlp != "swiglu":  # down(gelu(up(x))): gelu's backward, then up's two gradients
        return [first, down_done,
                {"weight_grads_kept": weight, "weight_grads_transient": 0, "activation_grads": flowing + 2 * hidden,
                 "freed": down_input},
                {"weight_grads_kept": 2 * weight, "weight_grads_transient": weight,
                 "activation_grads": flowing + hidden + t * h * e_act, "freed": hidden + down_input}]
    return [first, down_done,
            {"weight_grads_kept": weight, "weight_grads_transient": 0, "activation_grads": flowing + 3 * hidden,
             "freed": down_input + bf16_weight},
            {"weight_grads_kept": 3 * weight, "weight_grads_transient": weight,
             "activation_grads": flowing + t * h * e_act + hidden, "freed": 3 * hidden + down_input},
            {"weight_grads_kept": 3 * weight, "weight_grads_transient": weight,
             "activation_grads": flowing + 2 * t * h * e_act + hidden, "freed": 3 * hidden + down_input}]


def block_backward_temporaries(cfg: ModelConfig, shape: StepShape, policy: str, weight_grads_kept: bool,
                               input_grad_first: bool = False, device: str = "gpu") -> dict[str, int]:
    """The largest moment of one block's MLP backward (:func:`mlp_backward_moments`): its gradient buffers and the activations freed.

    ``weight_grads_kept``: whether the strategy keeps the weight gradients (FSDP, ZeRO-1) or
    copies each away once made (DDP, ZeRO-2/3). Returns ``block_grads`` (the gradients alive)
    and ``freed``. Where two moments hold the same bytes the earlier one is the peak, as the
    tracker reports the first moment that reaches its maximum (so at ``T·f = h·f`` DDP's peak is
    ``down``'s weight gradient beside the flowing one, the product still alive).
    """
    key = "weight_grads_kept" if weight_grads_kept else "weight_grads_transient"
    candidates = [{"block_grads": m["activation_grads"] + m[key], "freed": m["freed"]}
                  for m in mlp_backward_moments(cfg, shape, policy, input_grad_first, device)]
    return max(candidates, key=lambda c: c["block_grads"] - c["freed"])  # max keeps the first of equals


def logits_bytes(cfg: ModelConfig, shape: StepShape, policy: str) -> int:
    """The logits while the loss is computed: fp32, or bf16 plus the fp32 copy the loss takes."""
    return shape.tokens * cfg.head_outputs * (4 if policy == "fp32" else 6)


def reduce_bucket_elements(dtype: str, fair: FairSettings, deepspeed: DeepSpeedKnobs | None = None) -> int:
    """DeepSpeed's ``reduce_bucket_size`` (elements) for a run in ``dtype``: its own config's (``deepspeed``), else
    the worker's setting under ``fair``."""
    if deepspeed is not None:
        return deepspeed.reduce_bucket_elements
    reduce_dtype = fair.resolved_reduce_dtype(dtype)
    return deepspeed_bucket_elements(fair, reduce_dtype, dtype)["reduce"]


def zero_reduce_bucket(strategy: str, dtype: str, fair: FairSettings, overlap_comm: bool | None = None,
                       deepspeed: DeepSpeedKnobs | None = None) -> int:
    """Bytes of the gradient reduce bucket(s) DeepSpeed allocates for ZeRO-1/2/3, whole, whatever the model's size.

    ZeRO-1/2 allocate ``reduce_bucket_size`` elements in the model's dtype (the gradient
    accumulation dtype, which defaults to it), a second one when ``overlap_comm`` is on
    (DeepSpeed's default for stages 1-2 is off); ZeRO-3 one bucket in the reduction dtype
    (``communication_data_type``). Other strategies: 0.
    """
    if strategy not in ("zero1", "zero2", "zero3"):
        return 0
    elements = reduce_bucket_elements(dtype, fair, deepspeed)
    if strategy == "zero3":
        return elements * dtype_bytes(fair.resolved_reduce_dtype(dtype))
    return elements * dtype_bytes(dtype) * (2 if overlap_comm else 1)


@dataclass(frozen=True)
class OptimizerAssumption:
    """What the optimizer keeps per parameter, and where."""

    name: str = "adamw"
    """``adamw`` (fp32 moments), ``adamw_bf16`` (bf16 moments), ``adamw_bf16_states`` (bf16 moments *and* bf16
    master weights: DeepSpeed's ``bf16_master_weights_and_grads`` + ``bf16_optimizer_states``, ZeRO-1/2/3 in bf16;
    the one variant besides ``adamw`` the worker runs), ``adamw_8bit`` (bitsandbytes-style 8-bit moments)."""
    offload: str = "none"
    """``cpu``: moments and master weights live in host memory (ZeRO-Offload); the GPU keeps none."""
    implementation: str = "default"
    """The AdamW kernel: ``fused``, ``foreach``, ``for-loop`` or ``default`` (the framework's:
    :func:`~shardscope.costmodel.optimizer_step.adamw_implementation`); ``foreach`` keeps a temporary per stepped
    parameter on a GPU (:func:`step_temporaries`), ``for-loop`` a few of its largest tensors, ``fused`` none."""

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.name!r}")
        if self.offload not in OFFLOAD:
            raise ValueError(f"optimizer offload must be one of {', '.join(OFFLOAD)}, got {self.offload!r}")
        check_adamw(self.implementation)

    @property
    def moment_bytes(self) -> float:
        """Bytes per parameter of Adam's two moments: 8 (fp32), 4 (bf16), 2 + ~0.03 (8-bit, one fp32 scale per 2048-block)."""
        return {"adamw": 8.0, "adamw_bf16": 4.0, "adamw_bf16_states": 4.0, "adamw_8bit": 2.0 + 2 * 4 / 2048}[self.name]

    @property
    def master_bytes(self) -> float:
        """Bytes per parameter of the master weights where a bf16 run keeps them: 4 (fp32), 2 under ``adamw_bf16_states``."""
        return 2.0 if self.name == "adamw_bf16_states" else 4.0


def step_temporaries(strategy: str, cfg: ModelConfig, gpus: int, policy: str, device: str,
                     deepspeed: DeepSpeedKnobs | None = None, adamw: str = "foreach") -> int:
    """Bytes the optimizer step allocates for a moment.

    torch's AdamW one tensor at a time (``adamw`` ``for-loop``, and always on CPU, where torch has no ``foreach``
    default) computes ``denom`` and its scaled copy for the tensor it steps while the previous tensor's ``denom`` is
    still bound: two of one tensor and one of the tensor before it. Its largest moment is the embedding's two (the
    first tensor, or after a norm) or an MLP weight's two beside its twin's (up and down projections are the same size
    and adjacent): ``4 x max(2 V·h, 3 h·f)`` bytes, tracked exactly on a model of each kind
    (``tests/training/test_adamw_temporaries.py``). The ``foreach`` path keeps one temporary per local parameter
    (``exp_avg_sq.sqrt()`` for all of them, the "~ sizeof(params) more peak memory" torch's documentation states): 4
    bytes per local parameter; a ``fused`` kernel keeps none. DeepSpeed's ZeRO-1/2/3 on a GPU: the moments of its own
    step (:func:`zero_step_moments`; ``deepspeed``: a run's own config, whose ``sub_group_size`` ZeRO-3 steps by); on
    CPU its flat partition is the one tensor torch's loop steps.
    """
    sharded = strategy in ("fsdp", "fsdp_grad_op", "zero3", "zero1", "zero2")
    local = cfg.param_count() // gpus if sharded else cfg.param_count()
    share = gpus if strategy in ("fsdp", "fsdp_grad_op") else 1  # FSDP steps each tensor's shard
    widest = max(cfg.d_ff, cfg.shared_expert_d_ff)  # one MLP weight: an expert's, or the shared expert's
    embedding, mlp = -(-cfg.vocab_size * cfg.d_model // share), -(-cfg.d_model * widest // share)
    for_loop = 4 * max(2 * embedding, 3 * mlp)
    zero = strategy in ("zero1", "zero2", "zero3")
    if device == "cpu":
        return 2 * 4 * local if zero else for_loop
    if zero:
        return zero_step_moments(strategy, cfg, gpus, policy, (deepspeed or DeepSpeedKnobs()).sub_group_elements, adamw)
    return {"fused": 0, "foreach": 4 * local, "for-loop": for_loop}[adamw_implementation(strategy, adamw)]


def zero_step_moments(strategy: str, cfg: ModelConfig, gpus: int, policy: str,
                      sub_group_elements: int = ZERO3_SUB_GROUP_ELEMENTS, adamw: str = "foreach") -> int:
    """Bytes beyond the held states at the largest of the three moments of DeepSpeed ZeRO-1/2/3's optimizer step on a
    GPU (``step`` of ``runtime/zero/stage_1_and_2.py`` and ``stage3.py``, read at v0.18.5) of one of ``gpus`` ranks.

    - the gradient norm, first, with every held gradient alive: each gradient chunk of the rank's partition is cast to
      float64 for its norm, one at a time (``get_grad_norm_direct``: ``.double()``), 8 B per element of the largest
      chunk: under ZeRO-1/2 the largest tensor, or the whole partition where that tensor is larger; under ZeRO-3,
      which partitions every tensor, the rank's share of the largest;
    - the flattening: the gradients of the parameters outside the rank's partition are freed (ZeRO-1 holds every
      gradient until then), and the partition's are copied flat and cast to fp32 while the gradients they came from
      are still held: 2 + 4 B per parameter in a 16-bit run, the flat copy alone (4 B, the cast returns it) in fp32.
      ZeRO-1/2 flatten the whole partition at once; ZeRO-3 one sub-group at a time (``sub_group_size``, which a
      sub-group passes by at most one tensor's share);
    - the update: the 16-bit gradients freed, the fp32 gradient (4 B) beside torch's foreach AdamW's temporary
      (4 B per parameter, ``adamw`` ``foreach``; its ``for-loop`` steps the flat partition as one tensor, two
      temporaries of it at once, 8 B; DeepSpeed's FusedAdam keeps none).

    Measured, not only read: a real DeepSpeed run (one gloo rank on CPU, the optimizer replaced by plain SGD so that
    DeepSpeed's step is all there is) holds these bytes in its step to within 0.01% on three shapes in bf16 and fp32,
    under ZeRO-1, -2 and -3, and with ZeRO-3's sub-groups cut small (``tests/training/test_zero_step_moments.py``)."""
    largest = largest_layer_params(cfg)  # every module of the GPT holds one weight: its largest is the largest tensor
    local = cfg.param_count() // gpus
    e_grad = 4 if policy == "fp32" else 2
    if strategy == "zero3":
        chunk = -(-largest // gpus)
        flat = min(local, sub_group_elements + chunk)
    else:
        chunk, flat = min(largest, local), local
    others = e_grad * (cfg.param_count() - local) if strategy == "zero1" else 0
    norm = 8 * chunk
    flatten = (e_grad + 4 if policy != "fp32" else 4) * flat - others
    temporaries = {"fused": 0, "foreach": 4, "for-loop": 8}[adamw_implementation(strategy, adamw)]
    update = (4 + temporaries - e_grad) * flat - others
    return max(norm, flatten, update, 0)


def strategy_buffers(strategy: str, cfg: ModelConfig, shape: StepShape, gpus: int, policy: str,
                     fair: FairSettings | None = None, overlap_comm: bool | None = None,
                     deepspeed: DeepSpeedKnobs | None = None) -> dict[str, dict[str, int]]:
    """Buffers each phase holds besides the activations, by name (see the module docstring).

    Phases: ``forward`` (the loss, activations all alive), ``backward`` (the head's backward; the
    strategy's buffers only, the head's own gradients are :func:`head_backward`'s) and ``backward_blocks`` (inside
    the blocks' backward, the output side's activations gone). ``fair`` and ``overlap_comm``
    are the run's settings (DeepSpeed's bucket sizes follow from them; defaults: the worker's); ``deepspeed`` a
    run's own DeepSpeed config (its bucket and ZeRO-3 limits replace them).
    """
    fair = fair or FairSettings()
    e_param = 4 if policy in ("fp32", "autocast") else 2
    block = block_params(cfg) * e_param
    root = root_params(cfg) * e_param
    forward: dict[str, int] = {"logits": logits_bytes(cfg, shape, policy)}
    head: dict[str, int] = {}  # the head's own gradients: head_backward
    blocks: dict[str, int] = {}
    if strategy in ("zero1", "zero2"):
        bucket = zero_reduce_bucket(strategy, shape.dtype, fair, overlap_comm, deepspeed)
        head["reduce_bucket"] = blocks["reduce_bucket"] = bucket
    elif strategy == "fsdp":
        # the root's unsharded parameters, and the last block's all-gather output, which FSDP2 keeps past that
        # block's forward (traced at 3 x 96 tokens, width 160, vocabulary 1500: a [block_params] buffer beside the
        # root's views; at the tiny model's shape a block and the root hold the same parameters within 0.05%) and
        # through the head's backward, until that block's own backward uses it (traced on 2 ranks, tiny model, 2 x 128)
        forward["root_unsharded"] = root
        forward["last_block_gather"] = head["last_block_gather"] = block
        head["root_unsharded"] = blocks["root_unsharded"] = root
        blocks["block_gather_params_grads"] = 3 * block
    elif strategy == "fsdp_grad_op":
        forward["all_units_unsharded"] = head["all_units_unsharded"] = blocks["all_units_unsharded"] = cfg.param_count() * e_param
        forward["block_gather"] = block
        blocks["block_grads"] = block
    elif strategy == "zero3":
        knobs = deepspeed or DeepSpeedKnobs()  # DeepSpeed's defaults: 1e9 live, 1e9 reuse distance
        bucket = zero_reduce_bucket(strategy, shape.dtype, fair, overlap_comm, deepspeed)
        gathered = zero3_gathered_elements(cfg, knobs, shape.checkpointing)
        forward["gathered_params"] = head["gathered_params"] = gathered * e_param
        blocks["gathered_params"] = zero3_gathered_in_blocks(cfg, knobs, gathered) * e_param
        head["reduce_bucket"] = blocks["reduce_bucket"] = bucket
    return {"forward": forward, "backward": head, "backward_blocks": blocks}


def zero3_gathered_elements(cfg: ModelConfig, knobs: DeepSpeedKnobs, checkpointing: str = "none") -> int:
    """Parameter elements ZeRO-3 holds gathered when forward ends (in use, kept, or prefetched and in flight), under
    ``knobs``' live limit and reuse distance: the larger of what the two rules of DeepSpeed's fetch coordinator hold.

    The prefetch gathers ahead while fewer than ``stage3_max_live_parameters`` elements are gathered, and what it
    gathers stays until its use, so it fills the live limit (all of a model smaller than it) whatever the reuse
    distance. The reuse distance (:func:`zero3_kept_after_forward`) keeps modules used again soon, past the live limit
    too: DeepSpeed-Chat's live limit of 3e7 under the default 1e9 distance holds far more than 3e7. Never less than the
    largest module, fetched whole. Measured on one gloo rank with DeepSpeed 0.19.8 (``tests/training/
    test_zero3_reuse.py``): within one module of every run whose prefetch bucket is a module or more (a bucket of a
    few elements fills less than the live limit).
    """
    kept = zero3_kept_after_forward(cfg, knobs.max_reuse_distance, _checkpointed_blocks(cfg, checkpointing))
    return max(min(cfg.param_count(), knobs.max_live_parameters), kept, largest_layer_params(cfg))


def zero3_gathered_in_blocks(cfg: ModelConfig, knobs: DeepSpeedKnobs, after_forward: int) -> int:
    """Parameter elements ZeRO-3 holds gathered when the blocks' backward starts: what forward ended with
    (``after_forward``, :func:`zero3_gathered_elements`), less the head and the final norm it has released
    (:func:`zero3_released_before_blocks`), but never less than the live limit over the modules still to come, which
    the prefetch refills as modules are released, nor than the block's largest module, fetched for its backward
    (measured on real DeepSpeed: ``tests/training/test_zero3_reuse.py``)."""
    released = zero3_released_before_blocks(cfg)
    refilled = min(cfg.param_count() - released, knobs.max_live_parameters)
    return max(refilled, after_forward - released, max(zero3_block_modules(cfg)))


def zero3_block_modules(cfg: ModelConfig) -> list[int]:
    """Parameters of each module of one block in the order ZeRO-3 fetches them: its first norm, queries, fused
    key/value, output projection, second norm and MLP matrices (of a mixture-of-experts block the router, every
    expert's matrices and the shared expert's)."""
    kv = cfg.n_kv_heads * cfg.head_dim
    mlp = [cfg.d_model * cfg.d_ff] * cfg.mlp_matrices
    if cfg.experts:
        shared = [cfg.d_model * cfg.shared_expert_d_ff] * cfg.mlp_matrices if cfg.shared_expert_d_ff else []
        mlp = [cfg.router_params, *mlp * cfg.experts, *shared]
    return [cfg.norm_params, cfg.d_model * cfg.q_dim, cfg.d_model * 2 * kv, cfg.q_dim * cfg.d_model, cfg.norm_params,
            *mlp]


def zero3_forward_modules(cfg: ModelConfig) -> list[int]:
    """Parameters of each module ZeRO-3 fetches in one forward, in the order it fetches them: the embedding, each
    block's (:func:`zero3_block_modules`), then the final norm and the head (the embedding's weight again where tied).
    DeepSpeed records its trace per module that owns parameters."""
    return [cfg.vocab_size * cfg.d_model, *zero3_block_modules(cfg) * cfg.n_layers, cfg.norm_params,
            cfg.head_outputs * cfg.d_model]


def zero3_kept_after_forward(cfg: ModelConfig, reuse_distance: int, recomputed: list[bool] | None = None) -> int:
    """Parameter elements ZeRO-3's reuse rule keeps gathered when forward ends: every module whose next use comes
    within ``stage3_max_reuse_distance`` elements of the step's recorded trace.

    DeepSpeed's fetch coordinator (``partitioned_param_coordinator.py``, ``__params_to_release``, the same in 0.9.2
    and 0.18) releases a module after its forward unless the trace, walked on from there, reaches that module again
    before it has passed ``reuse_distance`` elements, whatever ``stage3_max_live_parameters`` says (measured with the
    prefetch stopped by a live limit below what is gathered; the prefetch holds more, :func:`zero3_gathered_elements`).
    A module's next use is its backward, after the rest of forward and the backward of every module after it, so the
    last ``reuse_distance / 2`` or so of the model stays (all of a model of fewer than ``reuse_distance / 2``
    parameters: DeepSpeed's default 1e9 keeps every module of a 500M-parameter model); a block that backward
    recomputes (``recomputed``, per block) is fetched again for its recompute first, so the walk passes each later
    block twice and about a third stays. The head, in use when forward ends, is always held.
    Measured on one gloo rank with DeepSpeed 0.19.8 (``tests/training/test_zero3_reuse.py``): exact without
    checkpointing, within one matrix with it.
    """
    modules = zero3_forward_modules(cfg)
    per_block = len(zero3_block_modules(cfg))
    recomputed = recomputed or [False] * cfg.n_layers
    backward: list[int] = [len(modules) - 1, len(modules) - 2]
    for b in reversed(range(cfg.n_layers)):
        own = list(range(1 + b * per_block, 1 + (b + 1) * per_block))
        backward += own + own[::-1] if recomputed[b] else own[::-1]
    trace = list(range(len(modules))) + backward + [0]
    passed = [0]
    for m in trace:
        passed.append(passed[-1] + modules[m])
    next_use: dict[int, int] = {}
    kept = modules[-1]
    for position in range(len(trace) - 1, len(modules) - 1, -1):
        next_use[trace[position]] = position
    for position in range(1 if cfg.tie_embeddings else 0, len(modules) - 1):  # a tied head holds the embedding's
        again = next_use.get(position)
        if again is not None and passed[again] - passed[position + 1] < reuse_distance:
            kept += modules[position]
    return kept


def zero3_released_before_blocks(cfg: ModelConfig) -> int:
    """Parameters ZeRO-3 has released when the blocks' backward starts: the output head (unless tied) and the final norm.

    DeepSpeed releases a module's gathered parameters after the module's backward unless the
    recorded trace uses them again within ``stage3_max_reuse_distance``; in backward nothing
    that follows in the step uses them again, so each module lets go of its parameters as
    soon as its backward is done (traced with the tensor tracker on the tiny model: 19
    releases in reverse module order, the embedding's last). A tied head is the embedding's
    weight, used again at the very end, so it stays.
    """
    return cfg.d_model + (0 if cfg.tie_embeddings else cfg.head_outputs * cfg.d_model)


def zero3_recompute_activations(acts: dict[str, int], cfg: ModelConfig, shape: StepShape, policy: str) -> dict[str, int]:
    """ZeRO-3 under full checkpointing: the recomputed block also holds its MLP's output (``T·h``) at its peak.

    torch's non-reentrant checkpoint stops a recompute as soon as the last tensor backward
    needs is saved (the input of the down projection); without ZeRO-3 the projection's output
    dies at once, but DeepSpeed's forward hooks on that Linear run on the output first, so it
    is alive with all the recomputed activations (measured: +65,536 B = T·h·4 on the tiny model
    at 2 x 64 tokens, +262,144 B on small-gqa at 2 x 128, each exactly one ``T·h``).
    """
    extra = shape.tokens * cfg.d_model * (2 if policy == "bf16" else 4)
    wrapped = _checkpointed_blocks(cfg, shape.checkpointing)[::-1]
    in_block = [alive + (extra if w else 0) for alive, w in zip(acts["in_block_backward"], wrapped)]
    blocks = max(in_block)
    return {**acts, "blocks": blocks, "in_block_backward": in_block, "recomputed": acts["recomputed"] + extra,
            "peak": max(acts["total"], blocks)}


def zero3_backward_end(cfg: ModelConfig, e_param: int, e_reduce: int, bucket: int, device: str) -> dict[str, int]:
    """ZeRO-3 at the end of backward when one reduce bucket holds every gradient: the reduce-scatter's copies beside the bucket.

    DeepSpeed reduces the bucket with ``reduce_scatter_coalesced``, which first interleaves
    every gradient into one new buffer the size of the model (in the reduction dtype; padding
    each tensor to a multiple of the world size, a few elements, is left out). gloo's
    reduce-scatter (CPU) works on a whole copy of that buffer too (seen by the tracker as a
    model-sized storage that appears at the collective's ``split``); NCCL's reduces in place,
    so on GPU there is one copy. Every module's parameters are released by then except the
    embedding's (its backward is the last; they go after this reduce).
    """
    n = cfg.param_count()
    copies = 2 if device == "cpu" else 1
    return {"reduce_bucket": bucket, "reduce_scatter_copies": copies * n * e_reduce,
            "embedding_gathered": cfg.vocab_size * cfg.d_model * e_param, "activations": 0}


def fsdp_backward_blocks(cfg: ModelConfig, shape: StepShape, policy: str, acts: dict[str, int], root: int, block: int,
                         e_grad: int, device: str = "gpu") -> dict[str, int]:
    """FSDP2's largest moment inside the blocks' backward: over the ``L`` blocks in backward order, the largest.

    Alive throughout: the root's unsharded parameters (the root is not resharded until its
    post-backward at the very end) and its unsharded gradients of the head and final norm
    (``V·h + h``: a tied head's share accumulates into the embedding's gradient, just as big).
    In block ``j`` of the backward (``j = 0`` the last block of the model): its unsharded
    parameters (one block); the next block's all-gather output, prefetched by FSDP2's default
    backward prefetch at this block's pre-backward and copied out only at the next's, unless
    ``j`` is the last (``j < L - 1``); the previous block's reduce-scatter input, which FSDP2
    keeps (``reduce_scatter_state``) until the next reduce-scatter, unless ``j = 0``; the MLP
    backward's gradients with its weight gradients kept (:func:`block_backward_temporaries`);
    and the activations of the ``L - j`` blocks not done, less what the MLP backward has freed.
    Traced with the tensor tracker, fp32, 2 ranks, each within 4 B: the tiny model (2 blocks) at
    2 x 64 and 2 x 128 tokens peaks in ``j = 0``, with and without full checkpointing; small-gqa
    (4 blocks) in ``j = 1`` (the previous reduce-scatter input beside the prefetch) at 2 x 64
    and, with full checkpointing, at 2 x 128, and in ``j = 0`` at 2 x 128 without (where all
    activations are still alive).
    """
    root_grads = (cfg.d_model + cfg.head_outputs * cfg.d_model) * e_grad
    mlp = block_backward_temporaries(cfg, shape, policy, weight_grads_kept=True, device=device)
    candidates = []
    for j in range(cfg.n_layers):
        parts = {"root_unsharded": root, "root_grads": root_grads, "block_unsharded": block,
                 "prefetched_block_gather": block if j < cfg.n_layers - 1 else 0,
                 "previous_reduce_scatter_input": block if j > 0 else 0, "block_grads": mlp["block_grads"],
                 "activations": max(acts["in_block_backward"][j] - mlp["freed"], 0)}
        candidates.append({k: v for k, v in parts.items() if v or k == "activations"})
    return max(candidates, key=lambda parts: sum(parts.values()))


def zero1_backward(cfg: ModelConfig, shape: StepShape, policy: str, acts: dict[str, int], bucket: int, e_grad: int,
                   bucket_elements: int, device: str = "gpu") -> dict[str, int]:
    """ZeRO-1's largest moment in the blocks' backward: full gradients pile up while activations are freed.

    Stage 1 keeps every full gradient until the end of backward (it partitions only the
    optimizer state). The moment is inside block ``L - 1 - k``'s MLP backward: the head's and
    ``k`` blocks' gradients beside the MLP backward's gradients, its weight gradients kept
    (:func:`block_backward_temporaries`), and the activations of the ``L - k`` blocks not yet
    done, less what the MLP backward has freed (measured exactly on the tiny model, 2 ranks, at
    2 x 64 and 2 x 128 tokens); at the end, all gradients and no activations.
    """
    head_grads = (cfg.head_outputs * cfg.d_model + cfg.norm_params) * e_grad  # the output head and final norm
    block_grads = block_params(cfg) * e_grad
    mlp = block_backward_temporaries(cfg, shape, policy, weight_grads_kept=True, device=device)
    cap = bucket if bucket_elements < cfg.param_count() else None  # a full bucket is reduced: no more piles up

    def grads(nbytes: int) -> int:
        return min(nbytes, cap) if cap is not None else nbytes
    candidates = [{"reduce_bucket": bucket, "full_grads_so_far": grads(head_grads + k * block_grads),
                   "block_grads": mlp["block_grads"],
                   "activations": max(acts["in_block_backward"][k] - mlp["freed"], 0)}
                  for k in range(cfg.n_layers)]
    candidates.append({"reduce_bucket": bucket, "full_grads_so_far": grads(cfg.param_count() * e_grad), "activations": 0})
    return max(candidates, key=lambda parts: sum(parts.values()))


@dataclass(frozen=True)
class PeakTerms:
    """Every term of the modeled peak of one GPU (bytes) and the phase it happens in."""

    strategy: str
    param_bytes: int
    grad_bytes: int
    optim_bytes: int
    activation_bytes: int
    buffer_bytes: int
    """Buffers alive in the peak phase."""
    overhead_bytes: int
    """Calibrated overhead, else on the ``reserved`` basis the caching allocator's reserve
    (:data:`ALLOCATOR_RESERVE_FRACTION`)."""
    peak_bytes: int
    """The peak on :attr:`basis`: allocated, or reserved (as the GPU's allocator reaches it)."""
    peak_phase: str
    phases: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per phase, each buffer term and the activations then (the whole breakdown)."""
    assumptions: dict[str, Any] = field(default_factory=dict)
    runtime_bytes: int = 0
    """Held outside the allocator (CUDA context, NCCL buffers: :func:`gpu_runtime_bytes`); 0 on the allocated basis."""
    basis: str = "allocated"
    cache_bytes: int = 0
    """Freed blocks the caching allocator keeps cached where the GPU has room (:func:`with_room`), part of
    :attr:`peak_bytes`; not part of what "fits" needs, since the allocator frees them before it fails."""

    def fits(self, capacity_bytes: float) -> bool:
        """Whether the whole peak fits a GPU of ``capacity_bytes`` ("fits" means the whole peak, nothing less): the
        reserved peak the run needs (its allocated peak and the reserve, :data:`ALLOCATOR_RESERVE_FRACTION`; the
        cache it would keep given room is freed first) within what the CUDA context and NCCL leave."""
        return self.device_bytes - self.cache_bytes <= capacity_bytes

    @property
    def allocated_peak_bytes(self) -> int:
        """The peak of the tensors alive (``torch.cuda.max_memory_allocated``'s basis): the peak without the
        allocator's reserve, cache or a calibrated overhead."""
        return self.peak_bytes - self.cache_bytes - self.overhead_bytes

    @property
    def device_bytes(self) -> int:
        """The device's whole use at the peak, as nvidia-smi shows it: the peak and what is outside the allocator."""
        return self.peak_bytes + self.runtime_bytes

    @property
    def state_bytes(self) -> int:
        """Parameters, gradients and optimizer state."""
        return self.param_bytes + self.grad_bytes + self.optim_bytes

    def to_dict(self) -> dict[str, Any]:
        """Plain dictionary (``shardscope memory --json``)."""
        return dict(asdict(self), state_bytes=self.state_bytes, device_bytes=self.device_bytes,
                    allocated_peak_bytes=self.allocated_peak_bytes, method="modeled")


def with_room(terms: PeakTerms, capacity_bytes: float | None) -> PeakTerms:
    """``terms`` as a run shows them on a GPU of ``capacity_bytes`` usable bytes: on the reserved basis the caching
    allocator keeps freed blocks cached up to :data:`ALLOCATOR_CACHE_FRACTION` of the allocated peak, within what the
    peak and the memory outside the allocator leave (:attr:`PeakTerms.cache_bytes`). Unchanged without a capacity, on
    the allocated basis, under a calibrated overhead (a measured run's reserve) or where the run does not fit."""
    if capacity_bytes is None or terms.basis != "reserved" or terms.assumptions.get("overhead_fraction"):
        return terms
    ample = int(terms.allocated_peak_bytes * ALLOCATOR_CACHE_FRACTION) - terms.overhead_bytes
    floor = terms.peak_bytes - terms.cache_bytes
    cache = max(0, min(ample, int(capacity_bytes) - terms.runtime_bytes - floor))
    return replace(terms, peak_bytes=floor + cache, cache_bytes=cache)


def model_states(strategy: str, cfg: ModelConfig, gpus: int, dtype: str, states: str,
                 optimizer: OptimizerAssumption, hpz_partition: int | None = None) -> dict[str, int]:
    """Parameter, gradient and optimizer bytes: the ZeRO paper's (``paper``) or this code's (``implementation``) model.

    The optimizer assumption replaces Adam's fp32 moments (8 B/param) by its own and drops the
    optimizer state from the GPU when offloaded to the CPU. ``hpz_partition``: ``zero3_hpz``'s partition size.
    """
    from shardscope.costmodel.memory_model import predict_memory
    from shardscope.costmodel.modeled import implementation_memory

    n = cfg.param_count()
    if states == "implementation":
        held = implementation_memory(n, strategy, gpus, dtype, hpz_partition)
    elif states == "paper":
        held = predict_memory(n, strategy, gpus, dtype, hpz_partition=hpz_partition)
    else:
        raise ValueError(f"model states must be 'paper' or 'implementation', got {states!r}")
    optim = held["optim_bytes"]
    share = n / (gpus if _optim_sharded(strategy) else 1)
    if optimizer.name != "adamw":  # replace the two fp32 moments (8 B/param) by the assumption's
        optim -= (8 - optimizer.moment_bytes) * share
    if _keeps_master(strategy, dtype, states):  # a separate fp32 master copy, now in the assumption's bytes
        optim -= (4 - optimizer.master_bytes) * share
    params, grads = int(held["param_bytes"]), int(held["grad_bytes"])
    if optimizer.offload == "cpu":
        optim = 0
        host_params, host_grads, _ = OFFLOAD_HOLDS[strategy]  # what the strategy's CPU offload keeps on the host
        params, grads = (0 if host_params else params), (0 if host_grads else grads)
    return {"param_bytes": params, "grad_bytes": grads, "optim_bytes": max(int(optim), 0)}


def _optim_sharded(strategy: str) -> bool:
    return SHARDED[strategy][2]


def _keeps_master(strategy: str, dtype: str, states: str) -> bool:
    """Whether the optimizer holds a master copy apart from the parameters (DeepSpeed always; the paper in bf16)."""
    if states == "paper":
        return dtype == "bfloat16"
    return uses_deepspeed(strategy)


def predict_peak(strategy: str, cfg: ModelConfig, gpus: int, shape: StepShape, states: str = "implementation",
                 optimizer: OptimizerAssumption | None = None, overhead_fraction: float = 0.0,
                 device: str = "gpu", held: dict[str, int] | None = None, fair: FairSettings | None = None,
                 overlap_comm: bool | None = None, shard_group: int | None = None, basis: str | None = None,
                 nccl_channels: int | None = None, trainable_fraction: float = 1.0,
                 ddp_bucket_view: bool = DDP_BUCKET_VIEW_DEFAULT,
                 deepspeed: DeepSpeedKnobs | None = None) -> PeakTerms:
    """The whole modeled peak of one GPU: states + the largest phase (activations + buffers) + overhead.

    ``held`` gives the model states (``param_bytes``, ``grad_bytes``, ``optim_bytes``) directly,
    e.g. from the user's bytes-per-parameter assumption; else ``states`` picks the model.
    ``fair`` (reduce dtype, bucket policy) and ``overlap_comm`` are the run's recorded settings
    (:func:`settings_of_run`); by default the worker's defaults (DeepSpeed's own buckets, its per-stage
    ``overlap_comm``). ``shard_group`` is HSDP's shard-group size (see :func:`hsdp_shard_group`), or
    hpZ's partition size of ``zero3_hpz`` (all ``gpus`` when None). ``held``, when given, includes hpZ's secondary partition.
    ``basis``: ``allocated`` (tensors alive: the CPU tracker, ``max_memory_allocated``) or ``reserved`` (the caching
    allocator's reserve added, and the CUDA context and NCCL buffers in ``runtime_bytes``); default reserved on a GPU,
    allocated on CPU. A calibrated ``overhead_fraction`` replaces the reserve. ``nccl_channels``: NCCL's channels
    (:data:`NCCL_DEFAULT_CHANNELS`). ``trainable_fraction``: the share of the parameters the optimizer steps
    (LoRA-style frozen weights); its step temporaries are per stepped parameter. ``ddp_bucket_view``: DDP's
    ``gradient_as_bucket_view`` (:data:`DDP_BUCKET_VIEW_DEFAULT`, torch's default, off: on more than one GPU its
    buckets hold a second copy of the trainable gradients through every phase; the worker turns it on).
    ``deepspeed``: the run's own DeepSpeed config (``--deepspeed-config``: its reduce bucket and ZeRO-3's live
    parameters in place of the defaults).
    """
    basis = basis or ("reserved" if device == "gpu" else "allocated")
    if basis not in BASES:
        raise ValueError(f"memory basis must be one of {', '.join(BASES)}, got {basis!r}")
    extra = {"basis": basis, "nccl_channels": nccl_channels, "trainable_fraction": trainable_fraction,
             "deepspeed": deepspeed}
    fair = fair or FairSettings()
    if strategy not in MODELED_STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {', '.join(MODELED_STRATEGIES)}")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"number of GPUs must be at least 1, got {gpus!r}")
    if strategy == "hsdp":
        group = hsdp_shard_group(gpus, shard_group)
        terms = predict_peak("fsdp", cfg, group, shape, states, optimizer, overhead_fraction, device, held, fair,
                             overlap_comm, **extra)
        runtime = gpu_runtime_bytes("hsdp", gpus, nccl_channels) if basis == "reserved" else {}
        return replace(terms, strategy="hsdp", runtime_bytes=sum(runtime.values()),
                       assumptions={**terms.assumptions, "gpus": gpus, "shard_group": group, "replicas": gpus // group,
                                    "runtime": runtime})
    if strategy == "zero3_hpz":
        group = hsdp_shard_group(gpus, shard_group, "hpZ's partition size")
        if held is None:
            held = model_states(strategy, cfg, gpus, shape.dtype, states, optimizer or OptimizerAssumption(), hpz_partition=group)
        terms = predict_peak("zero3", cfg, gpus, shape, states, optimizer, overhead_fraction, device, held, fair,
                             overlap_comm, **extra)
        runtime = gpu_runtime_bytes("zero3_hpz", gpus, nccl_channels) if basis == "reserved" else {}
        return replace(terms, strategy="zero3_hpz", runtime_bytes=sum(runtime.values()),
                       assumptions={**terms.assumptions, "hpz_partition": group, "runtime": runtime})
    if shard_group is not None:
        raise ValueError(f"a shard-group size is HSDP's or zero3_hpz's alone, not {strategy!r}'s")
    if not 0 <= overhead_fraction < 1:
        raise ValueError(f"overhead fraction must be in [0, 1), got {overhead_fraction!r}")
    optimizer = optimizer or OptimizerAssumption()
    policy = compute_policy(strategy, shape.dtype, shape.frozen_weights)
    if held is None:
        held = model_states(strategy, cfg, gpus, shape.dtype, states, optimizer)
    else:
        held = {key: int(held[key]) for key in ("param_bytes", "grad_bytes", "optim_bytes")}
    acts = activation_bytes(cfg, shape, policy, device)
    if strategy == "zero3" and shape.checkpointing != "none":
        acts = zero3_recompute_activations(acts, cfg, shape, policy)
    buffers = strategy_buffers(strategy, cfg, shape, gpus, policy, fair, overlap_comm, deepspeed)
    # the optimizer steps only the parameters given to it (the trainable ones): foreach AdamW's temporaries and
    # DeepSpeed's partition copy are per stepped parameter
    step_temp = (0 if optimizer.offload == "cpu"
                 else int(step_temporaries(strategy, cfg, gpus, policy, device, deepspeed, optimizer.implementation)
                          * trainable_fraction))
    log_softmax = shape.tokens * cfg.head_outputs * 4
    # the head's backward: its input (saved for the weight's gradient) is freed as the gradient of it appears
    head_input = shape.tokens * cfg.d_model * (4 if policy == "fp32" else 2)
    e_grad = 4 if policy in ("fp32", "autocast") else 2
    input_first = strategy == "zero3"  # DeepSpeed ZeRO-3 replaces F.linear by its own, the input's gradient first
    mlp = block_backward_temporaries(cfg, shape, policy, weight_grads_kept=False, input_grad_first=input_first,
                                     device=device)
    phases = {
        "forward": {**buffers["forward"], "activations": acts["total"]},
        "backward": head_backward(buffers["backward"], cfg, shape, acts, log_softmax, head_input, e_grad, input_first),
        "backward_blocks": {**buffers["backward_blocks"], "block_grads": mlp["block_grads"],
                            "activations": max(acts["blocks"] - mlp["freed"], 0)},
        # DeepSpeed's reduce bucket is allocated once and stays through the step (measured: ZeRO-3 bf16 at world size 1 peaks
        # in the step with the whole 1 GB bucket alive beside the step's temporaries)
        "step": {"optimizer_temporaries": step_temp, **_nonzero(reduce_bucket=buffers["backward"].get("reduce_bucket", 0)),
                 "activations": 0},
    }
    bucket_elements = reduce_bucket_elements(shape.dtype, fair, deepspeed)
    if strategy == "fsdp":
        e_param = 4 if policy in ("fp32", "autocast") else 2
        phases["backward_blocks"] = fsdp_backward_blocks(cfg, shape, policy, acts, root_params(cfg) * e_param,
                                                         block_params(cfg) * e_param, e_grad, device)
    if strategy == "zero1":
        phases["backward_blocks"] = zero1_backward(cfg, shape, policy, acts, buffers["backward_blocks"]["reduce_bucket"], e_grad,
                                                   bucket_elements, device)
    whole_bucket = bucket_elements >= cfg.param_count()
    if strategy == "zero2" and whole_bucket:  # one bucket holds every gradient: reduced only at the end
        phases["backward_end"] = {**buffers["backward_blocks"], "full_grads": cfg.param_count() * e_grad, "activations": 0}
    if strategy == "zero3" and whole_bucket:
        e_reduce = dtype_bytes(fair.resolved_reduce_dtype(shape.dtype))
        phases["backward_end"] = zero3_backward_end(cfg, e_grad, e_reduce, buffers["backward_blocks"]["reduce_bucket"], device)
    if strategy == "ddp" and gpus > 1 and not ddp_bucket_view:  # DDP's buckets, a second copy of the gradients
        copy = int(cfg.param_count() * trainable_fraction) * e_grad
        phases = {name: {"ddp_bucket_copy": copy, **parts} for name, parts in phases.items()}
    totals = {name: sum(parts.values()) for name, parts in phases.items()}
    phase = max(totals, key=lambda name: totals[name])
    transient = totals[phase]
    modeled = sum(held.values()) + transient
    if overhead_fraction or basis == "allocated":
        overhead = int(modeled * overhead_fraction / (1 - overhead_fraction))
    else:
        overhead = int(modeled * ALLOCATOR_RESERVE_FRACTION)
    runtime = gpu_runtime_bytes(strategy, gpus, nccl_channels) if basis == "reserved" else {}
    return PeakTerms(strategy=strategy, activation_bytes=phases[phase]["activations"], buffer_bytes=transient - phases[phase]["activations"],
                     overhead_bytes=overhead, peak_bytes=modeled + overhead, peak_phase=phase, phases=phases,
                     runtime_bytes=sum(runtime.values()), basis=basis,
                     assumptions={"policy": policy, "states": states, "device": device, **asdict(shape), "gpus": gpus,
                                  "runtime": runtime, "allocated_bytes": modeled,
                                  "optimizer": asdict(optimizer), "overhead_fraction": overhead_fraction,
                                  "fair": asdict(fair), "overlap_comm": overlap_comm, "reduce_bucket_elements": bucket_elements,
                                  "ddp_bucket_view": ddp_bucket_view,
                                  **({"deepspeed": asdict(deepspeed)} if deepspeed is not None else {}),
                                  "mlp_activation": cfg.activation,
                                  "activations_at_forward_end": acts["total"], "activation_peak": acts["peak"]}, **held)


def head_backward(buffers: dict[str, int], cfg: ModelConfig, shape: StepShape, acts: dict[str, int], log_softmax: int,
                  head_input: int, e_grad: int, input_grad_first: bool = False) -> dict[str, int]:
    """The head's backward: the largest of its three moments, beside the strategy's buffers then.

    Traced operator by operator (tiny model, 2 x 128 tokens; small-gqa, 2 x 64), with an operator's outputs and the
    inputs it releases alive together: the log-softmax's backward makes the logits' gradient (``4·T·V``) while the
    loss's gradient (``4·T·V``, dense) and the log-softmax output it was saved for are still alive
    (``log_softmax_backward``: three ``T·V`` fp32 tensors at once, whatever the precision, since the loss takes an
    fp32 copy of the logits; for a large vocabulary the step's peak), and frees both after it. The head's matmul
    backward then makes one gradient with the logits' gradient and
    the head's input still alive (``first_grad_made``): the weight's (``V·h``, autograd's output
    until its ``AccumulateGrad``) in torch's order, the input's (``T·h``) under ZeRO-3's own
    linear (``input_grad_first``); then the other, the logits' gradient and the head's input
    freed with it (``both_grads_made``). DeepSpeed allocates its reduce bucket at the first
    gradient hook, which runs only after that matmul's backward, so the bucket is alive at the
    second moment only (measured: ZeRO-2 and ZeRO-3 at 2 x 128 on the tiny model peak there,
    the head's weight gradient beside the 2 GB bucket). bf16's fp32 copy of the logits'
    gradient is not counted.
    """
    weight_grad, input_grad = cfg.head_outputs * cfg.d_model * e_grad, head_input
    before_bucket = {k: v for k, v in buffers.items() if k != "reduce_bucket"}
    log_softmax_backward = {**before_bucket, "loss_grad": log_softmax, "logits_grad": log_softmax,
                            "activations": acts["head_backward"]}
    first = {"head_input_grad": input_grad} if input_grad_first else {"head_weight_grad": weight_grad}
    first_grad_made = {**before_bucket, "logits_grad": log_softmax, **first,
                       "activations": acts["head_backward"] - log_softmax}
    both_grads_made = {**buffers, "head_weight_grad": weight_grad, "head_input_grad": input_grad,
                       "activations": acts["head_backward"] - log_softmax - head_input}
    return max((log_softmax_backward, first_grad_made, both_grads_made), key=lambda parts: sum(parts.values()))


def gpu_runtime_bytes(strategy: str, gpus: int, nccl_channels: int | None = None) -> dict[str, int]:
    """Device memory a GPU training process holds outside PyTorch's caching allocator: the CUDA context
    (:data:`CUDA_CONTEXT_BYTES`) and, on more than one GPU, NCCL's buffers: two ring connections per channel
    (:data:`NCCL_CONNECTION_BYTES`) for each communicator (HSDP and hpZ use two: their group and the world or
    replicas)."""
    if gpus < 2:
        return {"cuda_context": CUDA_CONTEXT_BYTES}
    communicators = 2 if strategy in ("hsdp", "zero3_hpz") else 1
    nccl = 2 * (nccl_channels or NCCL_DEFAULT_CHANNELS) * NCCL_CONNECTION_BYTES * communicators
    return {"cuda_context": CUDA_CONTEXT_BYTES, "nccl_buffers": nccl}


def _nonzero(**terms: int) -> dict[str, int]:
    return {name: value for name, value in terms.items() if value}


def hsdp_shard_group(gpus: int, shard_group: int | None, what: str = "HSDP's shard-group size") -> int:
    """HSDP's shard-group size on ``gpus`` GPUs: ``shard_group`` (a divisor of ``gpus``), or all of them when None
    (``what`` names it in the error: hpZ's partition size is checked the same way).

    HSDP shards parameters, gradients and optimizer state inside each group of ``shard_group``
    GPUs (FSDP within the group) and replicates them across the ``gpus / shard_group`` groups
    (gradients all-reduced between replicas after the in-group reduce-scatter, in place on the
    shard). So per GPU it holds what FSDP on ``shard_group`` GPUs holds, with FSDP's buffers
    (the unsharded root and block being computed): the memory model treats it as exactly that.
    """
    if shard_group is None:
        return gpus
    if isinstance(shard_group, bool) or not isinstance(shard_group, int) or shard_group < 1 or gpus % shard_group:
        raise ValueError(f"{what} must be a positive divisor of the {gpus} GPUs, got {shard_group!r}")
    return shard_group


def settings_of_run(settings: dict[str, Any] | None) -> tuple[FairSettings, bool | None]:
    """The fair settings and ``overlap_comm`` a run recorded (its result's ``settings`` block); the worker's defaults if absent.

    ``reduce_dtype_requested`` and ``bucket_policy`` are what the worker was asked for
    (:meth:`shardscope.contracts.fairness.FairSettings.describe`), ``overlap_comm`` what
    DeepSpeed resolved; a result written before issue 17 has none and gets the defaults.
    """
    settings = settings or {}
    fair = FairSettings(reduce_dtype=settings.get("reduce_dtype_requested") or "auto",
                        buckets="equal" if settings.get("bucket_policy") == "equal_bytes" else "default")
    overlap = settings.get("overlap_comm")
    return fair, (bool(overlap) if overlap is not None else None)


def whole_peak(strategy: str, model: str | ModelConfig, gpus: int, seq_len: int, micro_batch: int = 1,
               checkpointing: str = "none", *, dtype: str = "bfloat16", attention: str | None = None,
               states: str = "implementation", optimizer: OptimizerAssumption | None = None,
               overhead_fraction: float = 0.0, device: str = "gpu", fair: FairSettings | None = None,
               shard_group: int | None = None, held: dict[str, int] | None = None,
               overlap_comm: bool | None = None, basis: str | None = None,
               nccl_channels: int | None = None, trainable_fraction: float = 1.0,
               ddp_bucket_view: bool = DDP_BUCKET_VIEW_DEFAULT, deepspeed: DeepSpeedKnobs | None = None,
               capacity_bytes: float | None = None) -> PeakTerms:
    """The whole modeled peak per GPU: the one answer to "does it fit?" for advise, the decision map and the report.

    ``strategy`` on ``gpus`` GPUs (HSDP: ``shard_group`` GPUs per shard group; ``zero3_hpz``: its partition) training
    ``model`` (a preset name or its dimensions) at ``seq_len`` tokens and ``micro_batch``
    sequences per GPU, activation checkpointing ``none`` or ``full``, in ``dtype``. Returns
    every term (:class:`PeakTerms`); ``.peak_bytes`` is the peak, and
    ``terms.fits(capacity_bytes)`` the verdict. Model states are ``implementation`` (what this
    code's strategies hold) or ``paper`` (the ZeRO paper's bytes per parameter). On a GPU the peak is
    on the ``reserved`` basis (the allocator's reserve as overhead, unless a calibrated fraction is given; the CUDA
    context and NCCL buffers in ``runtime_bytes``), on CPU ``allocated`` (see :func:`predict_peak`). ``held``
    replaces the model states (as :func:`predict_peak`'s: frozen weights, a user's bytes per parameter),
    ``overlap_comm`` a run's recorded DeepSpeed setting. ``capacity_bytes``: the GPU's usable memory where it is
    known, into which the caching allocator's cache grows (:func:`with_room`). Raises ValueError naming the argument
    on bad input.
    """
    from shardscope.contracts.models import resolve_model

    cfg = resolve_model(model)[1] if isinstance(model, str) else model
    for name, value in (("seq_len", seq_len), ("micro_batch", micro_batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if seq_len > cfg.max_seq_len:
        raise ValueError(f"seq_len must be at most the model's maximum sequence length {cfg.max_seq_len}, got {seq_len}")
    if attention is not None and attention != cfg.attention:  # a run's attention given apart from its model's
        cfg = replace(cfg, attention=attention)
    # frozen weights held in 16 bits (held given, or the trainable states) are not cast by autocast
    shape = StepShape(micro_batch=micro_batch, seq_len=seq_len, dtype=dtype, attention=cfg.attention,
                      checkpointing=checkpointing, cast_share=trainable_fraction)
    terms = predict_peak(strategy, cfg, gpus, shape, states=states, optimizer=optimizer,
                         overhead_fraction=overhead_fraction, device=device, fair=fair, shard_group=shard_group,
                         held=held, overlap_comm=overlap_comm, basis=basis, nccl_channels=nccl_channels,
                         trainable_fraction=trainable_fraction, ddp_bucket_view=ddp_bucket_view, deepspeed=deepspeed)
    return with_room(terms, capacity_bytes)


def calibrate_overhead(measured_peak_bytes: int, modeled: PeakTerms) -> float:
    """The overhead fraction that makes ``modeled`` (computed without overhead) equal a measured peak.

    Fit on one run and checked on the others: a share of the peak, because allocator rounding
    and caching grow with what is allocated. Never below 0 (the model may over-count).
    """
    base = modeled.allocated_peak_bytes
    if measured_peak_bytes <= 0 or base <= 0:
        raise ValueError("a calibration needs a positive measured and modeled peak")
    return max(0.0, 1.0 - base / measured_peak_bytes)


def largest_micro_batch(strategy: str, cfg: ModelConfig, gpus: int, capacity_bytes: int, shape: StepShape,
                        limit: int = 65536, **peak_kwargs: Any) -> int:
    """The largest micro-batch (up to ``limit``) whose whole modeled peak fits ``capacity_bytes``; 0 if not even one.

    ``shape`` gives everything but the micro-batch; ``peak_kwargs`` go to :func:`predict_peak`.
    The peak grows with the micro-batch, so a doubling search then bisection finds it.
    """
    from shardscope.costmodel.answer import largest_fitting

    def fits(mb: int) -> bool:
        return predict_peak(strategy, cfg, gpus, replace(shape, micro_batch=mb), **peak_kwargs).fits(capacity_bytes)

    return largest_fitting(fits, limit=limit)


def megatron_layer_bytes(seq_len: int, micro_batch: int, hidden: int, heads: int, recompute: str = "none") -> int:
    """Activation bytes of one Megatron GPT layer, tensor by tensor (16-bit, no tensor parallelism).

    The same counting as for :class:`GPT` applied to the layer of Korthikanti et al. 2022
    ("Reducing Activation Recomputation in Large Transformer Models", section 4.1): LayerNorm,
    multi-head attention with dropout, a 4h GELU MLP with dropout. Kept to check this module's
    method against the paper's published totals (``tests/data/published/memory``).
    ``recompute``: ``none``, ``selective`` (the attention-score tensors recomputed) or ``full``.
    """
    sbh = seq_len * micro_batch * hidden
    as2b = heads * seq_len * seq_len * micro_batch
    attention_linear = {"qkv_input": 2 * sbh, "q_and_k": 4 * sbh, "v": 2 * sbh, "projection_input": 2 * sbh,
                        "projection_dropout_mask": sbh}
    attention_scores = {"softmax_output": 2 * as2b, "softmax_dropout_mask": as2b, "softmax_dropout_output": 2 * as2b}
    mlp = {"fc1_input": 2 * sbh, "gelu_input": 8 * sbh, "fc2_input": 8 * sbh, "dropout_mask": sbh}
    norms = {"layernorm_inputs": 4 * sbh}
    if recompute == "full":
        return 2 * sbh  # only the layer's input is kept
    if recompute not in ("none", "selective"):
        raise ValueError(f"recompute must be none, selective or full, got {recompute!r}")
    parts = {**attention_linear, **mlp, **norms}
    if recompute == "none":
        parts.update(attention_scores)
    return sum(parts.values())


def deepspeed_estimator_states(strategy: str, n_params: int, largest_layer_params: int, gpus: int,
                               offload_optimizer: bool = False, offload_params: bool = False) -> int:
    """Model-state bytes per GPU under DeepSpeed's own assumption (its ``memory.rst``), for ``zero2``/``zero3``.

    DeepSpeed counts 16-bit parameters (2) and gradients (2) plus fp32 gradients, master weights
    and Adam's moments (16) per parameter; ZeRO-2 keeps the 16-bit parameters and gradients whole
    (``4Ψ + 16Ψ/N``), ZeRO-3 shards everything and gathers the largest layer's 16-bit
    parameters and gradients (``4·largest + 18Ψ/N``). Offloading moves the 16 (and, for
    ZeRO-3 parameters, the 2) to the CPU. Our sharding and offload arithmetic under their bytes.
    """
    if strategy == "zero2":
        return int(2 * n_params if offload_optimizer else 4 * n_params + 16 * n_params / gpus)
    if strategy == "zero3":
        on_gpu = 0 if offload_params else 2
        return int(4 * largest_layer_params + (on_gpu + (0 if offload_optimizer else 16)) * n_params / gpus)
    raise ValueError(f"DeepSpeed publishes estimators for zero2 and zero3 only, not {strategy!r}")
