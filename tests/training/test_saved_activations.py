"""One block's saved activations, modeled against what autograd saves, on shapes no other test uses.

``torch.autograd.graph.saved_tensors_hooks`` sees every tensor a forward pass saves for backward; summing their
distinct storages (parameters aside) is the truth :func:`block_activation_bytes` must match. Both MLPs (SwiGLU and
GELU), all three compute policies, all weights trained; and frozen weights with a LoRA-style adapter on the query
projection (fp32 and bf16), where a frozen matmul saves no input for a weight gradient.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from shardscope.contracts.models import resolve_model
from shardscope.costmodel.memory_peak import StepShape, block_activation_bytes
from shardscope.training.model import Block
from training.saved_tensors import saved_bytes

SHAPES = ({"d_model": 320, "n_heads": 5, "n_kv_heads": 1, "d_ff": 896, "mlp": "swiglu"},
          {"d_model": 384, "n_heads": 6, "n_kv_heads": 6, "d_ff": 1000, "mlp": "gelu"},
          {"d_model": 192, "n_heads": 4, "n_kv_heads": 2, "d_ff": 832, "mlp": "gelu"},
          # heads wider than the width over their count (Gemma-7B's, Qwen3-32B's, T5-3B's shape of attention)
          {"d_model": 200, "n_heads": 6, "n_kv_heads": 2, "d_ff": 640, "mlp": "swiglu", "head_size": 48},
          # torch's fused LayerNorm (GPT-2, BLOOM, BERT, BART families), GELU and SwiGLU
          {"d_model": 352, "n_heads": 11, "n_kv_heads": 11, "d_ff": 1408, "mlp": "gelu", "norm": "layernorm"},
          {"d_model": 224, "n_heads": 7, "n_kv_heads": 1, "d_ff": 608, "mlp": "swiglu", "norm": "layernorm"},
          # a fused RMSNorm kernel's autograd (torchtitan's fused_rmsnorm)
          {"d_model": 264, "n_heads": 6, "n_kv_heads": 2, "d_ff": 720, "mlp": "swiglu", "norm": "fused_rmsnorm"})
MICRO_BATCH, SEQ = 3, 80


class Adapter(nn.Module):
    """A rank-``r`` LoRA adapter beside a frozen linear: ``base(x) + b(a(x))``."""

    def __init__(self, base: nn.Linear, rank: int = 8) -> None:
        super().__init__()
        self.base = base
        self.a = nn.Linear(base.in_features, rank, bias=False)
        self.b = nn.Linear(rank, base.out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.b(self.a(x))


def _block(dims: dict, policy: str, frozen: bool) -> tuple[int, int]:
    _, cfg = resolve_model({**dims, "n_layers": 1, "vocab_size": 1000, "max_seq_len": 512})
    dtype = torch.bfloat16 if policy == "bf16" else torch.float32
    torch.manual_seed(0)
    block = Block(cfg).to(dtype)
    if frozen:
        block.requires_grad_(False)
        block.attn.wq = Adapter(block.attn.wq).to(dtype)
    x = torch.randn(MICRO_BATCH, SEQ, cfg.d_model, dtype=dtype, requires_grad=True)
    shape = StepShape(micro_batch=MICRO_BATCH, seq_len=SEQ, dtype="float32" if policy == "fp32" else "bfloat16",
                      cast_share=0.001 if frozen else 1.0)
    return block_activation_bytes(cfg, shape, policy), saved_bytes(block, x, policy)


@pytest.mark.parametrize("policy", ["fp32", "autocast", "bf16"])
@pytest.mark.parametrize("dims", SHAPES, ids=lambda d: f"{d['mlp']}-{d['d_model']}{'-q' if 'head_size' in d else ''}"
                         f"{ {'layernorm': '-ln', 'fused_rmsnorm': '-fused'}.get(d.get('norm'), '') }")
def test_a_trained_block_saves_what_the_model_says(dims: dict, policy: str) -> None:
    modeled, saved = _block(dims, policy, frozen=False)
    assert modeled == saved


@pytest.mark.parametrize("policy", ["fp32", "bf16"])
@pytest.mark.parametrize("dims", SHAPES, ids=lambda d: f"{d['mlp']}-{d['d_model']}{'-q' if 'head_size' in d else ''}"
                         f"{ {'layernorm': '-ln', 'fused_rmsnorm': '-fused'}.get(d.get('norm'), '') }")
def test_a_frozen_block_saves_no_inputs_for_weight_gradients(dims: dict, policy: str) -> None:
    """Within 0.5%: the adapter's own rank-sized outputs are all the model leaves out."""
    modeled, saved = _block(dims, policy, frozen=True)
    trained, _ = _block(dims, policy, frozen=False)
    assert modeled == pytest.approx(saved, rel=0.005)
    assert modeled < 0.8 * trained
