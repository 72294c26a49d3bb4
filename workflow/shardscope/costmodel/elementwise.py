"""Modeled memory traffic of the ops of a training step that are not matmuls: the bandwidth-bound part of compute.

A step's matmuls run near the GPU's FLOP peak; everything else an eager step does (norms, rotary, the MLP's
activation and product, residual adds, autocast's casts, the loss, and the backward of each) streams its tensors
through memory once per op. Those bytes cost ``bytes / (bandwidth x share)`` whatever the FLOP peak, so they are a
small part of a float32 step on CUDA cores and a large part of a 16-bit step on tensor cores: the reason measured
16-bit speed-ups are 1.5-3x where the two peaks are 8x apart, and the reason autocast (fp32 residual stream and
norms, a bf16 cast of every matmul input and weight) is slower than a model held in 16 bits (DeepSpeed's engine,
FSDP's mixed precision).

The coefficients are traced, not fitted to any timing: :func:`shardscope.training.kernel_traffic.traced_traffic`
ran this project's decoder (:class:`shardscope.training.model.GPT`, eager PyTorch, SDPA attention) forward and
backward on CPU under a ``TorchDispatchMode`` that adds up the input and output bytes of every op that is neither
a view nor a matmul, at 1 and 2 blocks and 128 and 512 tokens, on seven shapes (widths 256-512, 1-4 KV-head ratios, MLPs of 2-4x the
width, two with heads wider or narrower than the width over their count), with each of the two norms the decoder
builds, and solved per token and block for
``c_h·h + c_q·q + c_kv·kv + c_f·f + c_a·a`` (``q`` the queries' width, ``kv`` the KV width, ``f`` the MLP's inner
size, ``a`` the heads; every residual under 0.01%), and outside the blocks for
``c_V·V + c_h·h`` (embedding, final norm, head, loss). ``tests/training/test_kernel_traffic.py`` traces shapes none
of these were read from and compares. What the coefficients describe is an eager step as PyTorch runs it (no
``torch.compile``, no fused rotary or activation kernels; the norm eager or fused as ``ModelConfig.norm`` says); a
compiled step moves fewer bytes. The matmul ceiling is the published efficiency point less this traffic
(:func:`shardscope.costmodel.step.matmul_efficiency`).

Every number here is modeled. Torch-free.
"""

from __future__ import annotations

from shardscope.contracts.models import ModelConfig

#: Bytes per token per block of the non-matmul ops, forward and backward together, as
#: ``(c_h, c_q, c_kv, c_f, c_a)`` per (compute policy, MLP kind, norm); see the module docstring for how they were
#: traced. ``fp32``: a float32 model; ``autocast``: fp32 weights under bf16 autocast (DDP); ``bf16``: weights held in
#: bf16 (DeepSpeed's engine, FSDP's ``MixedPrecisionPolicy``). The eager RMSNorm (Llama's code, this worker's) upcasts
#: to fp32 inside and streams several fp32 copies; torch's fused LayerNorm reads and writes each tensor once, so its
#: blocks stream 35-55% fewer bytes.
BLOCK_BYTES_PER_TOKEN: dict[tuple[str, str, str], tuple[float, float, float, float, float]] = {
    ("fp32", "swiglu", "rmsnorm"): (319.6, 108.2, 108.1, 56.1, 13.6),
    ("autocast", "swiglu", "rmsnorm"): (375.6, 54.2, 54.1, 28.1, 13.6),
    ("bf16", "swiglu", "rmsnorm"): (311.6, 54.2, 54.1, 28.1, 13.6),
    ("fp32", "gelu", "rmsnorm"): (307.6, 108.2, 108.1, 20.1, 13.6),
    ("autocast", "gelu", "rmsnorm"): (351.6, 54.2, 54.1, 10.1, 13.6),
    ("bf16", "gelu", "rmsnorm"): (305.6, 54.2, 54.1, 10.1, 13.6),
    ("fp32", "swiglu", "layernorm"): (111.9, 108.1, 108.0, 56.0, 3.6),
    ("autocast", "swiglu", "layernorm"): (167.9, 54.1, 54.0, 28.0, 3.6),
    ("bf16", "swiglu", "layernorm"): (55.9, 54.0, 54.0, 28.0, 1.8),
    ("fp32", "gelu", "layernorm"): (99.9, 108.1, 108.0, 20.0, 3.6),
    ("autocast", "gelu", "layernorm"): (143.9, 54.1, 54.0, 10.0, 3.6),
    ("bf16", "gelu", "layernorm"): (49.9, 54.0, 54.0, 10.0, 1.8),
}
#: The forward's share of :data:`BLOCK_BYTES_PER_TOKEN` (traced the same way): what full activation checkpointing
#: streams a second time when backward recomputes each block.
BLOCK_FORWARD_BYTES_PER_TOKEN: dict[tuple[str, str, str], tuple[float, float, float, float, float]] = {
    ("fp32", "swiglu", "rmsnorm"): (79.8, 44.1, 36.0, 20.0, 5.4),
    ("autocast", "swiglu", "rmsnorm"): (99.8, 22.1, 18.0, 10.0, 5.4),
    ("bf16", "swiglu", "rmsnorm"): (95.8, 22.1, 18.0, 10.0, 5.4),
    ("fp32", "gelu", "rmsnorm"): (79.8, 44.1, 36.0, 8.0, 5.4),
    ("autocast", "gelu", "rmsnorm"): (93.8, 22.1, 18.0, 4.0, 5.4),
    ("bf16", "gelu", "rmsnorm"): (95.8, 22.1, 18.0, 4.0, 5.4),
    ("fp32", "swiglu", "layernorm"): (39.9, 44.0, 36.0, 20.0, 1.8),
    ("autocast", "swiglu", "layernorm"): (59.9, 22.0, 18.0, 10.0, 1.8),
    ("bf16", "swiglu", "layernorm"): (20.0, 22.0, 18.0, 10.0, 0.9),
    ("fp32", "gelu", "layernorm"): (39.9, 44.0, 36.0, 8.0, 1.8),
    ("autocast", "gelu", "layernorm"): (53.9, 22.0, 18.0, 4.0, 1.8),
    ("bf16", "gelu", "layernorm"): (20.0, 22.0, 18.0, 4.0, 0.9),
}
#: Bytes per token outside the blocks, forward and backward, as ``(c_V, c_h)``: the embedding's lookup and its
#: gradient, the final norm, and the loss's passes over the logits (cast to fp32, log-softmax and its backward).
OUTSIDE_BYTES_PER_TOKEN: dict[tuple[str, str], tuple[float, float]] = {
    ("fp32", "rmsnorm"): (32.0, 132.4), ("autocast", "rmsnorm"): (44.0, 144.4), ("bf16", "rmsnorm"): (44.0, 142.4),
    ("fp32", "layernorm"): (32.0, 28.2), ("autocast", "layernorm"): (44.0, 40.2), ("bf16", "layernorm"): (44.0, 14.2),
}
#: Norms whose traffic another's traced bytes stand for: a fused RMSNorm kernel reads its input and writes its output
#: once each way, as torch's fused LayerNorm does (this project's stand-in for the kernel is a custom autograd function
#: whose CPU ops would show the eager math's bytes, not the kernel's).
TRAFFIC_NORM = {"fused_rmsnorm": "layernorm"}
#: Bytes per weight per micro-batch that autocast adds: each fp32 weight cast to bf16 in forward (read 4, write 2)
#: and its bf16 gradient cast back to fp32 in backward (read 2, write 4); traced as 12.2-12.5 bytes per block weight.
AUTOCAST_WEIGHT_CAST_BYTES = 12
#: Passes over the ``V x h`` embedding per micro-batch in backward, each of the parameters' element size: the lookup's
#: dense gradient, zero-filled and then accumulated into (2), and with tied embeddings also the head's weight gradient
#: added into it (3 more: read both, write one). Traced as 8 and 20 bytes per embedding weight in fp32, 4 and 10 in
#: bf16 (autocast: fp32, beside its casts).
EMBEDDING_GRAD_PASSES = {False: 2, True: 5}
#: Eager attention (:func:`shardscope.training.model.eager_attention`, Hugging Face's code) beside the fused kernel, per
#: block and micro-batch: ``c_as·T·a·s + c_q·T·q + c_kv·T·kv + c_ss·s² + g·(c_gq·T·q + c_gkv·T·kv)`` bytes (``g`` 1 under
#: grouped or multi-query attention: the keys and values repeated to every head), as ``(c_as, c_q, c_kv, c_ss, c_gq,
#: c_gkv)``. Per score element: the scale, the causal mask, the float32 softmax and its cast back, forward and backward
#: (the two matmuls are timed by their FLOPs). Solved from seven traced shapes (MHA, GQA, MQA, wide heads), residuals 0;
#: forward and backward, then the forward alone (what a recompute streams again).
EAGER_ATTENTION_BYTES: dict[str, tuple[float, ...]] = {
    "fp32": (44, 14, 2, 16, 18, 6), "autocast": (56, 7, 1, 8, 9, 3), "bf16": (56, 7, 1, 8, 9, 3)}
EAGER_ATTENTION_FORWARD_BYTES: dict[str, tuple[float, ...]] = {
    "fp32": (24, 8, 0, 16, 8, 0), "autocast": (28, 4, 0, 8, 4, 0), "bf16": (28, 4, 0, 8, 4, 0)}


#: Bytes per MLP element (``T·f`` per block) that the eager tanh GELU (``ModelConfig.activation``: Hugging Face's
#: ``gelu_new`` as Python tensor ops) streams beyond torch's fused kernel, as ``(forward and backward, forward alone)``
#: (the second what a recompute streams again): seven more element-wise kernels forward and ten backward. Traced with
#: :func:`shardscope.training.kernel_traffic.traced_traffic` on two shapes at two token counts each, identical per
#: element: 164 and 64 bytes in fp32, 82 and 32 in bf16. Under autocast on a GPU ``pow`` is one of the ops CUDA's
#: autocast runs in fp32, and the chain after it follows, so fp32's bytes are taken (derived, not traced: CPU
#: autocast keeps the chain in bf16, where it streams bf16's 82 and 32).
EAGER_TANH_BYTES: dict[str, tuple[float, float]] = {"fp32": (164, 64), "autocast": (164, 64), "bf16": (82, 32)}


def eager_dropout_bytes(element: int) -> int:
    """Bytes per score element of dropout on the attention probabilities, forward and backward, as torch's fused GPU
    kernel runs it (derived, not traced: the CPU's dropout is another implementation): forward reads the
    probabilities and writes them and a bool mask, backward reads the gradient and the mask and writes the gradient:
    ``4·e + 2`` for elements of ``element`` bytes."""
    return 4 * element + 2


def eager_attention_traffic(cfg: ModelConfig, tokens: int, seq_len: int, policy: str, recompute: float = 0.0) -> float:
    """Bytes one micro-batch's eager attention streams beyond the fused kernel, every block, with its dropout and the
    share ``recompute`` of its forward that checkpointing runs again; 0 for the fused kernel."""
    if cfg.attention != "eager":
        return 0.0
    gqa = 1 if cfg.n_kv_heads != cfg.n_heads else 0
    q, kv, a = cfg.q_dim, cfg.n_kv_heads * cfg.head_dim, cfg.n_heads
    values = (tokens * a * seq_len, tokens * q, tokens * kv, seq_len * seq_len, gqa * tokens * q, gqa * tokens * kv)
    per_block = _dot(EAGER_ATTENTION_BYTES[policy], values) + recompute * _dot(EAGER_ATTENTION_FORWARD_BYTES[policy], values)
    if cfg.attention_dropout > 0:
        per_block += eager_dropout_bytes(4 if policy == "fp32" else 2) * tokens * a * seq_len * (1 + recompute / 2)
    return cfg.n_layers * per_block


def _dot(coefficients: tuple[float, ...], values: tuple[int, ...]) -> float:
    return sum(c * v for c, v in zip(coefficients, values, strict=True))


def elementwise_bytes(cfg: ModelConfig, tokens: int, policy: str, recompute: float = 0.0,
                      cast_share: float = 1.0, seq_len: int | None = None) -> float:
    """Bytes the non-matmul ops of one micro-batch of ``tokens`` tokens stream through GPU memory, forward and
    backward, in compute ``policy`` (``fp32``, ``autocast`` or ``bf16``): every block's, the ops outside the blocks,
    the share ``recompute`` of the blocks' forward that checkpointing computes again (1 under full), the embedding's gradient (none when
    frozen weights, ``cast_share`` below 1, leave the embedding untrained), autocast's weight casts
    (``cast_share``: the share of the weights held in fp32 that it casts), for eager attention its score
    matrices (:func:`eager_attention_traffic`, sequences of ``seq_len`` tokens) and for the eager tanh GELU its
    element-wise chain (:data:`EAGER_TANH_BYTES`)."""
    norm = TRAFFIC_NORM.get(cfg.norm, cfg.norm)
    key = (policy, cfg.mlp, norm)
    if key not in BLOCK_BYTES_PER_TOKEN:
        raise ValueError(f"no traced traffic for compute policy {policy!r}, MLP {cfg.mlp!r} and norm {cfg.norm!r}")
    shape = (cfg.d_model, cfg.q_dim, cfg.n_kv_heads * cfg.head_dim, cfg.token_mlp_width, cfg.n_heads)
    per_token = _dot(BLOCK_BYTES_PER_TOKEN[key], shape)
    if recompute:
        per_token += float(recompute) * _dot(BLOCK_FORWARD_BYTES_PER_TOKEN[key], shape)
    if cfg.activation == "eager_tanh":
        both, forward = EAGER_TANH_BYTES[policy]
        per_token += cfg.token_mlp_width * (both + float(recompute) * forward)
    per_token = per_token * cfg.n_layers + _dot(OUTSIDE_BYTES_PER_TOKEN[(policy, norm)], (cfg.head_outputs, cfg.d_model))
    per_batch = 0.0
    if cast_share >= 1:
        element = 2 if policy == "bf16" else 4
        per_batch += EMBEDDING_GRAD_PASSES[cfg.tie_embeddings] * element * cfg.vocab_size * cfg.d_model
    casts = 0.0
    if policy == "autocast":
        weights = cfg.n_layers * cfg.block_matmul_params() + cfg.head_outputs * cfg.d_model
        casts = AUTOCAST_WEIGHT_CAST_BYTES * weights * cast_share
    eager = 0.0
    if cfg.attention == "eager":
        if seq_len is None:
            raise ValueError("eager attention's traffic depends on the sequence length: pass seq_len")
        eager = eager_attention_traffic(cfg, tokens, seq_len, policy, float(recompute))
    return per_token * tokens + per_batch + casts + eager
