"""DeepSpeed ZeRO-1/2/3's optimizer step on a GPU: its gradient norm in float64, then the partition's gradients flattened
and cast to fp32 beside the ones they came from (``stage_1_and_2.py``, ``stage3.py`` at v0.18.5; modeled numbers)."""

from __future__ import annotations

from shardscope.contracts.models import ModelConfig, resolve_model
from shardscope.costmodel.deepspeed_config import DeepSpeedKnobs
from shardscope.costmodel.memory_peak import StepShape, predict_peak, step_temporaries, zero_step_moments

#: bigscience/bloom-560m: a 250,880-token embedding of width 1024 (257M of its 559M parameters) in one tensor.
BLOOM_560M = resolve_model({"model_type": "bloom", "hidden_size": 1024, "n_layer": 24, "n_head": 16,
                            "vocab_size": 250880, "tie_word_embeddings": True})[1]
#: Mistral-7B's shape: its largest tensor (the 131M-element embedding) is small beside a rank's partition.
MISTRAL = ModelConfig(n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=32000)
#: Llama 2 70B's shape: a rank's partition of it is several of ZeRO-3's default sub-groups of 1e9 elements.
LLAMA_70B = ModelConfig(n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8, d_ff=28672, vocab_size=32000)


def _largest(cfg: ModelConfig) -> int:
    return max(cfg.vocab_size * cfg.d_model, cfg.d_model * cfg.d_ff)


def test_a_16_bit_zero2_step_holds_a_flat_copy_and_its_fp32_cast_beside_the_gradients() -> None:
    local = MISTRAL.param_count() // 8
    assert zero_step_moments("zero2", MISTRAL, 8, "bf16") == 6 * local
    assert zero_step_moments("zero2", MISTRAL, 8, "fp32") == 4 * local  # the cast returns the flat copy
    assert step_temporaries("zero2", MISTRAL, 8, "bf16", "gpu") == 6 * local
    assert step_temporaries("fsdp", MISTRAL, 8, "bf16", "gpu") == 4 * local  # torch's foreach AdamW alone


def test_the_norms_float64_copy_of_a_large_embedding_is_the_step_where_it_is_larger() -> None:
    local = BLOOM_560M.param_count() // 2  # two ranks: the embedding is most of rank 0's partition
    embedding = BLOOM_560M.vocab_size * BLOOM_560M.d_model
    assert embedding < local
    assert zero_step_moments("zero2", BLOOM_560M, 2, "bf16") == 8 * embedding > 6 * local
    local8 = BLOOM_560M.param_count() // 8  # eight ranks: the embedding spans partitions, a chunk is a partition
    assert zero_step_moments("zero2", BLOOM_560M, 8, "bf16") == 8 * local8
    # ZeRO-3 partitions every tensor: a rank's chunk of the embedding is its share of it
    assert zero_step_moments("zero3", BLOOM_560M, 2, "bf16") == 6 * local > 8 * (embedding // 2)


def test_zero1_frees_the_other_ranks_gradients_before_it_flattens() -> None:
    p = MISTRAL.param_count()
    two, eight = p // 2, p // 8
    # two ranks: 6 B of the half less 2 B of the other half it frees first
    assert zero_step_moments("zero1", MISTRAL, 2, "bf16") == 6 * two - 2 * (p - two)
    # eight ranks: what it frees is more than it copies, so the norm, with every gradient held, is the moment
    assert zero_step_moments("zero1", MISTRAL, 8, "bf16") == 8 * min(_largest(MISTRAL), eight) == 8 * _largest(MISTRAL)


def test_zero3_steps_a_large_partition_one_sub_group_at_a_time() -> None:
    local = LLAMA_70B.param_count() // 8
    chunk = -(-_largest(LLAMA_70B) // 8)
    assert local > 8 * 10**9
    assert zero_step_moments("zero3", LLAMA_70B, 8, "bf16") == 6 * (10**9 + chunk)  # DeepSpeed's default sub-group
    assert zero_step_moments("zero3", LLAMA_70B, 8, "bf16", sub_group_elements=10**12) == 6 * local
    small = DeepSpeedKnobs(sub_group_elements=10**8)  # a run's own ds_config.json
    assert step_temporaries("zero3", LLAMA_70B, 8, "bf16", "gpu", small) == 6 * (10**8 + chunk)
    assert step_temporaries("zero3", LLAMA_70B, 8, "bf16", "cpu", small) == 2 * 4 * local  # torch's CPU Adam


def test_the_step_phase_of_the_whole_peak_carries_it_on_a_gpu_and_not_on_cpu() -> None:
    shape = StepShape(micro_batch=1, seq_len=512, dtype="bfloat16", checkpointing="full")
    gpu = predict_peak("zero2", BLOOM_560M, 2, shape, device="gpu")
    cpu = predict_peak("zero2", BLOOM_560M, 2, shape, device="cpu")
    embedding = BLOOM_560M.vocab_size * BLOOM_560M.d_model
    assert gpu.phases["step"]["optimizer_temporaries"] == 8 * embedding
    assert cpu.phases["step"]["optimizer_temporaries"] == 2 * 4 * (BLOOM_560M.param_count() // 2)  # torch's CPU Adam
