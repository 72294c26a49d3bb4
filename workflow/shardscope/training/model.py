"""A GPT-style decoder you can read in one sitting (nanoGPT shape, Llama/Mistral details).

Pre-norm blocks of grouped-query attention and a SwiGLU MLP with RMSNorm, untied embeddings,
as in Llama and Mistral (a GELU MLP, LayerNorm and tied embeddings where the shape asks, as in GPT-2). Its
shape and the published presets live in :mod:`shardscope.contracts.models` (torch-free); the
weights are random, and nothing is downloaded.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from shardscope.contracts.models import PRESETS, ModelConfig, parse_model_spec, resolve_model

__all__ = ["GPT", "PRESETS", "ModelConfig", "assert_param_count", "parse_model_spec", "resolve_model", "synthetic_batch"]


class RMSNorm(nn.Module):
    """Root-mean-square layer norm (no bias), as in Llama and Mistral."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norm = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return norm.type_as(x) * self.weight


class _FusedRMSNormFunction(torch.autograd.Function):
    """RMSNorm with a fused kernel's autograd: only the input and the reciprocal RMS per token are saved, and backward
    recomputes the normalised input from them (as torchtitan's and Megatron's fused kernels do)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:  # noqa: ANN001
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return (x.float() * rstd).type_as(x) * weight

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:  # noqa: ANN001
        x, weight, rstd = ctx.saved_tensors
        normed = x.float() * rstd
        weighted = (grad * weight).float()
        grad_weight = (grad.float() * normed).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
        grad_x = rstd * (weighted - normed * (weighted * normed).mean(-1, keepdim=True))
        return grad_x.to(x.dtype), grad_weight, None


class FusedRMSNorm(RMSNorm):
    """:class:`RMSNorm` as one fused kernel's autograd sees it (``norm: fused_rmsnorm``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _FusedRMSNormFunction.apply(x, self.weight, self.eps)


def make_norm(cfg: ModelConfig) -> nn.Module:
    """The block's norm as ``cfg.norm`` says: :class:`RMSNorm`, torch's fused ``nn.LayerNorm`` (with a bias) or
    :class:`FusedRMSNorm`."""
    if cfg.norm == "layernorm":
        return nn.LayerNorm(cfg.d_model, eps=1e-5)
    return FusedRMSNorm(cfg.d_model) if cfg.norm == "fused_rmsnorm" else RMSNorm(cfg.d_model)


def rotary(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of ``x`` with shape (batch, heads, seq, head_dim)."""
    _, _, seq, dim = x.shape
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim))
    angles = torch.outer(torch.arange(seq, device=x.device, dtype=torch.float32), inv_freq)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Attention(nn.Module):
    """Causal grouped-query self-attention with rotary positions: torch's fused kernel, or Hugging Face's eager code
    (``cfg.attention``, :func:`eager_attention`)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        kv = cfg.n_kv_heads * cfg.head_dim
        self.wq = nn.Linear(cfg.d_model, cfg.q_dim, bias=False)
        self.wkv = nn.Linear(cfg.d_model, 2 * kv, bias=False)
        self.wo = nn.Linear(cfg.q_dim, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        c = self.cfg
        q = self.wq(x).view(b, t, c.n_heads, c.head_dim).transpose(1, 2)
        k, v = self.wkv(x).view(b, t, 2, c.n_kv_heads, c.head_dim).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        if c.attention == "eager":
            y = eager_attention(rotary(q), rotary(k), v, c.attention_dropout if self.training else 0.0)
        else:
            y = F.scaled_dot_product_attention(rotary(q), rotary(k), v, is_causal=True,
                                               enable_gqa=c.n_kv_heads != c.n_heads)
        return self.wo(y.transpose(1, 2).reshape(b, t, c.q_dim))


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout: float) -> torch.Tensor:
    """Causal attention as Hugging Face's eager code computes it (``eager_attention_forward`` of its Llama): keys and
    values repeated to every query head, the scores' matmul scaled, the causal mask added, the softmax in float32 cast
    back to the compute dtype, dropout in training, the matmul with the values. Every intermediate is a real tensor of
    ``heads x seq x seq`` per sequence, which is why it is modeled apart from the fused kernel."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    seq = q.shape[2]
    mask = torch.full((seq, seq), float("-inf"), device=q.device, dtype=q.dtype).triu(1)
    scores = torch.matmul(q, k.transpose(2, 3)) * q.shape[-1] ** -0.5 + mask
    probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    probs = F.dropout(probs, p=dropout, training=dropout > 0)
    return torch.matmul(probs, v)


class MLP(nn.Module):
    """SwiGLU feed-forward: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.up = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class GeluMLP(nn.Module):
    """GELU feed-forward of GPT-2 and GPT-NeoX (``mlp: gelu``): ``down(gelu(up(x)))``, no biases; the GELU torch's
    kernel or Hugging Face's eager ops (``activation``)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.up = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)
        self.eager = cfg.activation == "eager_tanh"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        up = self.up(x)
        return self.down(eager_tanh_gelu(up) if self.eager else F.gelu(up, approximate="tanh"))


def eager_tanh_gelu(x: torch.Tensor) -> torch.Tensor:
    """The tanh GELU as Hugging Face's ``NewGELUActivation`` (``gelu_new``) computes it, op by op, so that autograd keeps
    its intermediates as it does there (``ModelConfig.activation``: ``eager_tanh``)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Block(nn.Module):
    """One pre-norm transformer block."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = make_norm(cfg)
        self.attn = Attention(cfg)
        self.mlp_norm = make_norm(cfg)
        self.mlp = MLP(cfg) if cfg.mlp == "swiglu" else GeluMLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class GPT(nn.Module):
    """The decoder: embedding, blocks, final norm, output head; returns the LM loss."""

    def __init__(self, cfg: ModelConfig) -> None:
        if cfg.head != "lm":
            raise ValueError(f"the training worker builds language models; model.head {cfg.head!r} is modeled only "
                             "(advise, memory, predict)")
        if cfg.cross_attention_layers:
            raise ValueError("the training worker builds decoders; model.cross_attention_layers (an encoder-decoder's) "
                             "is modeled only (advise, memory, predict)")
        if cfg.experts:
            raise ValueError("the training worker builds dense blocks; model.experts (a mixture-of-experts model's) is "
                             "modeled only (advise, memory, predict)")
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = make_norm(cfg)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init_weights)
        if cfg.tie_embeddings:
            self.head.weight = self.embed.weight

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens[:, :-1])
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))


def synthetic_batch(cfg: ModelConfig, batch: int, seq_len: int, step: int, rank: int, device: torch.device) -> torch.Tensor:
    """Random token ids for one step of one rank, reproducible from (step, rank)."""
    gen = torch.Generator().manual_seed(1_000_003 * step + rank)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq_len + 1), generator=gen)
    return tokens.to(device)


def assert_param_count(model: nn.Module, cfg: ModelConfig) -> None:
    """Guard that :meth:`ModelConfig.param_count` describes the module actually built."""
    built = sum(p.numel() for p in model.parameters())
    if built != cfg.param_count():
        raise AssertionError(f"built {built} parameters, formula says {cfg.param_count()}")


