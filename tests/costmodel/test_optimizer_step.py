"""The optimizer's update in the modeled step, and what offload moves off the GPU (modeled numbers throughout)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardscope.contracts.models import PRESETS
from shardscope.contracts.peak_flops import peak_flops
from shardscope.contracts.strategies import OFFLOAD_HOLDS, STRATEGY_FACTS
from shardscope.costmodel.hardware import spec_for_name
from shardscope.costmodel.memory_peak import OptimizerAssumption, block_weights, model_states, whole_peak
from shardscope.costmodel.optimizer_step import (ADAM_BYTES_PER_PARAM, CLIP_BYTES_PER_PARAM, CPU_ADAM_PARAMS_PER_S,
                                                 FOREACH_ADAM_BYTES_PER_PARAM, HALF_COPY_BYTES, STREAM_SHARE,
                                                 optimizer_step_s, updated_params)
from shardscope.costmodel.step import StepAssumptions, predict_step

H100 = spec_for_name("NVIDIA H100 80GB HBM3")
CFG = PRESETS["mistral-7b"]


def _step(strategy, a, gpus=8, gpu=H100, per_host=None):
    return predict_step(strategy, "mistral-7b", CFG, gpus, peak_flops("NVIDIA H100 80GB HBM3"),
                        lambda op, size: size / 100e9, 80 * 2**30, a, gpu=gpu, gpus_per_host=per_host)


def test_an_update_streams_its_implementations_bytes_at_the_stream_share_of_the_bandwidth():
    # torch's default multi-tensor AdamW under DDP; DeepSpeed's fused kernel, and its 16-bit copy, under ZeRO-0
    seconds = optimizer_step_s("ddp", CFG, 8, H100, dtype="bfloat16")
    bytes_moved = CFG.param_count() * (FOREACH_ADAM_BYTES_PER_PARAM + CLIP_BYTES_PER_PARAM)
    assert seconds == pytest.approx(bytes_moved / (3350e9 * STREAM_SHARE))
    fused = CFG.param_count() * (ADAM_BYTES_PER_PARAM + CLIP_BYTES_PER_PARAM + HALF_COPY_BYTES)
    assert optimizer_step_s("zero0", CFG, 8, H100, dtype="bfloat16") == pytest.approx(fused / (3350e9 * STREAM_SHARE))


def test_sharding_the_optimizer_state_divides_the_update_by_the_ranks():
    assert updated_params("zero1", CFG, 8) == pytest.approx(CFG.param_count() / 8)
    assert updated_params("ddp", CFG, 8) == CFG.param_count()
    assert updated_params("hsdp", CFG, 16, shard_group=8) == pytest.approx(CFG.param_count() / 8)
    ddp = optimizer_step_s("ddp", CFG, 8, H100, dtype="bfloat16")
    fsdp = optimizer_step_s("fsdp", CFG, 8, H100, dtype="bfloat16")
    assert fsdp == pytest.approx(ddp / 8)
    # DeepSpeed's fused kernel streams a third of torch's multi-tensor chain, even with its 16-bit copy written
    zero1 = optimizer_step_s("zero1", CFG, 8, H100, dtype="bfloat16")
    assert zero1 == pytest.approx(fsdp * (ADAM_BYTES_PER_PARAM + CLIP_BYTES_PER_PARAM + HALF_COPY_BYTES)
                                  / (FOREACH_ADAM_BYTES_PER_PARAM + CLIP_BYTES_PER_PARAM))


def test_only_the_trainable_share_is_updated():
    full = optimizer_step_s("ddp", CFG, 1, H100, dtype="bfloat16")
    lora = optimizer_step_s("ddp", CFG, 1, H100, dtype="bfloat16", trainable_fraction=0.01)
    assert lora == pytest.approx(full * 0.01)


def test_no_update_term_on_cpu_or_without_a_spec():
    cpu = replace(H100, family="CPU (gloo)")
    assert optimizer_step_s("ddp", CFG, 2, cpu, dtype="float32") == 0.0
    assert optimizer_step_s("ddp", CFG, 2, None, dtype="float32") == 0.0


def test_the_update_is_part_of_the_compute_time_once_per_optimizer_step():
    one = _step("ddp", StepAssumptions(micro_batch=1, seq_len=2048))
    four = _step("ddp", StepAssumptions(micro_batch=1, seq_len=2048, grad_accum=4))
    assert one.optimizer_time_s > 0
    assert four.optimizer_time_s == pytest.approx(one.optimizer_time_s)
    assert one.step_time_s == pytest.approx(one.compute_time_s + one.exposed_comm_time_s)
    forward_backward = one.compute_time_s - one.optimizer_time_s
    assert four.compute_time_s == pytest.approx(4 * forward_backward + one.optimizer_time_s)
    # so accumulating spreads one update over more tokens: tokens per second grow
    assert four.tokens_per_step / four.step_time_s > one.tokens_per_step / one.step_time_s
    assert "optimizer_time_s" not in one.to_row()


def test_offloading_the_optimizer_costs_the_host_update_and_the_pcie_copies():
    on_gpu = _step("zero2", StepAssumptions(micro_batch=4, seq_len=2048))
    offload = _step("zero2", StepAssumptions(micro_batch=4, seq_len=2048, offload_optimizer="cpu"))
    assert offload.optimizer_time_s > 10 * on_gpu.optimizer_time_s
    params = CFG.param_count() / 8
    assert offload.optimizer_time_s > params * 8 / CPU_ADAM_PARAMS_PER_S["deepspeed"]  # 8 ranks share one host
    # two hosts of four ranks: each host's CPU updates half as many partitions
    split = _step("zero2", StepAssumptions(micro_batch=4, seq_len=2048, offload_optimizer="cpu"), per_host=4)
    assert split.optimizer_time_s < offload.optimizer_time_s
    # FSDP steps torch's CPU AdamW, slower than DeepSpeed's CPU-Adam in one process
    alone = StepAssumptions(micro_batch=4, seq_len=2048, offload_optimizer="cpu")
    fsdp_alone, zero2_alone = _step("fsdp", alone, per_host=1), _step("zero2", alone, per_host=1)
    assert fsdp_alone.optimizer_time_s > zero2_alone.optimizer_time_s
    # but on one thread per rank (torchrun's OMP_NUM_THREADS=1): a host's ranks update side by side, not in turn
    fsdp = _step("fsdp", alone)
    assert fsdp.optimizer_time_s == pytest.approx(fsdp_alone.optimizer_time_s)
    assert fsdp.optimizer_time_s > params / CPU_ADAM_PARAMS_PER_S["torch"]
    assert fsdp.optimizer_time_s < 2 * params / CPU_ADAM_PARAMS_PER_S["torch"]


def test_offload_holds_what_each_frameworks_offload_moves_to_the_host():
    assert set(OFFLOAD_HOLDS) == set(STRATEGY_FACTS)
    cpu = OptimizerAssumption(offload="cpu")
    zero2 = model_states("zero2", CFG, 8, "bfloat16", "implementation", cpu)
    assert zero2["optim_bytes"] == 0 and zero2["grad_bytes"] == 0 and zero2["param_bytes"] > 0
    zero1 = model_states("zero1", CFG, 8, "bfloat16", "implementation", cpu)
    assert zero1["optim_bytes"] == 0 and zero1["grad_bytes"] > 0
    fsdp = model_states("fsdp", CFG, 8, "bfloat16", "implementation", cpu)
    assert fsdp == {"param_bytes": 0, "grad_bytes": 0, "optim_bytes": 0}


def test_frozen_weights_held_in_16_bits_are_not_cast_by_autocast():
    """DDP under autocast caches a bf16 copy of every fp32 weight through the forward; LoRA's frozen weights are
    held in bf16 already, so nothing is cast: the block computes as a 16-bit model whose frozen matmuls save no
    inputs for weight gradients (tests/training/test_saved_activations.py traces those)."""
    from shardscope.costmodel.memory_peak import StepShape, block_activation_bytes, head_activation_bytes

    full = whole_peak("ddp", CFG, 1, 1024, 1, dtype="bfloat16")
    lora = whole_peak("ddp", CFG, 1, 1024, 1, dtype="bfloat16", trainable_fraction=0.001)
    cache = CFG.n_layers * 2 * block_weights(CFG) + 2 * CFG.vocab_size * CFG.d_model
    frozen = StepShape(micro_batch=1, seq_len=1024, dtype="bfloat16", cast_share=0.001)
    sixteen_bit = (CFG.n_layers * block_activation_bytes(CFG, frozen, "bf16")
                   + head_activation_bytes(CFG, frozen, "bf16"))
    assert lora.phases["forward"]["activations"] == sixteen_bit
    assert full.phases["forward"]["activations"] - sixteen_bit > cache


def test_the_adamw_implementation_defaults_to_the_frameworks_and_a_run_may_name_its_own():
    from shardscope.costmodel.optimizer_step import adamw_implementation

    assert [adamw_implementation(s) for s in ("ddp", "fsdp", "hsdp", "zero1", "zero2", "zero3")] == [
        "foreach", "foreach", "foreach", "fused", "fused", "fused"]
    assert adamw_implementation("ddp", "fused") == "fused" and adamw_implementation("zero2", "foreach") == "foreach"
    with pytest.raises(ValueError, match="AdamW implementation must be one of default, fused, foreach"):
        adamw_implementation("ddp", "fast")
    with pytest.raises(ValueError, match="AdamW implementation"):
        StepAssumptions(adamw="fast")
    bandwidth = 3350e9 * STREAM_SHARE
    fused_ddp = optimizer_step_s("ddp", CFG, 8, H100, dtype="bfloat16", adamw="fused")
    assert fused_ddp == pytest.approx(CFG.param_count() * (ADAM_BYTES_PER_PARAM + CLIP_BYTES_PER_PARAM) / bandwidth)
    torch_zero1 = optimizer_step_s("zero1", CFG, 8, H100, dtype="bfloat16", adamw="foreach")
    assert torch_zero1 == pytest.approx(CFG.param_count() / 8 * (FOREACH_ADAM_BYTES_PER_PARAM + CLIP_BYTES_PER_PARAM
                                                                 + HALF_COPY_BYTES) / bandwidth)


def test_a_fused_kernel_keeps_no_temporary_in_the_step_and_advise_says_which_it_assumed(capsys):
    import json

    from shardscope.cli import main
    from shardscope.costmodel.answer import job_peak

    asked = StepAssumptions(micro_batch=1, seq_len=2048)
    foreach = job_peak("fsdp", CFG, 8, asked).phases["step"]["optimizer_temporaries"]
    assert foreach == 4 * (CFG.param_count() // 8)  # exp_avg_sq.sqrt() of every local parameter
    assert job_peak("fsdp", CFG, 8, replace(asked, adamw="fused")).phases["step"]["optimizer_temporaries"] == 0
    # DeepSpeed's step: FusedAdam (its default) keeps no temporary beside the fp32 gradient; torch's foreach one more
    fused_zero2 = job_peak("zero2", CFG, 8, asked).phases["step"]["optimizer_temporaries"]
    torch_zero2 = job_peak("zero2", CFG, 8, replace(asked, adamw="foreach")).phases["step"]["optimizer_temporaries"]
    assert torch_zero2 >= fused_zero2
    argv = ["advise", "--topology", "preset:hgx-h100", "--model", "llama-1b", "--gpus", "8", "--json"]
    assert main(argv) == 0
    default = {e["strategy"]: e for e in json.loads(capsys.readouterr().out)["ranking"]}
    assert main([*argv, "--adamw", "fused"]) == 0
    doc = json.loads(capsys.readouterr().out)
    fused = {e["strategy"]: e for e in doc["ranking"]}
    assert doc["assumptions"]["adamw"] == "fused"
    assert fused["ddp"]["step_time_s"] < default["ddp"]["step_time_s"]  # 40 B per parameter where it streamed 96
    assert fused["zero2"]["step_time_s"] == default["zero2"]["step_time_s"]  # DeepSpeed's default already
    assert main([*argv, "--adamw", "fast"]) == 2
    assert "--adamw" in capsys.readouterr().err


def test_a_for_loop_adamw_streams_what_foreach_does_and_keeps_temporaries_of_its_largest_tensors_alone(capsys):
    """PyTorch before 2.0 and the Hugging Face Trainer's ``adamw_hf`` step one tensor at a time: the update's bytes and
    time are foreach's, the step's temporaries a few of the largest tensor instead of one per parameter."""
    import json

    from shardscope.cli import main

    loop = optimizer_step_s("ddp", CFG, 8, H100, dtype="bfloat16", adamw="for-loop")
    assert loop == optimizer_step_s("ddp", CFG, 8, H100, dtype="bfloat16", adamw="foreach")
    argv = ["memory", "--model", "mistral-7b", "--gpus", "8", "--strategy", "ddp", "--seq-len", "256",
            "--activation-checkpointing", "full", "--json", "--no-deepspeed-estimate"]  # a peak in the step
    assert main([*argv, "--adamw", "for-loop"]) == 0
    peak = json.loads(capsys.readouterr().out)[0]["peak"]
    # the embedding's two (131M elements each) outweigh an MLP weight's three (58.7M each)
    assert peak["phases"]["step"]["optimizer_temporaries"] == 4 * 2 * CFG.vocab_size * CFG.d_model
    assert main(argv) == 0
    foreach = json.loads(capsys.readouterr().out)[0]["peak"]
    assert foreach["phases"]["step"]["optimizer_temporaries"] == 4 * CFG.param_count()
    assert peak["allocated_peak_bytes"] < foreach["allocated_peak_bytes"]
