"""The GPT-style model: published parameter counts, validation, presets, forward pass, data."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from shardscope.training.model import (
    GPT,
    PRESETS,
    ModelConfig,
    assert_param_count,
    parse_model_spec,
    resolve_model,
    synthetic_batch,
)


def published_count(layers: int, d: int, heads: int, kv_heads: int, ff: int, vocab: int, tied: bool) -> int:
    """Llama/Mistral shape arithmetic, written out: q, k, v, o projections, SwiGLU, two RMSNorms."""
    head_dim = d // heads
    q = d * d
    k = v = d * kv_heads * head_dim
    o = d * d
    mlp = 3 * d * ff  # gate, up, down
    norms = 2 * d
    per_layer = q + k + v + o + mlp + norms
    embed = vocab * d
    head = 0 if tied else vocab * d
    return embed + layers * per_layer + d + head  # + final norm


def built_count(cfg: ModelConfig) -> int:
    """Parameters of the module actually built (shared tensors once)."""
    return sum(p.numel() for p in GPT(cfg).parameters())


# --------------------------------------------------------------------------- presets


def test_mistral_7b_matches_published_shape() -> None:
    # Mistral-7B-v0.1 config.json: 32 layers, hidden 4096, 32 heads, 8 KV heads, intermediate 14336, vocab 32000
    expected = published_count(32, 4096, 32, 8, 14336, 32000, tied=False)
    assert expected == 7_241_732_096
    assert PRESETS["mistral-7b"].param_count() == expected
    assert PRESETS["mistral-7b"].tie_embeddings is False


def test_llama_1b_matches_published_shape() -> None:
    # Llama 3.2 1B: 16 layers, hidden 2048, 32 heads, 8 KV heads, intermediate 8192, vocab 128256, tied
    expected = published_count(16, 2048, 32, 8, 8192, 128256, tied=True)
    assert PRESETS["llama-1b"].param_count() == expected
    assert round(expected / 1e7) == 124  # 1.24 B


def test_gpt2_small_is_close_to_124m() -> None:
    count = PRESETS["gpt2-small"].param_count()
    assert count == published_count(12, 768, 12, 12, 2048, 50257, tied=True)
    assert 123e6 < count < 124.5e6


@pytest.mark.parametrize(
    "cfg",
    [
        PRESETS["tiny"],
        ModelConfig(n_layers=3, d_model=48, n_heads=6, n_kv_heads=2, d_ff=80, vocab_size=97),
        ModelConfig(n_layers=2, d_model=32, n_heads=4, n_kv_heads=4, d_ff=64, vocab_size=50, tie_embeddings=True),
        ModelConfig(n_layers=1, d_model=16, n_heads=2, n_kv_heads=1, d_ff=24, vocab_size=10, tie_embeddings=True),
    ],
    ids=["tiny", "gqa", "tied", "tied-mqa"],
)
def test_built_module_matches_formula(cfg: ModelConfig) -> None:
    expected = published_count(cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_ff, cfg.vocab_size,
                               cfg.tie_embeddings)
    assert cfg.param_count() == expected
    assert built_count(cfg) == expected
    assert_param_count(GPT(cfg), cfg)


def test_tied_embeddings_share_one_tensor() -> None:
    cfg = ModelConfig(n_layers=1, d_model=16, n_heads=2, n_kv_heads=2, d_ff=32, vocab_size=40, tie_embeddings=True)
    model = GPT(cfg)
    assert model.head.weight is model.embed.weight
    untied = replace(cfg, tie_embeddings=False)
    assert untied.param_count() - cfg.param_count() == 40 * 16


def test_assert_param_count_catches_a_mismatch() -> None:
    cfg = PRESETS["tiny"]
    with pytest.raises(AssertionError, match="formula"):
        assert_param_count(GPT(cfg), replace(cfg, n_layers=3))


# --------------------------------------------------------------------------- validation

VALID = dict(n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, d_ff=64, vocab_size=100)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"n_layers": 0}, "n_layers"),
        ({"d_model": -32}, "d_model"),
        ({"n_heads": 0}, "n_heads"),
        ({"n_kv_heads": 0}, "n_kv_heads"),
        ({"d_ff": 0}, "d_ff"),
        ({"vocab_size": 2.5}, "vocab_size"),
        ({"n_layers": True}, "n_layers"),
        ({"max_seq_len": "128"}, "max_seq_len"),
        ({"d_model": 30}, "d_model"),  # not divisible by n_heads = 4
        ({"n_heads": 4, "n_kv_heads": 3}, "n_kv_heads"),  # n_heads not divisible by n_kv_heads
        ({"tie_embeddings": "yes"}, "tie_embeddings"),
    ],
)
def test_invalid_dimensions_raise_naming_the_field(change: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"model\.{field}\b"):
        ModelConfig(**{**VALID, **change})


# --------------------------------------------------------------------------- resolve_model


def test_resolve_preset_by_name() -> None:
    assert resolve_model("mistral-7b") == ("mistral-7b", PRESETS["mistral-7b"])


def test_resolve_unknown_preset_name_raises() -> None:
    with pytest.raises(ValueError, match="gpt3"):
        resolve_model("gpt3")


def test_resolve_preset_with_override() -> None:
    name, cfg = resolve_model({"preset": "tiny", "n_layers": 4})
    assert name == "tiny"
    assert cfg == replace(PRESETS["tiny"], n_layers=4)
    assert cfg.param_count() > PRESETS["tiny"].param_count()


def test_resolve_explicit_dimensions_with_and_without_name() -> None:
    assert resolve_model(dict(VALID)) == ("custom", ModelConfig(**VALID))
    assert resolve_model({**VALID, "name": "mini"})[0] == "mini"
    assert resolve_model({"preset": "tiny", "name": "tiny-x"})[0] == "tiny-x"


def test_resolve_does_not_mutate_the_spec() -> None:
    spec = {"preset": "tiny", "name": "n", "d_ff": 256}
    resolve_model(spec)
    assert spec == {"preset": "tiny", "name": "n", "d_ff": 256}


def test_resolve_validates_overrides() -> None:
    with pytest.raises(ValueError, match=r"model\.d_model"):
        resolve_model({"preset": "tiny", "d_model": 130})  # 130 % 4 != 0


def test_resolve_unknown_preset_in_dict_raises_value_error() -> None:
    with pytest.raises(ValueError, match="nope"):
        resolve_model({"preset": "nope", "n_layers": 2})


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ({"preset": "tiny", "n_layerz": 2}, "n_layerz"),  # a typo is named, not a TypeError
        ({"n_layers": 2, "d_model": 32}, "n_heads"),  # explicit dimensions must be complete
        ({"preset": 3}, "3"),
        (["tiny"], "list"),
    ],
)
def test_resolve_rejects_bad_specs_with_a_value_error(spec: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        resolve_model(spec)  # type: ignore[arg-type]


def test_parse_model_spec() -> None:
    assert parse_model_spec("tiny") == "tiny"
    assert parse_model_spec(' {"preset": "tiny", "n_layers": 3}') == {"preset": "tiny", "n_layers": 3}
    with pytest.raises(ValueError, match="JSON"):
        parse_model_spec('{"preset": ')


# --------------------------------------------------------------------------- forward and data


def test_forward_returns_finite_scalar_loss_near_uniform() -> None:
    torch.manual_seed(0)
    cfg = PRESETS["tiny"]
    model = GPT(cfg)
    tokens = synthetic_batch(cfg, batch=2, seq_len=16, step=0, rank=0, device=torch.device("cpu"))
    loss = model(tokens)
    assert loss.dim() == 0
    assert torch.isfinite(loss)
    # small random init: logits near zero, so the loss is near ln(vocab)
    assert abs(loss.item() - math.log(cfg.vocab_size)) < 0.5
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_forward_works_with_grouped_query_attention_and_tied_head() -> None:
    cfg = ModelConfig(n_layers=2, d_model=32, n_heads=4, n_kv_heads=1, d_ff=48, vocab_size=64, tie_embeddings=True)
    loss = GPT(cfg)(synthetic_batch(cfg, 3, 8, step=1, rank=0, device=torch.device("cpu")))
    assert loss.dim() == 0 and torch.isfinite(loss)


def test_synthetic_batch_is_reproducible_per_step_and_rank() -> None:
    cfg = PRESETS["tiny"]
    cpu = torch.device("cpu")
    a = synthetic_batch(cfg, 2, 64, step=3, rank=1, device=cpu)
    torch.manual_seed(12345)  # the global RNG does not matter
    torch.rand(100)
    b = synthetic_batch(cfg, 2, 64, step=3, rank=1, device=cpu)
    assert a.shape == (2, 65) and a.dtype == torch.long
    assert torch.equal(a, b)
    assert int(a.min()) >= 0 and int(a.max()) < cfg.vocab_size
    assert not torch.equal(a, synthetic_batch(cfg, 2, 64, step=3, rank=0, device=cpu))
    assert not torch.equal(a, synthetic_batch(cfg, 2, 64, step=4, rank=1, device=cpu))
