"""Frozen weights (LoRA-style ``trainable_fraction``): never updated, so held in the training dtype with no fp32
copy, and the optimizer's step temporaries are per stepped (trainable) parameter only. Checked on the LitGPT LoRA
case's shape (Llama 2 7B, 1 GPU, seq 1304): its published 19.8 GiB allocated peak is below the 25 GiB that fp32
frozen weights alone would take."""

from __future__ import annotations

from shardscope.contracts.models import resolve_model
from shardscope.costmodel.answer import job_peak
from shardscope.costmodel.step import StepAssumptions

_, LLAMA2_7B = resolve_model({"d_model": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 32, "mlp": "swiglu",
                              "d_ff": 11008, "vocab_size": 32000, "max_seq_len": 4096, "tie_embeddings": False})
LORA = StepAssumptions(micro_batch=1, seq_len=1304, trainable_fraction=0.00062)


def test_frozen_weights_are_held_in_the_training_dtype() -> None:
    n = LLAMA2_7B.param_count()
    for strategy, shards in (("ddp", 1), ("fsdp", 2), ("zero3", 2)):
        peak = job_peak(strategy, LLAMA2_7B, shards, LORA)
        assert peak.param_bytes < 2.01 * n / shards
        assert peak.param_bytes > 1.99 * n / shards


def test_the_optimizer_step_allocates_only_for_the_trainable_parameters() -> None:
    peak = job_peak("ddp", LLAMA2_7B, 1, LORA)
    assert peak.phases["step"]["optimizer_temporaries"] < 0.001 * 4 * LLAMA2_7B.param_count()
    assert peak.peak_phase != "step" and peak.peak_bytes < 40 * 2**30
