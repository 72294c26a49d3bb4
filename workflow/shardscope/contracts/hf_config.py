"""A Hugging Face ``config.json`` read as the decoder's shape (:class:`~shardscope.contracts.models.ModelConfig`).

``--model PATH/config.json`` (and a config file's model keys) describe a real model by the file its
publisher ships: Llama, Mistral, Qwen (``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``num_key_value_heads``, ``intermediate_size``, ``max_position_embeddings``, ``tie_word_embeddings``),
GPT-2 (``n_embd``, ``n_layer``, ``n_head``, ``n_inner``, ``n_positions``) and GPT-NeoX (Llama's key names,
a GELU MLP). Torch-free and offline: the file is read, nothing is downloaded.

What is kept is what the memory and step models use: width, depth, heads, KV heads, MLP width and
kind, vocabulary, tying and context. Biases, LayerNorm against RMSNorm and learned position tables
are not modeled (a few tenths of a percent of the parameters).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shardscope.contracts.models import ModelConfig

#: Families whose MLP is an ungated GELU (up, down); the others gate it (SwiGLU: gate, up, down).
UNGATED_FAMILIES = ("gpt2", "gpt_neox", "gptj", "gpt_bigcode", "opt", "falcon")
#: Families whose ``tie_word_embeddings`` defaults to true when the file leaves it out (transformers' own default for
#: GPT-2's config class); Llama, Mistral, Qwen2 and GPT-NeoX default to false.
TIED_BY_DEFAULT = ("gpt2", "gpt_bigcode")
#: Each dimension's keys, the first present wins.
KEYS: dict[str, tuple[str, ...]] = {
    "d_model": ("hidden_size", "n_embd", "d_model"),
    "n_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "n_heads": ("num_attention_heads", "n_head"),
    "vocab_size": ("vocab_size",),
}


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
    """``gelu`` for the ungated families (by ``model_type``) or a GELU activation in an unknown family, else
    ``swiglu``."""
    family = str(doc.get("model_type") or "").lower()
    if family in UNGATED_FAMILIES:
        return "gelu"
    act = str(doc.get("hidden_act") or doc.get("activation_function") or "silu").lower()
    return "gelu" if act.startswith("gelu") and not family else "swiglu"


def shape_of(doc: dict[str, Any], path: str) -> ModelConfig:
    """The :class:`ModelConfig` of a parsed config.json (``path`` names it in errors)."""
    dims = {name: _first(doc, keys, path) for name, keys in KEYS.items()}
    mlp = mlp_kind(doc)
    ff_keys = ("intermediate_size", "n_inner", "ffn_dim")
    d_ff = next((doc[k] for k in ff_keys if doc.get(k) is not None), None)
    if d_ff is None:
        if mlp != "gelu":
            raise ValueError(f"{path}: the config has no intermediate_size, which a gated (SwiGLU) MLP's width needs")
        d_ff = 4 * dims["d_model"] if isinstance(dims["d_model"], int) else dims["d_model"]  # GPT-2's n_inner: null
    kv = doc.get("num_key_value_heads")
    family = str(doc.get("model_type") or "").lower()
    tied = doc.get("tie_word_embeddings", family in TIED_BY_DEFAULT)
    context = next((doc[k] for k in ("max_position_embeddings", "n_positions", "n_ctx") if doc.get(k) is not None),
                   2048)
    values = {**dims, "d_ff": d_ff, "n_kv_heads": dims["n_heads"] if kv is None else kv, "max_seq_len": context,
              "tie_embeddings": tied, "mlp": mlp}
    for name, value in values.items():
        counted = name not in ("tie_embeddings", "mlp")
        if counted and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{path}: {_key_of(name, doc)} must be a positive integer, got {value!r}")
    if not isinstance(tied, bool):
        raise ValueError(f"{path}: tie_word_embeddings must be true or false, got {tied!r}")
    head_dim = doc.get("head_dim")
    even = dims["d_model"] % dims["n_heads"] == 0
    if head_dim is not None and even and head_dim != dims["d_model"] // dims["n_heads"]:
        raise ValueError(f"{path}: head_dim {head_dim} differs from the width over the heads "
                         f"({dims['d_model']} / {dims['n_heads']}), which the modeled decoder cannot describe")
    try:
        return ModelConfig(**values)
    except ValueError as exc:
        raise ValueError(f"{path}: {_in_hf_terms(str(exc), doc)}") from None


def _key_of(field: str, doc: dict[str, Any]) -> str:
    """The config's own key for one of our fields (the one it uses, else the first we accept)."""
    keys = {**KEYS, "d_ff": ("intermediate_size", "n_inner"), "n_kv_heads": ("num_key_value_heads",),
            "max_seq_len": ("max_position_embeddings", "n_positions")}[field]
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

    if not isinstance(model, str) or model in PRESETS or not looks_like_path(model):
        return model
    try:
        name, cfg = read_hf_config(model)
    except ValueError as exc:
        raise ValueError(f"config key {key}: {exc}") from None
    return {"name": name, **cfg.to_dict()}
