"""The step model's non-matmul traffic (costmodel/elementwise.py) against the decoder it describes, traced op by op.

The coefficients were read from five shapes (widths 256-512); these shapes share none of their widths, head counts,
KV widths, MLP sizes, vocabularies, depths or token counts, so a coefficient that described those five shapes rather
than the ops would show here. Every policy and both MLPs; the whole micro-batch (blocks, the ops outside them and
autocast's weight casts) within 1%, and a block's forward (what full checkpointing streams again) within 1%.
"""

from __future__ import annotations

import pytest

from shardscope.contracts.models import ModelConfig
from shardscope.costmodel.elementwise import BLOCK_FORWARD_BYTES_PER_TOKEN, elementwise_bytes
from shardscope.training.kernel_traffic import POLICIES, traced_traffic

UNSEEN = [
    ModelConfig(n_layers=3, d_model=320, n_heads=5, n_kv_heads=1, d_ff=960, vocab_size=777, max_seq_len=512),
    ModelConfig(n_layers=2, d_model=448, n_heads=7, n_kv_heads=7, d_ff=1792, vocab_size=1500, max_seq_len=512,
                mlp="gelu", tie_embeddings=True),
    ModelConfig(n_layers=2, d_model=288, n_heads=6, n_kv_heads=2, d_ff=800, vocab_size=640, max_seq_len=512,
                head_size=80),
    ModelConfig(n_layers=3, d_model=416, n_heads=13, n_kv_heads=13, d_ff=1664, vocab_size=1200, max_seq_len=512,
                mlp="gelu", tie_embeddings=True, norm="layernorm"),
]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("cfg", UNSEEN, ids=["swiglu-mqa", "gelu-tied", "wide-heads", "layernorm"])
def test_a_micro_batch_streams_what_the_coefficients_say(cfg: ModelConfig, policy: str) -> None:
    forward, backward = traced_traffic(cfg, micro_batch=3, seq_len=96, policy=policy)
    assert elementwise_bytes(cfg, 3 * 96, policy) == pytest.approx(forward.bytes + backward.bytes, rel=0.01)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("which", [2, 3], ids=["wide-heads", "layernorm"])
def test_a_blocks_forward_is_what_checkpointing_streams_again(policy: str, which: int) -> None:
    from dataclasses import replace

    cfg = UNSEEN[which]
    deeper = replace(cfg, n_layers=cfg.n_layers + 2)

    def two_blocks_forward(micro_batch: int) -> int:
        return traced_traffic(deeper, micro_batch, 160, policy)[0].bytes - traced_traffic(cfg, micro_batch, 160, policy)[0].bytes

    # the slope in tokens: what each token costs (the weight casts and rotary tables of a micro-batch cancel)
    per_token = (two_blocks_forward(4) - two_blocks_forward(1)) / 2 / (3 * 160)
    c_h, c_q, c_kv, c_f, c_a = BLOCK_FORWARD_BYTES_PER_TOKEN[(policy, cfg.mlp, cfg.norm)]
    modeled = (c_h * cfg.d_model + c_q * cfg.q_dim + c_kv * cfg.n_kv_heads * cfg.head_dim + c_f * cfg.d_ff
               + c_a * cfg.n_heads)
    assert modeled == pytest.approx(per_token, rel=0.01)


def test_a_fused_layernorm_streams_less_than_the_eager_rmsnorm() -> None:
    """The eager RMSNorm upcasts to fp32 and streams several copies; torch's fused LayerNorm one read and write."""
    from dataclasses import replace

    cfg = UNSEEN[0]
    for policy in POLICIES:
        rms = sum(t.bytes for t in traced_traffic(cfg, 2, 64, policy))
        fused = sum(t.bytes for t in traced_traffic(replace(cfg, norm="layernorm"), 2, 64, policy))
        assert fused < 0.8 * rms


def test_autocast_streams_more_than_a_bf16_model_and_float32_most_per_element() -> None:
    """Autocast keeps the residual stream and norms in fp32 and casts every weight twice a micro-batch, so it moves more
    bytes than the same model held in bf16; a float32 model moves 4-byte elements through the same ops."""
    cfg = UNSEEN[0]
    traced = {p: sum(t.bytes for t in traced_traffic(cfg, 2, 64, p)) for p in POLICIES}
    assert traced["bf16"] < traced["autocast"] and traced["bf16"] < traced["fp32"]


def test_a_fused_rmsnorm_kernel_streams_as_torchs_fused_layernorm_does() -> None:
    """The fused RMSNorm's stand-in here is a custom autograd function whose CPU ops show the eager math's bytes, so its
    traffic is the traced fused LayerNorm's: one read and one write of each tensor (costmodel/elementwise.py)."""
    from dataclasses import replace

    cfg = UNSEEN[0]
    fused = elementwise_bytes(replace(cfg, norm="fused_rmsnorm"), 4096, "bf16")
    assert fused == elementwise_bytes(replace(cfg, norm="layernorm"), 4096, "bf16")
    assert fused < 0.7 * elementwise_bytes(cfg, 4096, "bf16")


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("cfg", UNSEEN, ids=["swiglu-mqa", "gelu-tied", "wide-heads", "layernorm"])
def test_eager_attention_streams_its_score_matrices_as_the_coefficients_say(cfg: ModelConfig, policy: str) -> None:
    """Hugging Face's eager attention (scale, causal mask, float32 softmax and its cast, forward and backward) on the
    shapes above, none of which its coefficients were solved from: the whole micro-batch within 1%."""
    from dataclasses import replace

    eager = replace(cfg, attention="eager")
    forward, backward = traced_traffic(eager, micro_batch=2, seq_len=120, policy=policy)
    assert elementwise_bytes(eager, 2 * 120, policy, seq_len=120) == pytest.approx(forward.bytes + backward.bytes,
                                                                                   rel=0.01)
    assert elementwise_bytes(eager, 2 * 120, policy, seq_len=120) > elementwise_bytes(cfg, 2 * 120, policy)
    with pytest.raises(ValueError, match="seq_len"):
        elementwise_bytes(eager, 2 * 120, policy)


@pytest.mark.parametrize("policy", ["fp32", "bf16"])
@pytest.mark.parametrize("which", [1, 3], ids=["gelu-tied", "layernorm"])
def test_the_eager_tanh_gelu_streams_its_chain_as_the_coefficients_say(policy: str, which: int) -> None:
    """Hugging Face's ``gelu_new`` as Python ops (``activation: eager_tanh``) on two GELU shapes its coefficients were
    not traced on: the whole micro-batch within 1%, and with a recompute its forward chain once more. (Autocast is
    derived for a GPU, where CUDA's autocast runs ``pow`` in fp32, so its CPU trace is not the model's.)"""
    from dataclasses import replace

    eager = replace(UNSEEN[which], activation="eager_tanh")
    forward, backward = traced_traffic(eager, micro_batch=2, seq_len=88, policy=policy)
    assert elementwise_bytes(eager, 2 * 88, policy) == pytest.approx(forward.bytes + backward.bytes, rel=0.01)
    plain = UNSEEN[which]
    extra_forward = traced_traffic(eager, 2, 88, policy)[0].bytes - traced_traffic(plain, 2, 88, policy)[0].bytes
    recompute = elementwise_bytes(eager, 2 * 88, policy, recompute=1.0) - elementwise_bytes(eager, 2 * 88, policy)
    plain_recompute = elementwise_bytes(plain, 2 * 88, policy, recompute=1.0) - elementwise_bytes(plain, 2 * 88, policy)
    assert recompute - plain_recompute == pytest.approx(extra_forward, rel=0.01)


@pytest.mark.parametrize("implementation", ["foreach", "fused", "for-loop"])
def test_an_adamw_step_streams_what_the_update_model_says(implementation: str) -> None:
    """torch's AdamW, traced op by op: the fused kernel reads and writes each state once (DeepSpeed's FusedAdam moves
    the same bytes), the default multi-tensor chain and the old per-tensor loop three times as much; clipping reads the
    gradient for the norm and scales it in place."""
    from shardscope.costmodel.optimizer_step import (ADAM_BYTES_PER_PARAM, CLIP_BYTES_PER_PARAM,
                                                     FOREACH_ADAM_BYTES_PER_PARAM)
    from shardscope.training.kernel_traffic import traced_update_bytes

    step, clip = traced_update_bytes(implementation, tensors=3, elements=300_000)
    modeled = ADAM_BYTES_PER_PARAM if implementation == "fused" else FOREACH_ADAM_BYTES_PER_PARAM
    assert step == pytest.approx(modeled, rel=1e-3)
    assert clip == pytest.approx(CLIP_BYTES_PER_PARAM, rel=1e-3)
