"""A GPT-style decoder you can read in one sitting (nanoGPT shape, Llama/Mistral details).

Pre-norm blocks of grouped-query attention and a SwiGLU MLP with RMSNorm, untied embeddings,
as in Llama and Mistral. Presets carry the published shapes so parameter counts match the
real models; the weights are random, and nothing is downloaded.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, fields, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the decoder."""

    n_layers: int
    """Number of transformer blocks."""
    d_model: int
    """Hidden size."""
    n_heads: int
    """Attention (query) heads; ``d_model`` must divide evenly."""
    n_kv_heads: int
    """Key/value heads (grouped-query attention); divides ``n_heads``."""
    d_ff: int
    """Inner size of the SwiGLU MLP."""
    vocab_size: int
    """Vocabulary size of the (synthetic) tokens."""
    max_seq_len: int = 2048
    """Longest sequence the model is sized for (no learned positions; recorded for FLOPs)."""
    tie_embeddings: bool = False
    """Share the input embedding with the output head (GPT-2, Llama 3.2 1B) or not (Mistral)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "tie_embeddings":
                if not isinstance(value, bool):
                    raise ValueError(f"model.tie_embeddings must be true or false, got {value!r}")
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"model.{f.name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads})")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"model.n_heads ({self.n_heads}) must be divisible by model.n_kv_heads ({self.n_kv_heads})")

    @property
    def head_dim(self) -> int:
        """Size of one attention head."""
        return self.d_model // self.n_heads

    def param_count(self) -> int:
        """Exact number of parameters of :class:`GPT` with this shape, computed without building it."""
        kv = self.n_kv_heads * self.head_dim
        attn = self.d_model * (self.d_model + 2 * kv) + self.d_model * self.d_model
        mlp = 3 * self.d_model * self.d_ff
        block = attn + mlp + 2 * self.d_model
        embeddings = (1 if self.tie_embeddings else 2) * self.vocab_size * self.d_model
        return embeddings + self.n_layers * block + self.d_model

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6·N for the matmuls plus attention scores (PaLM appendix B)."""
        non_embedding = self.param_count() - self.vocab_size * self.d_model
        return 6.0 * non_embedding + 12.0 * self.n_layers * self.d_model * seq_len

    def to_dict(self) -> dict[str, Any]:
        """Plain dictionary of the shape, as stored with results."""
        return asdict(self)


#: Published shapes. Mistral-7B: 32 layers, hidden 4096, 32 heads, 8 KV heads, MLP 14336, vocab 32000
#: (7.24 B). Llama 3.2 1B: 16 x 2048, 32/8 heads, MLP 8192, vocab 128256, tied (1.24 B). GPT-2 small
#: keeps its 12 x 768 shape and tied embeddings; its GELU MLP of 3072 becomes a SwiGLU of 2048
#: (same weights per block) and rotary replaces learned positions: 123.5 M against 124.4 M.
PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(n_layers=2, d_model=128, n_heads=4, n_kv_heads=4, d_ff=512, vocab_size=1024, max_seq_len=128),
    "gpt2-small": ModelConfig(n_layers=12, d_model=768, n_heads=12, n_kv_heads=12, d_ff=2048, vocab_size=50257, max_seq_len=1024, tie_embeddings=True),
    "llama-1b": ModelConfig(n_layers=16, d_model=2048, n_heads=32, n_kv_heads=8, d_ff=8192, vocab_size=128256, max_seq_len=2048, tie_embeddings=True),
    "mistral-7b": ModelConfig(n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=32000, max_seq_len=4096),
}


def _preset(name: Any) -> ModelConfig:
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; expected one of {', '.join(PRESETS)} or explicit dimensions")
    return PRESETS[name]


def resolve_model(spec: str | dict[str, Any]) -> tuple[str, ModelConfig]:
    """A model from a preset name or explicit dimensions (a dict, optionally with ``preset`` to override).

    Every problem is a ``ValueError`` of one sentence naming the preset or field, so the command
    line can report it as a user error before any process starts.
    """
    if isinstance(spec, str):
        return spec, _preset(spec)
    if not isinstance(spec, dict):
        raise ValueError(f"model must be a preset name or an object of dimensions, got {type(spec).__name__}")
    spec = dict(spec)
    name = spec.pop("name", None)
    base = spec.pop("preset", None)
    known = {f.name for f in fields(ModelConfig)}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise ValueError(f"unknown model field(s) {', '.join(unknown)}; expected some of name, preset, {', '.join(sorted(known))}")
    if base is not None:
        config = replace(_preset(base), **spec)
    else:
        missing = [f.name for f in fields(ModelConfig) if f.name not in spec and f.default is MISSING]
        if missing:
            raise ValueError(f"model without a preset needs {', '.join(missing)}")
        config = ModelConfig(**spec)
    return name or base or "custom", config


def parse_model_spec(text: str) -> str | dict[str, Any]:
    """A ``--model`` value: a preset name, or a JSON object of dimensions (as the pipeline passes it)."""
    if not text.lstrip().startswith("{"):
        return text
    try:
        return json.loads(text)  # text starting with "{" parses only as an object
    except json.JSONDecodeError as exc:
        raise ValueError(f"--model looks like JSON but does not parse ({exc.msg} at column {exc.colno})") from None


class RMSNorm(nn.Module):
    """Root-mean-square layer norm (no bias), as in Llama and Mistral."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norm = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return norm.type_as(x) * self.weight


def rotary(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of ``x`` with shape (batch, heads, seq, head_dim)."""
    _, _, seq, dim = x.shape
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim))
    angles = torch.outer(torch.arange(seq, device=x.device, dtype=torch.float32), inv_freq)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Attention(nn.Module):
    """Causal grouped-query self-attention with rotary positions."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        kv = cfg.n_kv_heads * cfg.head_dim
        self.wq = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.wkv = nn.Linear(cfg.d_model, 2 * kv, bias=False)
        self.wo = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        c = self.cfg
        q = self.wq(x).view(b, t, c.n_heads, c.head_dim).transpose(1, 2)
        k, v = self.wkv(x).view(b, t, 2, c.n_kv_heads, c.head_dim).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        y = F.scaled_dot_product_attention(rotary(q), rotary(k), v, is_causal=True, enable_gqa=c.n_kv_heads != c.n_heads)
        return self.wo(y.transpose(1, 2).reshape(b, t, c.d_model))


class MLP(nn.Module):
    """SwiGLU feed-forward: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.up = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    """One pre-norm transformer block."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class GPT(nn.Module):
    """The decoder: embedding, blocks, final norm, output head; returns the LM loss."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model)
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


