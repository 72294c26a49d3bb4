"""FLOPs per token (:meth:`ModelConfig.flops_per_token`) against torch's own counter, ``FlopCounterMode``.

Each shape is built as the real :class:`shardscope.training.model.GPT` at a tiny size (its layer
count, head layout, MLP kind, tying and the vocabulary-to-width proportion of the preset where one
is named) and one forward and backward pass is counted. Counted by both: every matmul (the blocks'
q, fused k/v, output and MLP projections, the LM head, tied or not) forward and backward, and
attention's ``QKᵀ``/``PV`` over the full square (the math SDPA kernel, which the counter sees as
``bmm``; CPU's fused kernel is not registered with the counter). Counted by neither: norms,
softmax, SiLU/GELU, rotary, the loss and the embedding's lookup. So the two agree to a fraction of a
percent; the tolerance of 1% is for nothing but float rounding.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from shardscope.training.model import GPT, PRESETS, ModelConfig

SEQ, BATCH = 64, 2


def shrunk(cfg: ModelConfig) -> ModelConfig:
    """The preset's layout at a size a CPU counts in a second: width 128, head counts kept where they fit,
    the MLP's and the vocabulary's proportion to the width kept, depth at most 3."""
    scale = 128 / cfg.d_model
    heads = min(cfg.n_heads, 8)
    kv = max(1, heads * cfg.n_kv_heads // cfg.n_heads)
    return replace(cfg, n_layers=min(cfg.n_layers, 3), d_model=128, n_heads=heads, n_kv_heads=kv,
                   d_ff=max(8, int(cfg.d_ff * scale)), vocab_size=max(64, int(cfg.vocab_size * scale)),
                   max_seq_len=SEQ)


SHAPES = {
    **{name: shrunk(cfg) for name, cfg in PRESETS.items()},
    "gelu-tied": ModelConfig(n_layers=2, d_model=96, n_heads=4, n_kv_heads=4, d_ff=384, vocab_size=500, max_seq_len=SEQ,
                             tie_embeddings=True, mlp="gelu"),
    "gelu-untied-mqa": ModelConfig(n_layers=3, d_model=64, n_heads=8, n_kv_heads=1, d_ff=256, vocab_size=300,
                                   max_seq_len=SEQ, mlp="gelu"),
    "swiglu-tied-gqa-wide-vocab": ModelConfig(n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_ff=176,
                                              vocab_size=4000, max_seq_len=SEQ, tie_embeddings=True),
    "wide-heads": ModelConfig(n_layers=2, d_model=96, n_heads=4, n_kv_heads=2, d_ff=256, vocab_size=400,
                              max_seq_len=SEQ, head_size=40),
}


def counted_flops_per_token(cfg: ModelConfig) -> float:
    """FlopCounterMode's FLOPs of one forward and backward of the real model, per token."""
    torch.manual_seed(0)
    model = GPT(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (BATCH, SEQ + 1))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(tokens).backward()
    return counter.get_total_flops() / (BATCH * SEQ)


@pytest.mark.parametrize("name", list(SHAPES))
def test_flops_per_token_matches_flop_counter(name: str) -> None:
    cfg = SHAPES[name]
    assert counted_flops_per_token(cfg) == pytest.approx(cfg.flops_per_token(SEQ), rel=0.01)


def test_tied_head_is_counted() -> None:
    """Tying shares the head's weight, not its matmul: the FLOPs are the untied model's."""
    cfg = PRESETS["llama-1b"]
    assert cfg.flops_per_token(2048) == replace(cfg, tie_embeddings=False).flops_per_token(2048)
    assert cfg.flops_per_token(2048) - 6 * cfg.n_layers * cfg.block_matmul_params() \
        == pytest.approx(6 * cfg.vocab_size * cfg.d_model + 12 * cfg.n_layers * cfg.d_model * 2048)


def test_gelu_mlp_has_two_matrices() -> None:
    swiglu = ModelConfig(n_layers=1, d_model=32, n_heads=4, n_kv_heads=4, d_ff=64, vocab_size=50)
    gelu = replace(swiglu, mlp="gelu")
    assert swiglu.param_count() - gelu.param_count() == 32 * 64
    assert sum(p.numel() for p in GPT(gelu).parameters()) == gelu.param_count()


def test_the_worker_refuses_a_classifier_head_it_cannot_build() -> None:
    """A classifier head is modeled (advise, memory, predict), never trained as a language model in its place."""
    cfg = replace(PRESETS["tiny"], head="classifier")
    with pytest.raises(ValueError, match="builds language models; model.head 'classifier' is modeled only"):
        GPT(cfg)
