"""``--model PATH/config.json``: real Hugging Face configs (tests/data/hf) read as the decoder's shape, bad ones
refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardscope.contracts.models import PRESETS, resolve_model

HF = Path(__file__).resolve().parents[1] / "data" / "hf"


def test_llama_3_2_1b_config_is_the_preset() -> None:
    name, cfg = resolve_model(str(HF / "llama-3.2-1b" / "config.json"))
    preset = PRESETS["llama-1b"]
    assert name == "llama-3.2-1b"
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_ff, cfg.vocab_size, cfg.tie_embeddings) == \
        (preset.n_layers, preset.d_model, preset.n_heads, preset.n_kv_heads, preset.d_ff, preset.vocab_size, True)
    assert cfg.param_count() == preset.param_count() and cfg.max_seq_len == 131072 and cfg.mlp == "swiglu"


def test_gpt2_config_reads_gpt2_keys() -> None:
    name, cfg = resolve_model(str(HF / "gpt2" / "config.json"))
    assert name == "gpt2"
    shape = (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_ff, cfg.max_seq_len)
    assert shape == (12, 768, 12, 12, 3072, 1024)
    assert cfg.mlp == "gelu" and cfg.tie_embeddings  # n_inner null: 4 x width; GPT-2's tying is transformers' default
    assert 123e6 < cfg.param_count() < 124.5e6  # published 124.4 M with biases, LayerNorms and the position table


def test_qwen2_config_counts_all_but_its_qkv_biases() -> None:
    name, cfg = resolve_model(str(HF / "qwen2-0.5b" / "config.json"))
    assert name == "qwen2-0.5b"  # its _name_or_path is a local cache path: the folder names it
    assert (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.tie_embeddings, cfg.mlp) == (14, 2, 64, True, "swiglu")
    assert cfg.param_count() == 494_032_768 - 24 * (896 + 2 * 128)  # published count less the q, k, v biases


def test_original_t5_config_is_ungated_as_t5config_defaults_it() -> None:
    """t5-large's file has no feed_forward_proj: T5Config's default, relu, is an ungated MLP (two matrices)."""
    name, cfg = resolve_model(str(HF / "t5-large" / "config.json"))
    assert name == "t5-large" and "feed_forward_proj" not in json.loads((HF / "t5-large" / "config.json").read_text())
    assert (cfg.n_layers, cfg.d_model, cfg.d_ff, cfg.mlp, cfg.tie_embeddings) == (48, 1024, 4096, "gelu", True)
    # 48 blocks of 4 + 8 (x 1024^2), the decoder's 24 cross-attentions (4 x 1024^2 and a norm each) and the
    # 32128-word table: the published 737.7 M less its two relative-position tables (2 x 32 x 16) and the encoder's
    # own final norm (1,024)
    assert cfg.cross_attention_layers == 24
    blocks = 48 * (12 * 1024 * 1024 + 2 * cfg.norm_params)
    assert cfg.param_count() == blocks + 24 * (4 * 1024 * 1024 + cfg.norm_params) + 32128 * 1024 + cfg.norm_params
    assert cfg.param_count() == pytest.approx(737.7e6, rel=1e-4)


def test_families_transformers_runs_eagerly_only_default_to_eager_attention() -> None:
    """A T5, BLOOM or DeBERTa file names no attention implementation, and transformers has none but its eager code for
    them: their scores are kept (eager). A Llama or GPT-2 file without one is read as SDPA, which transformers picks
    wherever torch has it; a file or object that names one keeps it."""
    _, t5 = resolve_model(str(HF / "t5-large" / "config.json"))
    assert t5.attention == "eager"
    bloom = {"model_type": "bloom", "n_embed": 1024, "n_layer": 24, "num_attention_heads": 16, "vocab_size": 250880}
    deberta = {"model_type": "deberta-v2", "hidden_size": 1536, "num_hidden_layers": 24, "num_attention_heads": 24,
               "intermediate_size": 6144, "vocab_size": 128100}
    assert resolve_model(bloom)[1].attention == resolve_model(deberta)[1].attention == "eager"
    assert resolve_model({**bloom, "attn_implementation": "sdpa"})[1].attention == "sdpa"
    _, gpt2 = resolve_model(str(HF / "gpt2" / "config.json"))
    _, llama = resolve_model(str(HF / "llama-3.2-1b" / "config.json"))
    assert gpt2.attention == llama.attention == "sdpa"


#: facebook/bart-large's config.json keys that shape it: BartConfig writes ``num_hidden_layers`` as a copy of
#: ``encoder_layers``, so a reader that took it first counted the encoder alone (12 of 24 layers, 202.5 M).
BART_LARGE = {"model_type": "bart", "d_model": 1024, "encoder_layers": 12, "decoder_layers": 12,
              "num_hidden_layers": 12, "encoder_attention_heads": 16, "decoder_attention_heads": 16,
              "encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096, "vocab_size": 50265, "max_position_embeddings": 1024,
              "activation_function": "gelu"}


def test_a_bart_family_file_is_its_encoder_and_decoder_with_the_decoder_cross_attentions(tmp_path: Path) -> None:
    cfg = resolve_model(_write(tmp_path, BART_LARGE))[1]
    assert (cfg.n_layers, cfg.cross_attention_layers, cfg.d_ff, cfg.norm) == (24, 12, 4096, "layernorm")
    # 406.3 M published (BartForConditionalGeneration); its biases and learned position tables are not modeled
    assert cfg.param_count() == pytest.approx(406.3e6, rel=0.01) and cfg.param_count() < 406.3e6
    one_stack = {k: v for k, v in BART_LARGE.items() if k not in ("encoder_layers", "decoder_layers")}
    assert resolve_model(_write(tmp_path, one_stack))[1].cross_attention_layers == 0


#: bigscience/bloom-560m's shaping keys as its released config.json spells them (a Megatron-DeepSpeed conversion:
#: ``n_embed``, not ``hidden_size``; ``seq_length`` for the context, ALiBi having no position table).
BLOOM_560M = {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "n_embed": 1024, "n_layer": 24,
              "num_attention_heads": 16, "seq_length": 2048, "vocab_size": 250880, "attention_dropout": 0.0}
#: mosaicml/mpt-7b's: MPT's own key names and an MLP ``expansion_ratio`` times the width.
MPT_7B = {"architectures": ["MPTForCausalLM"], "model_type": "mpt", "d_model": 4096, "n_heads": 32, "n_layers": 32,
          "expansion_ratio": 4, "max_seq_len": 2048, "vocab_size": 50432, "no_bias": True}


def test_bloom_and_mpt_files_read_with_their_own_key_names(tmp_path: Path) -> None:
    bloom = resolve_model(_write(tmp_path, BLOOM_560M))[1]
    assert (bloom.d_model, bloom.n_layers, bloom.n_heads, bloom.d_ff, bloom.max_seq_len) == (1024, 24, 16, 4096, 2048)
    # 559,214,592 published: less the linear biases (9,216 per block) and the embedding's LayerNorm (2,048)
    assert bloom.param_count() == 559_214_592 - 24 * 9216 - 2048
    mpt = resolve_model(_write(tmp_path, MPT_7B))[1]
    assert (mpt.d_model, mpt.n_layers, mpt.n_heads, mpt.d_ff, mpt.mlp, mpt.norm) == (4096, 32, 32, 16384, "gelu",
                                                                                      "layernorm")
    # 6,649,286,656 published: MPT's LayerNorms have no bias (no_bias), which the fused LayerNorm counts (65 of them)
    assert mpt.param_count() == 6_649_286_656 + 65 * 4096
    with pytest.raises(ValueError, match="expansion_ratio must be a positive number that makes a whole MLP width"):
        resolve_model(_write(tmp_path, {**MPT_7B, "expansion_ratio": 0}))


#: THUDM/chatglm3-6b's shaping keys (ChatGLM2's and GLM-4's spell them so too): grouped keys and values under
#: ``multi_query_group_num``, a gated MLP of ``ffn_hidden_size``, ``padded_vocab_size``, an RMSNorm flag.
CHATGLM3_6B = {"model_type": "chatglm", "hidden_size": 4096, "num_layers": 28, "num_attention_heads": 32,
               "kv_channels": 128, "multi_query_attention": True, "multi_query_group_num": 2, "ffn_hidden_size": 13696,
               "padded_vocab_size": 65024, "seq_length": 8192, "rmsnorm": True, "add_qkv_bias": True,
               "tie_word_embeddings": False}
#: THUDM/chatglm-6b's (the first): a GELU MLP of ``inner_hidden_size``, LayerNorm, the head tied by default.
CHATGLM_6B = {"model_type": "chatglm", "hidden_size": 4096, "num_layers": 28, "num_attention_heads": 32,
              "inner_hidden_size": 16384, "max_sequence_length": 2048, "vocab_size": 130528}


def test_chatglm_files_read_with_their_own_key_names(tmp_path: Path) -> None:
    glm3 = resolve_model(_write(tmp_path, CHATGLM3_6B))[1]
    assert (glm3.n_kv_heads, glm3.d_ff, glm3.mlp, glm3.norm, glm3.tie_embeddings) == (2, 13696, "swiglu", "rmsnorm",
                                                                                       False)
    assert glm3.param_count() == 6_243_584_000 - 28 * (4096 + 2 * 256)  # published, less the q/k/v biases
    glm1 = resolve_model(_write(tmp_path, CHATGLM_6B))[1]
    assert (glm1.n_kv_heads, glm1.d_ff, glm1.mlp, glm1.norm, glm1.tie_embeddings, glm1.max_seq_len) == \
        (32, 16384, "gelu", "layernorm", True, 2048)
    assert glm1.param_count() == 6_173_286_400 - 28 * (4 * 4096 + 16384 + 4096)  # published, less its linear biases


#: google/paligemma-3b-pt-224's shaping keys: the language model (Gemma-2B) under ``text_config`` beside a SigLIP
#: ``vision_config``, no width of the file's own.
PALIGEMMA = {"architectures": ["PaliGemmaForConditionalGeneration"], "model_type": "paligemma",
             "text_config": {"model_type": "gemma", "hidden_size": 2048, "intermediate_size": 16384,
                             "num_attention_heads": 8, "num_hidden_layers": 18, "num_key_value_heads": 1,
                             "vocab_size": 257216},
             "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "num_hidden_layers": 27}}


def test_a_vision_language_file_is_read_as_its_language_model(tmp_path: Path) -> None:
    cfg = resolve_model(_write(tmp_path, PALIGEMMA))[1]
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_ff, cfg.vocab_size, cfg.mlp) == \
        (18, 2048, 8, 1, 16384, 257216, "swiglu")
    assert cfg.tie_embeddings and cfg.head == "lm"  # Gemma ties; the architecture is a generating model
    outside = {**PALIGEMMA, "vocab_size": 257216, "text_config": {k: v for k, v in PALIGEMMA["text_config"].items()
                                                                  if k != "vocab_size"}}
    assert resolve_model(_write(tmp_path, outside))[1] == cfg  # a vocabulary given beside the text_config
    path = _write(tmp_path, {"model_type": "llava", "text_config": {"model_type": "llama", "vocab_size": 32064}})
    with pytest.raises(ValueError, match=r": text_config: the config has no hidden_size"):
        resolve_model(path)


def test_cross_attentions_add_their_weights_and_flops_and_are_stored_only_when_present() -> None:
    from shardscope.contracts.models import ModelConfig

    base = dict(n_layers=4, d_model=64, n_heads=4, n_kv_heads=4, d_ff=256, vocab_size=100)
    plain, encdec = ModelConfig(**base), ModelConfig(**base, cross_attention_layers=2)
    attention = 4 * 64 * 64
    assert encdec.param_count() - plain.param_count() == 2 * (attention + plain.norm_params)
    assert encdec.flops_per_token(32) - plain.flops_per_token(32) == 6 * 2 * attention + 12 * 2 * 64 * 32
    assert encdec.block_matmul_params() == plain.block_matmul_params() + 2 * attention // 4
    assert encdec.param_tensors() == plain.param_tensors() + 2 * (1 + 3)
    assert "cross_attention_layers" not in plain.to_dict() and encdec.to_dict()["cross_attention_layers"] == 2
    assert resolve_model(encdec.to_dict())[1] == encdec
    for bad in (5, -1, True, 1.5):
        with pytest.raises(ValueError, match="cross_attention_layers must be an integer from 0 to model.n_layers"):
            ModelConfig(**base, cross_attention_layers=bad)


def test_the_pipeline_and_the_worker_refuse_an_encoder_decoder() -> None:
    from shardscope.contracts.hf_config import spec_of

    path = str(HF / "t5-large" / "config.json")
    with pytest.raises(ValueError, match="config key gpu.model: the model .* is an encoder-decoder .24 decoder layers"):
        spec_of(path, "gpu.model")
    torch = pytest.importorskip("torch")  # noqa: F841
    from shardscope.training.model import GPT

    with pytest.raises(ValueError, match="cross_attention_layers .* is modeled only"):
        GPT(resolve_model(path)[1])


def test_one_expert_is_a_dense_model(tmp_path: Path) -> None:
    assert resolve_model(_write(tmp_path, {**MISTRAL, "num_experts": 1}))[1].param_count() == \
        PRESETS["mistral-7b"].param_count()


DEBERTA_MNLI = {"model_type": "deberta-v2", "architectures": ["DebertaV2ForSequenceClassification"],
                "hidden_size": 1536, "num_hidden_layers": 24, "num_attention_heads": 24, "intermediate_size": 6144,
                "vocab_size": 128100, "max_position_embeddings": 512}


def test_a_classification_architecture_has_a_classifier_head_and_ties_nothing() -> None:
    """DeBERTa's family ties by default, but a ...ForSequenceClassification model has no vocabulary-sized output: its
    weights are the embedding and the blocks, and its step computes no vocabulary logits."""
    from shardscope.contracts.models import ModelConfig

    cfg = resolve_model(DEBERTA_MNLI)[1]
    as_lm = resolve_model({k: v for k, v in DEBERTA_MNLI.items() if k != "architectures"})[1]
    assert (cfg.head, cfg.tie_embeddings, cfg.head_outputs) == ("classifier", False, 0)
    assert (as_lm.head, as_lm.tie_embeddings, as_lm.head_outputs) == ("lm", True, 128100)
    assert cfg.param_count() == as_lm.param_count()  # the embedding once either way
    assert as_lm.flops_per_token(128) - cfg.flops_per_token(128) == 6 * 128100 * 1536  # the head's matmul, gone
    assert ModelConfig(**cfg.to_dict()) == cfg and cfg.to_dict()["head"] == "classifier"
    assert "head" not in as_lm.to_dict()  # a language model's shape is stored as it always was


def test_a_classifier_peak_has_no_vocabulary_logits() -> None:
    from shardscope.costmodel.memory_peak import StepShape, predict_peak

    shape = StepShape(micro_batch=8, seq_len=128, dtype="bfloat16")
    terms = {head: predict_peak("ddp", resolve_model({**DEBERTA_MNLI, "head": head})[1], 1, shape)
             for head in ("lm", "classifier")}
    lm, classifier = terms["lm"].phases, terms["classifier"].phases
    assert lm["forward"]["logits"] == 8 * 128 * 128100 * 6 and not classifier["forward"].get("logits")
    assert terms["classifier"].peak_bytes < terms["lm"].peak_bytes


def test_a_tied_classifier_is_refused() -> None:
    from shardscope.contracts.models import ModelConfig

    with pytest.raises(ValueError, match="tie_embeddings must be false with model.head classifier"):
        ModelConfig(n_layers=2, d_model=64, n_heads=4, n_kv_heads=4, d_ff=128, vocab_size=100, tie_embeddings=True,
                    head="classifier")


def test_the_pipeline_refuses_a_classifier_its_worker_cannot_train(tmp_path: Path) -> None:
    from shardscope.contracts.hf_config import spec_of

    path = _write(tmp_path, DEBERTA_MNLI)
    for model in (path, DEBERTA_MNLI):
        with pytest.raises(ValueError, match="config key gpu.model: the model .* has a classifier head.* cannot run"):
            spec_of(model, "gpu.model")
    assert spec_of(MISTRAL, "gpu.model") == MISTRAL


def _write(tmp_path: Path, doc: dict) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    return str(path)


MISTRAL = {"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "max_position_embeddings": 32768,
           "hidden_act": "silu", "tie_word_embeddings": False}


#: Published mixture-of-experts configs' keys (the Hub's config.json files) and their published totals: Mixtral-8x7B
#: 46.7 B (Mistral AI's announcement: "46.7B total parameters but only uses 12.9B parameters per token"), OLMoE-1B-7B
#: 6.9 B and 1.3 B active (its paper, Muennighoff et al. 2024), Qwen1.5-MoE-A2.7B 14.3 B and 2.7 B activated (Qwen's
#: model card), Qwen3-30B-A3B 30.5 B and 3.3 B activated (its model card). Active counts include the embedding.
MOE_CONFIGS = {
    "mixtral": ({**MISTRAL, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}, 46.7e9, 12.9e9),
    "olmoe": ({"model_type": "olmoe", "hidden_size": 2048, "intermediate_size": 1024, "num_attention_heads": 16,
               "num_hidden_layers": 16, "num_key_value_heads": 16, "num_experts": 64, "num_experts_per_tok": 8,
               "vocab_size": 50304, "tie_word_embeddings": False}, 6.9e9, 1.3e9),
    "qwen2-moe": ({"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
                   "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_attention_heads": 16,
                   "num_hidden_layers": 24, "num_key_value_heads": 16, "num_experts": 60, "num_experts_per_tok": 4,
                   "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
                   "tie_word_embeddings": False}, 14.3e9, 2.7e9),
    "qwen3-moe": ({"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
                   "moe_intermediate_size": 768, "num_attention_heads": 32, "num_hidden_layers": 48,
                   "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
                   "vocab_size": 151936, "tie_word_embeddings": False}, 30.5e9, 3.3e9),
}


@pytest.mark.parametrize("name", sorted(MOE_CONFIGS))
def test_a_mixture_of_experts_holds_every_expert_and_computes_with_the_routed_ones(tmp_path: Path, name: str) -> None:
    """Its parameters are every expert's (within 1% of the published total); its FLOPs per token are the routed
    experts' (the published active count, the embedding's lookup added, within 3%)."""
    doc, total, active = MOE_CONFIGS[name]
    cfg = resolve_model(_write(tmp_path, doc))[1]
    assert cfg.param_count() == pytest.approx(total, rel=0.01)
    matmul_per_token = (cfg.flops_per_token(1) - cfg.attention_flops_per_token(1)) / 6
    assert matmul_per_token + cfg.vocab_size * cfg.d_model == pytest.approx(active, rel=0.03)
    assert cfg.to_dict()["experts"] == doc.get("num_local_experts", doc.get("num_experts"))
    assert resolve_model(cfg.to_dict())[1] == cfg


def test_an_experts_activations_follow_its_routed_width_and_its_states_every_expert() -> None:
    """Beside the dense model whose MLP is as wide as a token's routed experts, a mixture-of-experts model keeps more
    state (every expert) and, in every block, the dispatch's own activations (each expert's copies of its tokens, the
    router's softmax: traced in tests/training/test_expert_activations.py)."""
    from dataclasses import replace

    from shardscope.costmodel.memory_peak import StepShape, compute_policy, expert_dispatch_bytes, whole_peak

    dense = replace(PRESETS["mistral-7b"], d_ff=2 * 14336)
    moe = replace(PRESETS["mistral-7b"], experts=8, experts_per_token=2)
    assert moe.flops_per_token(1024) == pytest.approx(dense.flops_per_token(1024) + 6 * 32 * 4096 * 8)
    a, b = (whole_peak("fsdp", m, 8, 1024, 1, "none") for m in (dense, moe))
    assert b.state_bytes > 1.5 * a.state_bytes
    acts = [t.assumptions["activation_peak"] for t in (a, b)]  # the peak phase itself may be the optimizer's step
    dispatch = expert_dispatch_bytes(moe, StepShape(micro_batch=1, seq_len=1024), compute_policy("fsdp", "bfloat16"))
    assert acts[1] - acts[0] == moe.n_layers * dispatch > 0


@pytest.mark.parametrize(("change", "fragment"), [
    ({"first_k_dense_replace": 1}, "first_k_dense_replace 1 makes its blocks differ"),
    ({"mlp_only_layers": [0]}, "mlp_only_layers [0] makes some blocks dense"),
    ({"kv_lora_rank": 512}, "kv_lora_rank names a compressed (latent) attention"),
    ({"num_experts_per_tok": None}, "no num_experts_per_tok or moe_k or moe_top_k"),
    ({"num_experts_per_tok": 9}, "experts_per_token must be from 1 to"),
    ({"num_local_experts": [8, 8]}, "num_local_experts must be a whole number of experts")])
def test_a_mixture_of_experts_it_cannot_describe_is_one_sentence(tmp_path: Path, change: dict, fragment: str) -> None:
    doc = {**MOE_CONFIGS["mixtral"][0], **change}
    with pytest.raises(ValueError) as err:
        resolve_model(_write(tmp_path, {k: v for k, v in doc.items() if v is not None}))
    assert fragment in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_the_pipeline_and_the_worker_refuse_a_mixture_of_experts(tmp_path: Path) -> None:
    from dataclasses import replace

    from shardscope.contracts.hf_config import spec_of

    path = _write(tmp_path, MOE_CONFIGS["olmoe"][0])
    with pytest.raises(ValueError, match="config key gpu.model: the model .* is a mixture of 64 experts"):
        spec_of(path, "gpu.model")
    moe = replace(PRESETS["tiny"], experts=4, experts_per_token=2)
    with pytest.raises(ValueError, match="is a mixture of 4 experts"):
        spec_of(moe.to_dict(), "gpu.model")
    torch = pytest.importorskip("torch")  # noqa: F841
    from shardscope.training.model import GPT

    with pytest.raises(ValueError, match="model.experts .* is modeled only"):
        GPT(moe)


def test_mistral_keys_give_the_mistral_preset(tmp_path: Path) -> None:
    assert resolve_model(_write(tmp_path, MISTRAL))[1].param_count() == PRESETS["mistral-7b"].param_count()


def test_neox_is_gelu_and_untied_by_default(tmp_path: Path) -> None:
    doc = {"model_type": "gpt_neox", "hidden_size": 512, "num_hidden_layers": 6, "num_attention_heads": 8,
           "intermediate_size": 2048, "vocab_size": 50304, "max_position_embeddings": 2048, "hidden_act": "gelu"}
    cfg = resolve_model(_write(tmp_path, doc))[1]
    assert cfg.mlp == "gelu" and not cfg.tie_embeddings and cfg.n_kv_heads == 8


@pytest.mark.parametrize(("change", "fragment"), [
    ({"hidden_size": None}, "hidden_size or n_embd"),
    ({"intermediate_size": None}, "intermediate_size"),
    ({"vocab_size": None}, "vocab_size"),
    ({"num_hidden_layers": 0}, "num_hidden_layers must be a positive integer, got 0"),
    ({"num_attention_heads": 30}, "hidden_size (4096) must be divisible by num_attention_heads (30)"),
    ({"num_key_value_heads": 5}, "num_attention_heads (32) must be divisible by num_key_value_heads (5)"),
], ids=["no-width", "no-mlp-width", "no-vocab", "zero-layers", "heads-width", "kv-heads"])
def test_bad_config_is_one_sentence_naming_file_and_key(tmp_path: Path, change: dict, fragment: str) -> None:
    doc = {k: v for k, v in {**MISTRAL, **change}.items() if v is not None}
    path = _write(tmp_path, doc)
    with pytest.raises(ValueError) as err:
        resolve_model(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and fragment in message and "\n" not in message


def test_missing_file_says_what_model_takes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file; --model takes a preset"):
        resolve_model(str(tmp_path / "nope" / "config.json"))


def test_advise_says_what_an_encoder_decoders_description_leaves_out(capsys: pytest.CaptureFixture[str]) -> None:
    from shardscope.cli import main

    args = ["advise", "--topology", "preset:hgx-h100", "--gpus", "8", "--json"]
    assert main([*args, "--model", str(HF / "t5-large" / "config.json")]) == 0
    (note,) = [n for n in json.loads(capsys.readouterr().out)["notes"] if n.startswith("encoder-decoder")]
    assert "24 decoder layers' cross-attentions" in note and "not in the activations" in note
    assert main([*args, "--model", str(HF / "gpt2" / "config.json")]) == 0
    assert not [n for n in json.loads(capsys.readouterr().out)["notes"] if n.startswith("encoder-decoder")]
    t5 = str(HF / "t5-large" / "config.json")
    assert main(["memory", "--model", t5, "--gpus", "2", "--no-deepspeed-estimate"]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1] == f"note: {note}"


def test_a_vision_language_answer_says_its_vision_tower_is_not_modeled(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from shardscope.cli import main
    from shardscope.contracts.hf_config import reads_text_config

    path = _write(tmp_path, PALIGEMMA)
    assert reads_text_config(path) and reads_text_config(PALIGEMMA)
    assert not reads_text_config(str(HF / "gpt2" / "config.json")) and not reads_text_config("mistral-7b")
    assert main(["advise", "--topology", "preset:hgx-h100", "--gpus", "8", "--json", "--model", path]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert [n for n in notes if n.startswith("vision-language model: its language model (text_config) is modeled")]
    assert main(["memory", "--model", path, "--gpus", "8", "--no-deepspeed-estimate"]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("note: vision-language model")
