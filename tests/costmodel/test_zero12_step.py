"""DeepSpeed ZeRO-1/2's optimizer step on a GPU: its gradient norm in float64, then the partition's gradients flattened
and cast to fp32 beside the ones they came from (``stage_1_and_2.py`` at v0.18.5; modeled numbers)."""

from __future__ import annotations

from shardscope.contracts.models import ModelConfig, resolve_model
from shardscope.costmodel.memory_peak import StepShape, predict_peak, step_temporaries, zero12_step_moments

#: bigscience/bloom-560m: a 250,880-token embedding of width 1024 (257M of its 559M parameters) in one tensor.
BLOOM_560M = resolve_model({"model_type": "bloom", "hidden_size": 1024, "n_layer": 24, "n_head": 16,
                            "vocab_size": 250880, "tie_word_embeddings": True})[1]
#: Mistral-7B's shape: its largest tensor (the 131M-element embedding) is small beside a rank's partition.
SMALL_VOCAB = ModelConfig(n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=32000)


def test_a_16_bit_zero2_step_holds_a_flat_copy_and_its_fp32_cast_beside_the_gradients() -> None:
    local = SMALL_VOCAB.param_count() // 8
    assert zero12_step_moments("zero2", SMALL_VOCAB, local, "bf16") == 6 * local
    assert zero12_step_moments("zero2", SMALL_VOCAB, local, "fp32") == 4 * local  # the cast returns the flat copy
    assert step_temporaries("zero2", SMALL_VOCAB, 8, "bf16", "gpu") == 6 * local
    assert step_temporaries("fsdp", SMALL_VOCAB, 8, "bf16", "gpu") == 4 * local  # torch's foreach AdamW alone


def test_the_norms_float64_copy_of_a_large_embedding_is_the_step_where_it_is_larger() -> None:
    local = BLOOM_560M.param_count() // 2  # two ranks: the embedding is most of rank 0's partition
    embedding = BLOOM_560M.vocab_size * BLOOM_560M.d_model
    assert embedding < local
    assert zero12_step_moments("zero2", BLOOM_560M, local, "bf16") == 8 * embedding > 6 * local
    local8 = BLOOM_560M.param_count() // 8  # eight ranks: the embedding spans partitions, a chunk is a partition
    assert zero12_step_moments("zero2", BLOOM_560M, local8, "bf16") == 8 * local8


def test_zero1_frees_the_other_ranks_gradients_before_it_flattens() -> None:
    p = SMALL_VOCAB.param_count()
    two, eight = p // 2, p // 8
    # two ranks: 6 B of the half less 2 B of the other half it frees first
    assert zero12_step_moments("zero1", SMALL_VOCAB, two, "bf16") == 6 * two - 2 * (p - two)
    # eight ranks: what it frees is more than it copies, so the norm, with every gradient held, is the moment
    largest = max(SMALL_VOCAB.vocab_size * SMALL_VOCAB.d_model, SMALL_VOCAB.d_model * SMALL_VOCAB.d_ff)
    assert zero12_step_moments("zero1", SMALL_VOCAB, eight, "bf16") == 8 * min(largest, eight) == 8 * largest


def test_the_step_phase_of_the_whole_peak_carries_it_on_a_gpu_and_not_on_cpu() -> None:
    shape = StepShape(micro_batch=1, seq_len=512, dtype="bfloat16", checkpointing="full")
    gpu = predict_peak("zero2", BLOOM_560M, 2, shape, device="gpu")
    cpu = predict_peak("zero2", BLOOM_560M, 2, shape, device="cpu")
    embedding = BLOOM_560M.vocab_size * BLOOM_560M.d_model
    assert gpu.phases["step"]["optimizer_temporaries"] == 8 * embedding
    assert cpu.phases["step"]["optimizer_temporaries"] == 2 * 4 * (BLOOM_560M.param_count() // 2)  # torch's CPU Adam
