"""The decoder's shape and the published presets, torch-free (the modeling stages need them too).

:class:`ModelConfig` is the shape of :class:`shardscope.training.model.GPT`; its parameter count
and FLOPs per token are computed here without building the model. Presets carry the published
shapes so parameter counts match the real models; nothing is downloaded.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, fields, replace
from typing import Any

__all__ = ["ACTIVATION_KINDS", "ATTENTION_KINDS", "HEAD_KINDS", "MLP_KINDS", "NORM_KINDS", "PRESETS", "ModelConfig", "parse_model_spec", "resolve_model"]

#: The feed-forward kinds the decoder builds: SwiGLU (gate, up, down) and GELU (up, down).
MLP_KINDS = ("swiglu", "gelu")
#: The norms the decoder builds: RMSNorm as Llama's eager code writes it (a gain, fp32 inside), torch's fused
#: LayerNorm (a gain and a bias) as GPT-2, GPT-NeoX, BLOOM, OPT, Falcon, MPT and the BERT and BART families use, and
#: a fused RMSNorm kernel (torchtitan's ``fused_rmsnorm``, Megatron's and Transformer Engine's) that keeps only its input
#: and the reciprocal RMS for backward.
NORM_KINDS = ("rmsnorm", "layernorm", "fused_rmsnorm")
#: The attention the decoder builds: torch's fused ``scaled_dot_product_attention`` (flash or memory-efficient on a
#: GPU: no score matrix kept), or Hugging Face's eager code (the scores' matmul, scaled, the causal mask added, a
#: float32 softmax cast back, dropout, the matmul with the values; keys and values repeated to every query head).
ATTENTION_KINDS = ("sdpa", "eager")
#: The output heads: a language model's (``lm``: the vocabulary's logits at every token, the cross-entropy over them) or
#: a task's few outputs (``classifier``: Hugging Face's ``...ForSequenceClassification``, ``...ForTokenClassification``,
#: ``...ForQuestionAnswering``, ``...ForMultipleChoice``: a handful of labels per sequence or token, whose weights,
#: FLOPs and activations are negligible beside the blocks', so none are counted).
HEAD_KINDS = ("lm", "classifier")
#: How a GELU MLP's activation is computed: torch's fused kernel (``F.gelu``, which saves its input alone for backward),
#: or ``eager_tanh``, Hugging Face's ``NewGELUActivation`` (``gelu_new``: GPT-2, GPT-J, GPT-Neo, CodeGen, Phi-2), the
#: tanh approximation written as Python tensor ops, ``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``, each of whose
#: intermediates autograd keeps as it needs them for backward.
ACTIVATION_KINDS = ("fused", "eager_tanh")
#: The fields of :class:`ModelConfig` that name one of a few kinds, and those kinds.
_KINDS = {"mlp": MLP_KINDS, "norm": NORM_KINDS, "attention": ATTENTION_KINDS, "head": HEAD_KINDS,
          "activation": ACTIVATION_KINDS}


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
    """Inner size of the MLP (each of SwiGLU's gate and up projections; GELU's one up projection)."""
    vocab_size: int
    """Vocabulary size of the (synthetic) tokens."""
    max_seq_len: int = 2048
    """Longest sequence the model is sized for (no learned positions; recorded for FLOPs)."""
    tie_embeddings: bool = False
    """Share the input embedding with the output head (GPT-2, Llama 3.2 1B) or not (Mistral)."""
    mlp: str = "swiglu"
    """``swiglu`` (Llama, Mistral, Qwen: gate, up and down projections) or ``gelu`` (GPT-2, GPT-NeoX: up and down)."""
    norm: str = "rmsnorm"
    """``rmsnorm`` (Llama, Mistral, Qwen, Gemma, T5 as Hugging Face writes them: eager, upcast to fp32 inside),
    ``layernorm`` (torch's fused LayerNorm with a bias: GPT-2, GPT-NeoX, BLOOM, OPT, Falcon, MPT, BERT and BART
    families) or ``fused_rmsnorm`` (one kernel, as torchtitan's ``fused_rmsnorm`` and Megatron's)."""
    head_size: int | None = None
    """Size of one attention head where it is not ``d_model / n_heads`` (Gemma-7B's 256 beside a width of 3072 over 16
    heads, Qwen3-32B's 128 beside 5120 over 64, T5's ``d_kv``): the queries and the attention output are then
    ``n_heads x head_size`` wide; None: ``d_model / n_heads``."""
    attention: str = "sdpa"
    """``sdpa`` (torch's fused kernel) or ``eager`` (Hugging Face's eager code: :data:`ATTENTION_KINDS`)."""
    attention_dropout: float = 0.0
    """Dropout on the attention probabilities in training (Hugging Face's ``attention_dropout``, GPT-2's
    ``attn_pdrop``, the BERT family's ``attention_probs_dropout_prob``, T5's ``dropout_rate``); eager attention keeps
    its mask and the dropped probabilities for backward, so it is modeled there; 0 for none."""
    head: str = "lm"
    """``lm`` (a vocabulary-sized output head and its loss) or ``classifier`` (a task's few labels: no vocabulary-sized
    weights, logits or loss; :data:`HEAD_KINDS`). Modeled only: the training worker builds language models."""
    activation: str = "fused"
    """A GELU MLP's activation: ``fused`` (torch's kernel) or ``eager_tanh`` (Hugging Face's ``gelu_new`` as Python
    tensor ops: :data:`ACTIVATION_KINDS`); a SwiGLU's SiLU is always torch's kernel."""
    parameter_tensors: int | None = None
    """The real model's trainable parameter tensors (``len([p for p in model.parameters() if p.requires_grad])``) where
    this shape stands in for a model with more of them (a vision tower, a second expert, separate biases); None: the
    stand-in's own count (:meth:`param_tensors`). DeepSpeed's per-parameter gradient hooks fire once per tensor, so
    their host time follows the real count (:mod:`shardscope.costmodel.deepspeed_hooks`). Modeled only: the training
    worker builds the stand-in."""
    cross_attention_layers: int = 0
    """Blocks that also attend over an encoder's output: an encoder-decoder's decoder layers (T5, BART, BlenderBot,
    Whisper), whose encoder and decoder the ``n_layers`` blocks stand for together. Each adds a second attention's
    q, k, v and output weights (k and v read the encoder's width) and its norm, counted in the parameters
    (:meth:`param_count`), the per-block weights (:meth:`block_matmul_params`, spread over the blocks) and the FLOPs
    (:meth:`flops_per_token`, the encoder as long as the decoder); its activations and its non-matmul traffic are not
    represented. 0: a decoder or an encoder alone. Modeled only: the training worker builds the stand-in."""
    experts: int = 0
    """Routed experts of a mixture-of-experts block (Mixtral's ``num_local_experts``, Qwen-MoE's and OLMoE's
    ``num_experts``), each an MLP of ``d_ff``; 0: a dense block whose one MLP is ``d_ff`` wide. Every expert's weights
    are held, sharded and reduced as a dense model's are (no expert parallelism: the data-parallel strategies keep or
    shard all of them); each token runs :attr:`experts_per_token` of them (:attr:`token_mlp_width`). Modeled only:
    the training worker builds dense blocks."""
    experts_per_token: int = 0
    """Experts each token is routed to (``num_experts_per_tok``); with :attr:`experts` only."""
    shared_expert_d_ff: int = 0
    """Inner width of the MLP every token also runs beside its routed experts (Qwen2-MoE's
    ``shared_expert_intermediate_size``, DeepSeek-MoE's ``n_shared_experts x moe_intermediate_size``); 0: none."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "tie_embeddings":
                if not isinstance(value, bool):
                    raise ValueError(f"model.tie_embeddings must be true or false, got {value!r}")
                continue
            if f.name in _KINDS:
                if value not in _KINDS[f.name]:
                    raise ValueError(f"model.{f.name} must be one of {', '.join(_KINDS[f.name])}, got {value!r}")
                continue
            if f.name == "attention_dropout":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                    raise ValueError(f"model.attention_dropout must be a number at least 0 and below 1, got {value!r}")
                continue
            if f.name in ("head_size", "parameter_tensors") and value is None:
                continue
            if f.name in ("experts", "experts_per_token", "shared_expert_d_ff"):
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ValueError(f"model.{f.name} must be a non-negative integer, got {value!r}")
                continue
            if f.name == "cross_attention_layers":
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= self.n_layers:
                    raise ValueError(f"model.cross_attention_layers must be an integer from 0 to model.n_layers "
                                     f"({self.n_layers}), got {value!r}")
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"model.{f.name} must be a positive integer, got {value!r}")
        if self.head_size is None and self.d_model % self.n_heads:
            raise ValueError(f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads}), "
                             "or model.head_size given")
        if self.head == "classifier" and self.tie_embeddings:
            raise ValueError("model.tie_embeddings must be false with model.head classifier (it has no "
                             "vocabulary-sized output to tie to the embedding)")
        if self.activation != "fused" and self.mlp != "gelu":
            raise ValueError(f"model.activation {self.activation} is a GELU MLP's; model.mlp is {self.mlp}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"model.n_heads ({self.n_heads}) must be divisible by model.n_kv_heads ({self.n_kv_heads})")
        if self.experts and not 1 <= self.experts_per_token <= self.experts:
            raise ValueError(f"model.experts_per_token must be from 1 to model.experts ({self.experts}), "
                             f"got {self.experts_per_token}")
        if not self.experts and (self.experts_per_token or self.shared_expert_d_ff):
            raise ValueError("model.experts_per_token and model.shared_expert_d_ff describe a mixture-of-experts "
                             "block: give model.experts too")

    @property
    def head_dim(self) -> int:
        """Size of one attention head (``head_size``, else ``d_model / n_heads``)."""
        return self.head_size or self.d_model // self.n_heads

    @property
    def q_dim(self) -> int:
        """Width of the queries and of the attention output: ``n_heads x head_dim`` (``d_model`` unless
        ``head_size`` says otherwise)."""
        return self.n_heads * self.head_dim

    @property
    def head_outputs(self) -> int:
        """Outputs of the head at every token: the vocabulary for a language model's head, 0 for a classifier's
        (its few labels are not counted)."""
        return self.vocab_size if self.head == "lm" else 0

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices of one MLP, each ``d_model x d_ff``: 3 for SwiGLU, 2 for GELU."""
        return 3 if self.mlp == "swiglu" else 2

    @property
    def token_mlp_width(self) -> int:
        """The MLP width one token runs through: ``d_ff``, or of a mixture-of-experts block its
        :attr:`experts_per_token` experts' and the shared expert's together. Activations, their traffic and FLOPs
        follow it."""
        return self.experts_per_token * self.d_ff + self.shared_expert_d_ff if self.experts else self.d_ff

    @property
    def mlp_weight_width(self) -> int:
        """The MLP width a block holds weights for: ``d_ff``, or every expert's and the shared expert's together.
        Parameters, gradients, optimizer state and their communication follow it."""
        return self.experts * self.d_ff + self.shared_expert_d_ff if self.experts else self.d_ff

    @property
    def router_params(self) -> int:
        """Weights of a mixture-of-experts block's router (``d_model x experts``); 0 for a dense block."""
        return self.d_model * self.experts

    @property
    def fused_norm(self) -> bool:
        """Whether the norm is one kernel (torch's LayerNorm, a fused RMSNorm) that saves its input and per-token
        statistics for backward, rather than the eager RMSNorm's fp32 copies."""
        return self.norm != "rmsnorm"

    @property
    def norm_params(self) -> int:
        """Parameters of one norm: its gain, and LayerNorm's bias."""
        return self.d_model * (2 if self.norm == "layernorm" else 1)

    def param_tensors(self) -> int:
        """Parameter tensors of :class:`GPT` with this shape: the embedding, per block its two norms (a LayerNorm's gain
        and bias), q, the fused k/v, the output and the MLP's matrices, the final norm, and an untied language-model
        head. A Hugging Face model of the same shape has as many or more (separate k and v, biases): this is the
        count DeepSpeed's per-parameter hooks fire for in the worker (:mod:`shardscope.costmodel.deepspeed_hooks`).
        ``parameter_tensors``, where given, is the real model's count and replaces it."""
        if self.parameter_tensors is not None:
            return self.parameter_tensors
        norm = 2 if self.norm == "layernorm" else 1
        head = 1 if self.head == "lm" and not self.tie_embeddings else 0
        cross = self.cross_attention_layers * (norm + 3)  # its norm, q, the fused k/v, the output
        # a mixture-of-experts block: every expert's matrices, the shared expert's, and the router
        mlp = self.mlp_matrices * (self.experts + bool(self.shared_expert_d_ff)) + 1 if self.experts \
            else self.mlp_matrices
        return 1 + self.n_layers * (2 * norm + 3 + mlp) + cross + norm + head

    def attention_params(self) -> int:
        """Weights of one attention: q, the fused k/v (``n_kv_heads`` wide) and the output."""
        kv = self.n_kv_heads * self.head_dim
        return self.d_model * (self.q_dim + 2 * kv) + self.q_dim * self.d_model

    def cross_attention_params(self) -> int:
        """Parameters of every cross-attention together (:attr:`cross_attention_layers`): each one attention's
        weights and its norm."""
        return self.cross_attention_layers * (self.attention_params() + self.norm_params)

    def _own_block_matmul_params(self) -> int:
        """Weights of one block's own matmuls: its attention (:meth:`attention_params`) and its MLP (every expert's
        and the router of a mixture-of-experts block: :attr:`mlp_weight_width`)."""
        return self._block_matmuls(self.mlp_weight_width)

    def _own_block_token_matmul_params(self) -> int:
        """Weights one token is multiplied by in a block: its attention, the MLP width it runs through
        (:attr:`token_mlp_width`) and the router; :meth:`_own_block_matmul_params` for a dense block."""
        return self._block_matmuls(self.token_mlp_width)

    def _block_matmuls(self, mlp_width: int) -> int:
        """A block's attention, an MLP ``mlp_width`` wide and the router (0 for a dense block)."""
        return self.attention_params() + self.mlp_matrices * self.d_model * mlp_width + self.router_params

    def block_matmul_params(self) -> int:
        """Weights of one block's matmuls: q, the fused k/v (``n_kv_heads`` wide), the output and the MLP, and of an
        encoder-decoder the cross-attentions' weights spread evenly over its blocks (so ``n_layers`` times this is
        every block weight; a decoder block holds more, an encoder block less)."""
        cross = self.cross_attention_layers * self.attention_params() // self.n_layers
        return self._own_block_matmul_params() + cross

    def param_count(self) -> int:
        """Exact number of parameters of :class:`GPT` with this shape, computed without building it (and of an
        encoder-decoder's stand-in, its cross-attentions' weights and norms too)."""
        block = self._own_block_matmul_params() + 2 * self.norm_params
        return self.vocab_params() + self.n_layers * block + self.cross_attention_params() + self.norm_params

    def vocab_params(self) -> int:
        """The input embedding's weights, and the output head's where it has its own (untied, a language model's)."""
        return self.vocab_size * self.d_model + (0 if self.tie_embeddings else self.head_outputs * self.d_model)

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward and backward): the matmuls' ``6·N_matmul`` plus attention's scores.

        ``N_matmul`` is every weight a token is multiplied by: each block's matmuls
        (:meth:`block_matmul_params`, GQA's narrower k/v and the MLP's 2 or 3 matrices included; of a
        mixture-of-experts block the experts the token is routed to and the router, not every expert) and the
        LM head's ``V·d`` whether or not it is tied to the embedding (a tied head is still a matmul;
        the embedding's lookup is not one; a classifier's few labels are not counted). The attention term is PaLM's (Chowdhery et al. 2022,
        appendix B): ``12·L·d·seq_len`` for ``QKᵀ`` and ``PV`` forward (4·d·s) and backward (8·d·s), ``d`` the
        queries' width (:attr:`q_dim`),
        counted over the full square as ``FlopCounterMode`` counts the math kernel; a causal flash
        kernel skips about half of it. An encoder-decoder's cross-attentions add their weights and their scores
        over an encoder of ``seq_len`` tokens. Not counted (neither here nor by the counter): norms,
        softmax, activations, rotary and the loss, each O(d) or O(V) per token, not O(d²).
        """
        blocks = self.n_layers * self._own_block_token_matmul_params()
        matmul = blocks + self.cross_attention_layers * self.attention_params() + self.head_outputs * self.d_model
        return 6.0 * matmul + self.attention_flops_per_token(seq_len)

    def attention_flops_per_token(self, seq_len: int) -> float:
        """The attention scores' part of :meth:`flops_per_token`: ``QKᵀ`` and ``PV`` forward and backward over the
        full square, ``12·d·seq_len`` per attention (``d`` the queries' width), every block's and every
        cross-attention's."""
        return 12.0 * (self.n_layers + self.cross_attention_layers) * self.q_dim * seq_len

    def to_dict(self) -> dict[str, Any]:
        """Plain dictionary of the shape, as stored with results (``head_size`` only where it is set, ``norm`` only
        where it is not RMSNorm, ``attention`` and ``attention_dropout`` only where not fused and none, ``head`` only
        where it is not a language model's, ``activation`` only where not fused, ``parameter_tensors`` only where
        given, ``cross_attention_layers`` and the experts' fields only where there are some, so a shape that has none
        of them is stored as it always was)."""
        out = asdict(self)
        for key, default in (("head_size", None), ("norm", "rmsnorm"), ("attention", "sdpa"), ("attention_dropout", 0.0),
                             ("head", "lm"), ("activation", "fused"), ("parameter_tensors", None),
                             ("cross_attention_layers", 0), ("experts", 0), ("experts_per_token", 0),
                             ("shared_expert_d_ff", 0)):
            if out[key] == default:
                del out[key]
        return out


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
        raise ValueError(f"unknown model preset {name!r}; expected one of {', '.join(PRESETS)}, a JSON object of "
                         "dimensions or the path of a Hugging Face config.json")
    return PRESETS[name]


def looks_like_path(spec: str) -> bool:
    """Whether a ``--model`` string names a file (a ``.json`` name or a path with a folder) rather than a preset."""
    return spec.endswith(".json") or "/" in spec or "\\" in spec


def resolve_model(spec: str | dict[str, Any]) -> tuple[str, ModelConfig]:
    """A model from a preset name, a Hugging Face ``config.json`` path (or its keys as a dict, :func:`~shardscope.
    contracts.hf_config.looks_like_hf`) or explicit dimensions (a dict, optionally with ``preset`` to override).

    Every problem is a ``ValueError`` of one sentence naming the preset, file or field, so the command
    line can report it as a user error before any process starts.
    """
    if isinstance(spec, str):
        if spec not in PRESETS and looks_like_path(spec):
            from shardscope.contracts.hf_config import read_hf_config

            return read_hf_config(spec)
        return spec, _preset(spec)
    if not isinstance(spec, dict):
        raise ValueError(f"model must be a preset name or an object of dimensions, got {type(spec).__name__}")
    spec = dict(spec)
    from shardscope.contracts.hf_config import looks_like_hf, shape_of

    if looks_like_hf(spec):
        named = spec.get("name") or spec.get("_name_or_path") or spec.get("model_type") or "custom"
        return str(named).rstrip("/").rsplit("/", 1)[-1], shape_of(spec, "--model")
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
    """A ``--model`` value: a preset name or a ``config.json`` path (both kept as text for :func:`resolve_model`),
    or a JSON object of dimensions (as the pipeline passes it)."""
    if not text.lstrip().startswith("{"):
        return text
    try:
        return json.loads(text)  # text starting with "{" parses only as an object
    except json.JSONDecodeError as exc:
        raise ValueError(f"--model looks like JSON but does not parse ({exc.msg} at column {exc.colno})") from None
