"""A mixture-of-experts block's saved activations, modeled against what autograd saves.

The block is the worker's :class:`~shardscope.training.model.Block` with its MLP replaced by a sparse mixture routed
as Hugging Face's Mixtral code routes (``MixtralSparseMoeBlock``: a router, a float32 softmax, top-k, the weights
renormalised, then a loop over the experts, each gathering its tokens, running its MLP and scaling its output by their
routing weights, added back with ``index_add_``). ``torch.autograd.graph.saved_tensors_hooks`` sees every tensor the
forward saves for backward; their distinct storages (parameters aside) are the truth
:func:`~shardscope.costmodel.memory_peak.block_activation_bytes` must match, on three shapes and three compute policies
(the third traced only after the model's formula was written from the first two).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from shardscope.contracts.models import resolve_model
from shardscope.costmodel.memory_peak import StepShape, block_activation_bytes
from shardscope.training.model import MLP, Block, GeluMLP
from training.saved_tensors import saved_bytes

SHAPES = ({"d_model": 192, "n_heads": 4, "n_kv_heads": 2, "d_ff": 256, "mlp": "swiglu", "experts": 6,
           "experts_per_token": 2},
          {"d_model": 160, "n_heads": 5, "n_kv_heads": 5, "d_ff": 224, "mlp": "gelu", "experts": 8,
           "experts_per_token": 3},
          # a third, traced after the formula was written from the two above
          {"d_model": 224, "n_heads": 7, "n_kv_heads": 1, "d_ff": 352, "mlp": "swiglu", "experts": 5,
           "experts_per_token": 3, "norm": "layernorm"})
MICRO_BATCH, SEQ = 2, 48


class SparseMoE(nn.Module):
    """Experts routed as Hugging Face's Mixtral code routes them."""

    def __init__(self, cfg) -> None:
        super().__init__()
        self.k = cfg.experts_per_token
        self.gate = nn.Linear(cfg.d_model, cfg.experts, bias=False)
        self.experts = nn.ModuleList((MLP if cfg.mlp == "swiglu" else GeluMLP)(cfg) for _ in range(cfg.experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        flat = x.view(-1, width)
        routing = F.softmax(self.gate(flat), dim=1, dtype=torch.float)
        routing, chosen = torch.topk(routing, self.k, dim=-1)
        routing = (routing / routing.sum(dim=-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(flat)
        mask = F.one_hot(chosen, num_classes=len(self.experts)).permute(2, 1, 0)
        for e, expert in enumerate(self.experts):
            slot, tokens = torch.where(mask[e])
            scaled = expert(flat[None, tokens].reshape(-1, width)) * routing[tokens, slot, None]
            out.index_add_(0, tokens, scaled.to(x.dtype))
        return out.view(batch, seq, width)


@pytest.mark.parametrize("policy", ["fp32", "autocast", "bf16"])
@pytest.mark.parametrize("dims", SHAPES, ids=lambda d: f"{d['mlp']}-{d['experts']}x{d['experts_per_token']}")
def test_an_expert_block_saves_what_the_model_says(dims: dict, policy: str) -> None:
    _, cfg = resolve_model({**dims, "n_layers": 1, "vocab_size": 1000, "max_seq_len": 512})
    dtype = torch.bfloat16 if policy == "bf16" else torch.float32
    torch.manual_seed(0)
    block = Block(replace(cfg, experts=0, experts_per_token=0))  # the worker's dense block, its MLP then replaced
    block.mlp = SparseMoE(cfg)
    block = block.to(dtype)
    x = torch.randn(MICRO_BATCH, SEQ, cfg.d_model, dtype=dtype, requires_grad=True)
    shape = StepShape(micro_batch=MICRO_BATCH, seq_len=SEQ, dtype="float32" if policy == "fp32" else "bfloat16")
    assert block_activation_bytes(cfg, shape, policy) == saved_bytes(block, x, policy)
