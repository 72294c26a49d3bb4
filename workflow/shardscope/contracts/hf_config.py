"""A Hugging Face ``config.json`` read as the decoder's shape (:class:`~shardscope.contracts.models.ModelConfig`).

``--model PATH/config.json`` (and a config file's model keys) describe a real model by the file its
publisher ships: Llama, Mistral, Qwen (``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``num_key_value_heads``, ``intermediate_size``, ``max_position_embeddings``, ``tie_word_embeddings``),
GPT-2 (``n_embd``, ``n_layer``, ``n_head``, ``n_inner``, ``n_positions``), GPT-NeoX (Llama's key names,
a GELU MLP), BLOOM's released files (``n_embed``, ``seq_length``), MPT (``d_model``, ``n_layers``, ``n_heads``,
``expansion_ratio``, ``max_seq_len``) and ChatGLM/GLM-4 (``num_layers``, ``ffn_hidden_size``,
``multi_query_group_num``, ``padded_vocab_size``, ``seq_length``, ``rmsnorm``); a vision-language model's
language model under its ``text_config`` (PaliGemma, LLaVA, Gemma 3; the vision tower not represented); also the
encoders (BERT, RoBERTa, DeBERTa: Llama's key names, a GELU MLP) and the encoder-decoders
(T5: ``d_model``, ``num_layers`` + ``num_decoder_layers``, ``num_heads``, ``d_ff``, ``feed_forward_proj``; BART,
BlenderBot, Marian, Pegasus: ``encoder_layers`` + ``decoder_layers``, ``encoder_attention_heads``,
``encoder_ffn_dim``), whose encoder and decoder stand as one decoder of all their layers, the decoder's
cross-attentions counted in the weights and FLOPs (``ModelConfig.cross_attention_layers``: 14% of T5-large's
weights, 22% of BlenderBot-400M's) but not in the activations. The same keys may come as a JSON object (``--model
'{"hidden_size": ...}'``, :func:`looks_like_hf`), where a ``norm`` key (not one of transformers') may name the norm the
run's framework uses in place of the family's (``fused_rmsnorm`` for torchtitan's fused kernel) and a
``parameter_tensors`` key the real model's count of trainable parameter tensors (for DeepSpeed's per-tensor hooks).
Torch-free and offline: the file is read, nothing is downloaded.

What is kept is what the memory and step models use: width, depth, heads, KV heads, MLP width and
kind, vocabulary, tying, context and the head (a language model's, or a task's few labels where ``architectures``
names a classification, token-classification, question-answering or multiple-choice model). A mixture-of-experts
config (Mixtral, Qwen-MoE, OLMoE, DeepSeek-MoE) is read with every expert's weights and its routing
(:func:`experts_of`). Biases, LayerNorm against RMSNorm and learned position tables
are not modeled (a few tenths of a percent of the parameters).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shardscope.contracts.models import ModelConfig

#: Families whose MLP is ungated (up, activation, down: GELU or ReLU); the others gate it (SwiGLU or GeGLU: gate, up,
#: down). T5's own ``feed_forward_proj`` says which it is (``relu``, ``gated-gelu``); the original T5 checkpoints
#: (t5-small to t5-11b) leave it out and take ``T5Config``'s default, ``relu``, so ``t5`` is listed here too.
UNGATED_FAMILIES = ("gpt2", "gpt_neox", "gptj", "gpt_bigcode", "opt", "falcon", "bloom", "codegen", "phi", "bert",
                    "roberta", "xlm-roberta", "deberta", "deberta-v2", "electra", "bart", "mbart", "blenderbot",
                    "blenderbot-small", "marian", "pegasus", "whisper", "t5", "mpt")
#: Families whose blocks normalise with LayerNorm (torch's fused kernel, with a bias); the others (Llama, Mistral, Qwen,
#: Gemma, T5's T5LayerNorm) with an RMSNorm their modelling code writes out op by op.
LAYERNORM_FAMILIES = ("gpt2", "gpt_neox", "gptj", "gpt_bigcode", "opt", "falcon", "bloom", "codegen", "phi", "bert",
                      "roberta", "xlm-roberta", "deberta", "deberta-v2", "electra", "bart", "mbart", "blenderbot",
                      "blenderbot-small", "marian", "pegasus", "whisper", "mpt", "stablelm", "starcoder2")
#: Families whose config class sets ``tie_word_embeddings`` false when the file leaves it out (Llama, Mistral, Qwen,
#: GPT-NeoX and GPT-J among them); every other family keeps transformers' ``PretrainedConfig`` default, true (GPT-2,
#: BLOOM, OPT, Gemma, T5, BART). A config without a ``model_type`` is untied, as the decoder is by default.
UNTIED_BY_DEFAULT = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gpt_neox", "gptj",
                     "codegen", "phi3", "olmo", "olmo2", "internlm2", "deepseek_v2", "deepseek_v3")
#: Each dimension's keys, the first present wins.
KEYS: dict[str, tuple[str, ...]] = {
    "d_model": ("hidden_size", "n_embd", "d_model", "n_embed"),
    "n_layers": ("num_hidden_layers", "n_layer", "num_layers", "encoder_layers", "n_layers"),
    "n_heads": ("num_attention_heads", "n_head", "num_heads", "encoder_attention_heads", "n_heads"),
    "vocab_size": ("padded_vocab_size", "vocab_size"),
}
#: Keys of the MLP's inner width, the first present wins: Llama's, GPT-2's, OPT's, T5's, BART's, ChatGLM2/3's and
#: GLM-4's ``ffn_hidden_size`` (gated), the first ChatGLM's ``inner_hidden_size`` (ungated).
FF_KEYS = ("intermediate_size", "n_inner", "ffn_dim", "d_ff", "encoder_ffn_dim", "ffn_hidden_size", "inner_hidden_size")
#: Keys of the context the model is sized for, the first present wins: Llama's and most families', GPT-2's, BLOOM's
#: released files' ``seq_length`` (ALiBi: no position table; ChatGLM's too), MPT's ``max_seq_len``, the first
#: ChatGLM's ``max_sequence_length``.
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "seq_length", "max_seq_len", "max_sequence_length")
#: The decoder's depth in an encoder-decoder config, added to the encoder's (``KEYS["n_layers"]``), by the key of the
#: encoder's depth it goes with.
DECODER_LAYERS = {"num_layers": "num_decoder_layers", "encoder_layers": "decoder_layers"}
#: Keys only a Hugging Face config has (shardscope's own fields are ``ModelConfig``'s): one of them in a JSON object
#: makes it a config read by :func:`shape_of`.
HF_ONLY_KEYS = frozenset({"model_type", "hidden_size", "n_embd", "n_embed", "num_hidden_layers", "n_layer",
                          "num_layers", "encoder_layers", "num_attention_heads", "n_head", "num_heads",
                          "encoder_attention_heads",
                          "intermediate_size", "n_inner", "ffn_dim", "encoder_ffn_dim", "num_key_value_heads",
                          "max_position_embeddings", "n_positions", "tie_word_embeddings", "hidden_act",
                          "activation_function", "feed_forward_proj", "architectures"})
#: Keys that name the attention implementation: shardscope's own, and transformers' (``attn_implementation`` as
#: ``from_pretrained`` takes it; ``_attn_implementation`` where a config saved it). ``eager`` is modeled as eager;
#: ``sdpa``, ``flash_attention_2`` and the rest keep no score matrix, as torch's fused kernel.
ATTENTION_KEYS = ("attention", "attn_implementation", "_attn_implementation")
#: Families transformers runs with its eager attention only (no SDPA path), so a config of theirs that names no
#: implementation is read as ``eager``: T5 and its family (T5's "old eager-only path", huggingface/transformers#47014
#: of July 2026, still open, would add one; switch_transformers stays eager there), BLOOM (``BloomPreTrainedModel``
#: declares no ``_supports_sdpa``: its ALiBi scores go through ``baddbmm`` and a float32 softmax) and DeBERTa (its
#: disentangled attention adds content-to-position scores of its own). Other families default to ``sdpa``, which
#: transformers picks wherever torch has it.
EAGER_ONLY_FAMILIES = ("t5", "mt5", "umt5", "longt5", "switch_transformers", "bloom", "deberta", "deberta-v2")
#: Endings of the ``architectures`` whose head is a task's few labels rather than the vocabulary (a ``classifier``
#: head, :data:`~shardscope.contracts.models.HEAD_KINDS`): DeBERTa-v2-xlarge-MNLI's ``DebertaV2ForSequenceClassification``.
CLASSIFIER_ARCHITECTURES = ("ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering",
                            "ForMultipleChoice")
#: Keys that give a mixture-of-experts config its number of experts (Mixtral's ``num_local_experts``, Qwen-MoE's and
#: OLMoE's ``num_experts``, DeepSeek's ``n_routed_experts``, ERNIE's ``moe_num_experts``): the memory and step models
#: hold every expert's weights and run each token through its routed experts (:func:`experts_of`).
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
#: Keys of the experts each token is routed to: Mixtral's, Qwen-MoE's, OLMoE's and DeepSeek's
#: ``num_experts_per_tok``, ERNIE's ``moe_k``, DBRX-style ``moe_top_k``.
TOP_K_KEYS = ("num_experts_per_tok", "moe_k", "moe_top_k")
#: Keys of the dropout on the attention probabilities, by family: Llama's and BART's ``attention_dropout``, GPT-2's
#: ``attn_pdrop``, BERT's and DeBERTa's ``attention_probs_dropout_prob``, T5's ``dropout_rate`` (its one dropout).
ATTENTION_DROPOUT_KEYS = ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob", "dropout_rate")


def looks_like_hf(spec: dict[str, Any]) -> bool:
    """Whether a ``--model`` JSON object is a Hugging Face config (any of :data:`HF_ONLY_KEYS`) rather than
    shardscope's own fields."""
    return bool(HF_ONLY_KEYS & set(spec))


def read_hf_config(path: str) -> tuple[str, ModelConfig]:
    """(name, shape) of the Hugging Face ``config.json`` at ``path``; ValueError of one sentence naming the file and
    the key on a missing key or an impossible value."""
    file = Path(path)
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file; --model takes a preset, a JSON object of dimensions or the path "
                         "of a Hugging Face config.json") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON config.json ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: a Hugging Face config.json is a JSON object, got {type(doc).__name__}")
    return model_name(file, doc), shape_of(doc, path)


def model_name(file: Path, doc: dict[str, Any]) -> str:
    """The model's name: the config's ``_name_or_path`` (its last part) where it is a Hub id, else the file's folder,
    else its stem (a local cache path, as a saved config may carry, names no model)."""
    named = doc.get("_name_or_path")
    if isinstance(named, str) and named.strip() and not named.startswith(("/", ".", "~")):
        return named.rstrip("/").rsplit("/", 1)[-1]
    return file.parent.name if file.stem == "config" and file.parent.name else file.stem


def _first(doc: dict[str, Any], keys: tuple[str, ...], path: str) -> Any:
    for key in keys:
        if doc.get(key) is not None:
            return doc[key]
    raise ValueError(f"{path}: the config has no {' or '.join(keys)}, which the model's shape needs")


def mlp_kind(doc: dict[str, Any]) -> str:
    """``gelu`` (an ungated MLP: two matrices) for the ungated families (by ``model_type``), a T5 whose
    ``feed_forward_proj`` is not gated, or a GELU/ReLU activation in an unknown family; else ``swiglu`` (three
    matrices: Llama's SwiGLU, Gemma's and gated T5's GeGLU)."""
    family = str(doc.get("model_type") or "").lower()
    projection = doc.get("feed_forward_proj")
    if projection is not None:
        return "swiglu" if str(projection).lower().startswith("gated") else "gelu"
    if family in UNGATED_FAMILIES:
        return "gelu"
    if family == "chatglm" and doc.get("ffn_hidden_size") is None and doc.get("inner_hidden_size") is not None:
        return "gelu"  # the first ChatGLM: a GELU MLP of inner_hidden_size; ChatGLM2 on gate theirs (ffn_hidden_size)
    act = str(doc.get("hidden_act") or doc.get("activation_function") or "silu").lower()
    return "gelu" if act.startswith(("gelu", "relu")) and not family else "swiglu"


def norm_kind(doc: dict[str, Any], family: str) -> str:
    """``layernorm`` for the LayerNorm families (:data:`LAYERNORM_FAMILIES`), ``rmsnorm`` for the others; ChatGLM's
    files say which with their own ``rmsnorm`` flag (true from ChatGLM2 on, absent from the first's LayerNorm)."""
    if family == "chatglm":
        return "rmsnorm" if doc.get("rmsnorm") else "layernorm"
    return "layernorm" if family in LAYERNORM_FAMILIES else "rmsnorm"


def activation_kind(doc: dict[str, Any], mlp: str) -> str:
    """``eager_tanh`` for an ungated MLP whose activation is ``gelu_new`` (GPT-2's ``activation_function``, GPT-J's,
    GPT-Neo's, CodeGen's, Phi-2's ``hidden_act``): transformers' ``NewGELUActivation`` computes it as Python tensor ops
    (:data:`~shardscope.contracts.models.ACTIVATION_KINDS`); else ``fused`` (``gelu``, ``gelu_pytorch_tanh``,
    ``relu``, ``silu``: one kernel each). shardscope's own ``activation`` key wins."""
    if doc.get("activation") is not None:
        return str(doc["activation"])
    act = str(doc.get("hidden_act") or doc.get("activation_function") or "").lower()
    return "eager_tanh" if mlp == "gelu" and act == "gelu_new" else "fused"


def _encoder_key(doc: dict[str, Any]) -> str | None:
    """The key of the depth the decoder's is added to: an encoder-decoder's encoder depth where the file has one (the
    BART family's files also hold ``num_hidden_layers``, its config class's copy of ``encoder_layers``, which alone
    would read as the whole model), else the first of :data:`KEYS` ``n_layers`` present."""
    if doc.get("encoder_layers") is not None and doc.get("decoder_layers") is not None:
        return "encoder_layers"
    return next((k for k in KEYS["n_layers"] if doc.get(k) is not None), None)


def _encoder_depth(doc: dict[str, Any], path: str) -> Any:
    key = _encoder_key(doc)
    return _first(doc, (key,) if key else KEYS["n_layers"], path)


def decoder_depth(doc: dict[str, Any], path: str) -> int:
    """An encoder-decoder's decoder layers (each with a cross-attention over the encoder's output), 0 for a model of
    one stack: ``num_decoder_layers`` beside T5's ``num_layers`` (its default: as many), ``decoder_layers`` beside
    BART's ``encoder_layers``."""
    layers = _encoder_depth(doc, path)
    key = _encoder_key(doc)
    decoder = doc.get(DECODER_LAYERS.get(key or "", ""))
    if decoder is None and key == "num_layers" and doc.get("model_type") == "t5":
        decoder = layers  # T5's num_decoder_layers defaults to num_layers
    if decoder is None or not isinstance(layers, int) or isinstance(layers, bool):
        return 0
    if isinstance(decoder, bool) or not isinstance(decoder, int) or decoder < 1:
        raise ValueError(f"{path}: {DECODER_LAYERS[key]} must be a positive integer, got {decoder!r}")
    return decoder


def head_kind(doc: dict[str, Any]) -> str:
    """``classifier`` where the config's ``architectures`` (or shardscope's own ``head`` key) names a task head
    (:data:`CLASSIFIER_ARCHITECTURES`), else ``lm``. A classifier ties nothing: it has no vocabulary-sized output."""
    if doc.get("head") is not None:
        return str(doc["head"])
    architectures = doc.get("architectures") or []
    names = architectures if isinstance(architectures, list) else [architectures]
    return "classifier" if any(str(n).endswith(CLASSIFIER_ARCHITECTURES) for n in names) else "lm"


def experts_of(doc: dict[str, Any], path: str) -> dict[str, int]:
    """A mixture-of-experts config's experts, as :class:`ModelConfig` takes them (``{}`` for a dense one): the routed
    experts (:data:`EXPERT_KEYS`), the experts each token is routed to (:data:`TOP_K_KEYS`), one expert's width
    (``moe_intermediate_size`` where the file gives one beside a dense ``intermediate_size``, else
    ``intermediate_size``: Mixtral's) and the shared expert's (Qwen2-MoE's ``shared_expert_intermediate_size``,
    DeepSeek's ``n_shared_experts`` experts). Every block is taken to be the same: a file whose blocks differ (dense
    first blocks, MLP-only layers, sparse steps) or whose attention is compressed (DeepSeek-V2/V3's latent attention)
    is refused in one sentence, as are the keys that make no sense."""
    experts = next(((k, doc[k]) for k in EXPERT_KEYS if doc.get(k) is not None), None)
    if experts is None or (isinstance(experts[1], int) and not isinstance(experts[1], bool) and experts[1] <= 1):
        return {}
    key, count = experts
    if isinstance(count, bool) or not isinstance(count, int):
        raise ValueError(f"{path}: {key} must be a whole number of experts, got {count!r} (experts that differ "
                         "by layer are not modeled)")
    for uneven, dense in (("first_k_dense_replace", 0), ("decoder_sparse_step", 1), ("moe_layer_freq", 1)):
        if doc.get(uneven) not in (None, dense):
            raise ValueError(f"{path}: {uneven} {doc[uneven]!r} makes its blocks differ (some dense, some "
                             "mixture-of-experts), which shardscope does not model (every block is taken alike)")
    if doc.get("mlp_only_layers"):
        raise ValueError(f"{path}: mlp_only_layers {doc['mlp_only_layers']!r} makes some blocks dense, which "
                         "shardscope does not model (every block is taken alike)")
    if doc.get("kv_lora_rank") is not None or doc.get("q_lora_rank") is not None:
        raise ValueError(f"{path}: kv_lora_rank names a compressed (latent) attention, which shardscope does not model")
    top_k = next((doc[k] for k in TOP_K_KEYS if doc.get(k) is not None), None)
    if top_k is None:
        raise ValueError(f"{path}: the config has {key} {count} but no {' or '.join(TOP_K_KEYS)}, which a "
                         "mixture-of-experts model's routing needs")
    width_key = "moe_intermediate_size" if doc.get("moe_intermediate_size") is not None else "intermediate_size"
    width = doc.get(width_key)
    shared = doc.get("shared_expert_intermediate_size") or 0
    if not shared and doc.get("n_shared_experts"):
        count_shared = doc["n_shared_experts"]
        shared = count_shared * width if isinstance(count_shared, int) and isinstance(width, int) else count_shared
    for name, value in ((width_key, width), ("experts per token", top_k), ("shared expert width", shared)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name.startswith("shared") else 1):
            raise ValueError(f"{path}: {name} must be a positive integer, got {value!r}")
    return {"experts": count, "experts_per_token": top_k, "d_ff": width, "shared_expert_d_ff": shared}


def language_model(doc: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The part of a config that shapes the language model, and how errors name it: the file itself, or a
    vision-language model's ``text_config`` (LLaVA, PaliGemma, Gemma 3, Llama 3.2 Vision) where the file has no width
    of its own (the file's other top-level keys fill what the text_config leaves out, as its vocabulary may); its
    vision tower is not represented (the training step of its language model is what is modeled)."""
    text = doc.get("text_config")
    if isinstance(text, dict) and not any(doc.get(k) is not None for k in KEYS["d_model"]):
        outer = {k: v for k, v in doc.items() if not k.endswith("_config")}  # e.g. a vocab_size kept outside
        # the file's architectures name the model's own head (a text_config's may name its language model's)
        return {**outer, **text, "architectures": doc.get("architectures")}, f"{path}: text_config"
    return doc, path


def reads_text_config(spec: Any) -> bool:
    """Whether a ``--model`` value (a config.json path or a JSON object) is a vision-language model read through its
    ``text_config`` (:func:`language_model`), so that what is modeled is its language model alone."""
    from shardscope.contracts.models import PRESETS, looks_like_path

    doc = spec
    if isinstance(spec, str):
        if spec in PRESETS or not looks_like_path(spec):
            return False
        try:
            doc = json.loads(Path(spec).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return False
    if not isinstance(doc, dict) or not looks_like_hf(doc):
        return False
    return language_model(doc, "")[0] is not doc


def shape_of(doc: dict[str, Any], path: str) -> ModelConfig:
    """The :class:`ModelConfig` of a parsed config.json (``path`` names it in errors; a vision-language model's
    language model, :func:`language_model`)."""
    doc, path = language_model(doc, path)
    experts = experts_of(doc, path)
    dims = {name: _first(doc, keys, path) for name, keys in KEYS.items()}
    decoder = decoder_depth(doc, path)  # the stand-in's blocks: an encoder-decoder's encoder and decoder together
    dims["n_layers"] = _encoder_depth(doc, path) + decoder
    mlp = mlp_kind(doc)
    d_ff = next((doc[k] for k in FF_KEYS if doc.get(k) is not None), None)
    if d_ff is None and doc.get("expansion_ratio") is not None and isinstance(dims["d_model"], int):
        d_ff = _expanded(doc["expansion_ratio"], dims["d_model"], path)  # MPT: the MLP's width over the model's
    if d_ff is None:
        if mlp != "gelu":
            raise ValueError(f"{path}: the config has no intermediate_size, which a gated (SwiGLU) MLP's width needs")
        d_ff = 4 * dims["d_model"] if isinstance(dims["d_model"], int) else dims["d_model"]  # GPT-2's n_inner: null
    kv = doc.get("num_key_value_heads")
    if kv is None and doc.get("new_decoder_architecture"):
        kv = doc.get("num_kv_heads")  # Falcon-40B/180B's grouped keys and values
    elif kv is None and doc.get("multi_query_attention"):
        kv = doc.get("multi_query_group_num")  # ChatGLM2/3's and GLM-4's grouped keys and values
    elif kv is None and doc.get("multi_query"):
        kv = 1  # Falcon-7B's multi-query attention
    family = str(doc.get("model_type") or "").lower()
    head = head_kind(doc)
    tied = doc.get("tie_word_embeddings", bool(family) and family not in UNTIED_BY_DEFAULT)
    context = next((doc[k] for k in CONTEXT_KEYS if doc.get(k) is not None), 2048)
    values = {**dims, "d_ff": d_ff, "n_kv_heads": dims["n_heads"] if kv is None else kv, "max_seq_len": context,
              "tie_embeddings": tied, "mlp": mlp}
    for name, value in values.items():
        counted = name not in ("tie_embeddings", "mlp")
        if counted and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{path}: {_key_of(name, doc)} must be a positive integer, got {value!r}")
    if not isinstance(tied, bool):
        raise ValueError(f"{path}: tie_word_embeddings must be true or false, got {tied!r}")
    values["tie_embeddings"] = tied and head == "lm"  # a task head has no vocabulary-sized output to tie
    head_key = next((k for k in ("head_dim", "d_kv") if doc.get(k) is not None), None)
    head_size = doc[head_key] if head_key else None
    if head_key and (isinstance(head_size, bool) or not isinstance(head_size, int) or head_size < 1):
        raise ValueError(f"{path}: {head_key} must be a positive integer, got {head_size!r}")
    if head_size is not None and dims["d_model"] % dims["n_heads"] == 0 \
            and head_size == dims["d_model"] // dims["n_heads"]:
        head_size = None  # the width over the heads: the default, stored as it always was
    values["head_size"] = head_size
    values["head"] = head
    values["norm"] = doc.get("norm") or norm_kind(doc, family)
    attention = next((doc[k] for k in ATTENTION_KEYS if doc.get(k) is not None),
                     "eager" if family in EAGER_ONLY_FAMILIES else "sdpa")
    values["attention"] = "eager" if attention == "eager" else "sdpa"  # flash_attention_2, sdpa: no scores kept
    values["activation"] = activation_kind(doc, mlp)
    values["cross_attention_layers"] = decoder
    values.update(experts)  # a mixture-of-experts block: its experts, and one expert's width as d_ff
    if doc.get("parameter_tensors") is not None:  # shardscope's own key: the real model's tensors, where it says
        values["parameter_tensors"] = doc["parameter_tensors"]
    dropout_key = next((k for k in ATTENTION_DROPOUT_KEYS if doc.get(k) is not None), None)
    if dropout_key is not None:
        values["attention_dropout"] = doc[dropout_key]
    try:
        return ModelConfig(**values)
    except ValueError as exc:
        raise ValueError(f"{path}: {_in_hf_terms(str(exc), doc)}") from None


def _expanded(ratio: Any, width: int, path: str) -> int:
    """MPT's MLP width: ``expansion_ratio`` times the model's (a positive number whose product is a whole width)."""
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio <= 0 or (ratio * width) % 1:
        raise ValueError(f"{path}: expansion_ratio must be a positive number that makes a whole MLP width, "
                         f"got {ratio!r}")
    return int(ratio * width)


def _key_of(field: str, doc: dict[str, Any]) -> str:
    """The config's own key for one of our fields (the one it uses, else the first we accept)."""
    keys = {**KEYS, "d_ff": FF_KEYS,
            "n_kv_heads": ("num_key_value_heads",),
            "max_seq_len": CONTEXT_KEYS}[field]
    return next((k for k in keys if k in doc), keys[0])


def _in_hf_terms(message: str, doc: dict[str, Any]) -> str:
    """A ModelConfig message with its field names replaced by the config's keys."""
    for field in ("n_kv_heads", "n_layers", "n_heads", "d_model", "d_ff", "vocab_size", "max_seq_len"):
        message = message.replace(f"model.{field}", _key_of(field, doc))
    return message


def spec_of(model: Any, key: str) -> Any:
    """A config's model value as the pipeline passes it on: a ``config.json`` path becomes its dimensions with its
    name (``{"name": ..., "n_layers": ...}``), so job ids, workers and the database see a name and a shape, never
    a path; a preset name or a dict stays as it is. ValueError names the config ``key`` and the file."""
    from shardscope.contracts.models import PRESETS, looks_like_path

    from shardscope.contracts.models import resolve_model

    if not isinstance(model, str) or model in PRESETS or not looks_like_path(model):
        try:
            cfg = resolve_model(model)[1] if isinstance(model, dict) else None
        except ValueError:
            cfg = None  # the model's own error is reported where the model is read
        if cfg is not None:
            _trainable(cfg, key, "an object of dimensions")
        return model
    try:
        name, cfg = read_hf_config(model)
    except ValueError as exc:
        raise ValueError(f"config key {key}: {exc}") from None
    _trainable(cfg, key, model)
    return {"name": name, **cfg.to_dict()}


def _trainable(cfg: ModelConfig, key: str, where: str) -> None:
    """Refuse, for the pipeline, a model its training worker cannot build: a classifier head, an encoder-decoder's
    cross-attentions, a mixture of experts, or a count of parameter tensors the stand-in would not have (all modeled
    only)."""
    if cfg.parameter_tensors is not None:
        raise ValueError(f"config key {key}: the model ({where}) gives parameter_tensors {cfg.parameter_tensors}, the "
                         "count of a real model that advise, memory and predict model but the training stage cannot "
                         "build (its worker builds the stand-in of the shape alone); leave parameter_tensors out")
    if cfg.cross_attention_layers:
        raise ValueError(f"config key {key}: the model ({where}) is an encoder-decoder "
                         f"({cfg.cross_attention_layers} decoder layers with cross-attention), which advise, memory and "
                         "predict model but the training stage cannot build (its worker builds decoders); give a "
                         "decoder-only model")
    if cfg.experts:
        raise ValueError(f"config key {key}: the model ({where}) is a mixture of {cfg.experts} experts, which advise, "
                         "memory and predict model but the training stage cannot build (its worker builds dense "
                         "blocks); give a dense model")
    if cfg.head != "lm":
        raise ValueError(f"config key {key}: the model ({where}) has a classifier head, which advise, memory and predict "
                         "model but the training stage cannot run (its worker trains language models); give a language "
                         "model")
