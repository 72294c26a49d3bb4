"""DeepSpeed 0.18.5/0.18.6's recount of the backward's parameters in every ZeRO gradient hook (modeled numbers)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardscope.cli import main
from shardscope.contracts.models import PRESETS, ModelConfig
from shardscope.contracts.peak_flops import peak_flops
from shardscope.costmodel.deepspeed_hooks import (SECONDS_PER_VISIT, hook_recount_s, installed_deepspeed_version,
                                                  recount_note, recounts_in_every_hook)
from shardscope.costmodel.hardware import spec_for_name
from shardscope.costmodel.step import DEFAULT_HOST_CALL_S, StepAssumptions, modeled_host_calls, predict_step

H100 = spec_for_name("NVIDIA H100 80GB HBM3")
#: The fix's benchmark model had 147 parameter tensors (deepspeedai/DeepSpeed#7886): 18 SwiGLU blocks of 8, the
#: embedding, the final norm and an untied head are as many.
FIX_SHAPE = ModelConfig(n_layers=18, d_model=1024, n_heads=16, n_kv_heads=16, d_ff=2816, vocab_size=32000,
                        max_seq_len=1024)


def test_only_the_two_releases_recount_in_every_hook() -> None:
    assert recounts_in_every_hook("0.18.5") and recounts_in_every_hook("0.18.6")
    assert recounts_in_every_hook("0.18.5+cu121")
    assert not any(recounts_in_every_hook(v) for v in ("0.18.4", "0.18.7", "0.19.8", "0.18.50", None))


def test_the_recount_is_the_fixs_measured_difference_on_its_tensor_count() -> None:
    assert FIX_SHAPE.param_tensors() == 147
    assert hook_recount_s("zero2", FIX_SHAPE, "0.18.5") == pytest.approx(0.1265 - 0.0505)
    assert hook_recount_s("zero3", FIX_SHAPE, "0.18.6") == pytest.approx(0.076)
    deeper = replace(FIX_SHAPE, n_layers=36)  # twice the tensors: four times the visits
    assert hook_recount_s("zero1", deeper, "0.18.5") == pytest.approx(deeper.param_tensors() ** 2 * SECONDS_PER_VISIT)
    for strategy, version, fraction in (("ddp", "0.18.5", 1.0), ("fsdp", "0.18.5", 1.0), ("zero2", "0.18.7", 1.0),
                                        ("zero2", None, 1.0), ("zero2", "0.18.5", 0.01)):
        assert hook_recount_s(strategy, FIX_SHAPE, version, fraction) == 0.0


def test_the_step_is_the_longer_of_the_gpus_work_and_the_hosts_with_the_recount() -> None:
    def step(cfg: ModelConfig, strategy: str, version: str | None, gpu=H100, accum: int = 1, micro_batch: int = 1):
        a = StepAssumptions(micro_batch=micro_batch, seq_len=1024, grad_accum=accum, deepspeed_version=version)
        return predict_step(strategy, "m", cfg, 8, peak_flops("NVIDIA H100 80GB HBM3"),
                            lambda op, size: size / 100e9, 80 * 2**30, a, gpu=gpu)

    for cfg, micro_batch in ((FIX_SHAPE, 1), (PRESETS["mistral-7b"], 1), (PRESETS["mistral-7b"], 8)):
        recount = cfg.param_tensors() ** 2 * SECONDS_PER_VISIT
        for accum in (1, 3):
            before = step(cfg, "zero2", "0.18.7", accum=accum, micro_batch=micro_batch)
            after = step(cfg, "zero2", "0.18.5", accum=accum, micro_batch=micro_batch)
            gpu_s = before.step_time_s - before.host_time_s
            host_s = modeled_host_calls("zero2", cfg, "none") * accum * DEFAULT_HOST_CALL_S + accum * recount
            assert after.step_time_s == pytest.approx(max(gpu_s, host_s))
            assert after.host_time_s == pytest.approx(max(0.0, host_s - gpu_s))
    # the fix's shape at micro-batch 1 is host-bound with the recount: the host's work sets the step
    small = step(FIX_SHAPE, "zero2", "0.18.5")
    assert small.host_time_s > 0 and small.step_time_s > 2 * step(FIX_SHAPE, "zero2", "0.18.7").step_time_s
    # mistral-7b at micro-batch 8 keeps the GPU busier than the recount keeps the host: it hides
    big = PRESETS["mistral-7b"]
    assert step(big, "zero2", "0.18.5", micro_batch=8).step_time_s == step(big, "zero2", "0.18.7",
                                                                          micro_batch=8).step_time_s
    assert step(FIX_SHAPE, "fsdp", "0.18.5").step_time_s == step(FIX_SHAPE, "fsdp", "0.18.7").step_time_s
    cpu = replace(H100, family="CPU (gloo)")  # measured steps there already hold the host's work
    assert step(FIX_SHAPE, "zero2", "0.18.5", gpu=cpu).step_time_s == step(FIX_SHAPE, "zero2", "0.18.7",
                                                                           gpu=cpu).step_time_s


def test_param_tensors_counts_the_workers_parameters() -> None:
    torch = pytest.importorskip("torch")
    from shardscope.training.model import GPT

    shapes = [PRESETS["tiny"], ModelConfig(n_layers=3, d_model=64, n_heads=4, n_kv_heads=2, d_ff=128,
                                                  vocab_size=100, max_seq_len=64, mlp="gelu", norm="layernorm",
                                                  tie_embeddings=True),
              ModelConfig(n_layers=2, d_model=64, n_heads=4, n_kv_heads=4, d_ff=96, vocab_size=90, max_seq_len=64,
                          norm="fused_rmsnorm")]
    for cfg in shapes:
        with torch.device("meta"):
            assert cfg.param_tensors() == len(list(GPT(cfg).parameters())), cfg


def test_advise_says_so_for_the_release_it_is_given_and_reads_the_installed_one(capsys) -> None:
    argv = ["advise", "--topology", "preset:hgx-h100", "--model", "mistral-7b", "--gpus", "8", "--micro-batch", "2",
            "--seq-len", "1024"]
    assert main([*argv, "--deepspeed-version", "0.18.5"]) == 0
    out = capsys.readouterr().out
    assert "note: DeepSpeed 0.18.5 recounts the backward's parameters in every gradient hook" in out
    assert f"{PRESETS['mistral-7b'].param_tensors()} parameter tensors" in out
    assert main([*argv, "--deepspeed-version", "0.18.7"]) == 0
    assert "recounts" not in capsys.readouterr().out
    assert main([*argv, "--strategies", "ddp,fsdp", "--deepspeed-version", "0.18.5"]) == 0
    assert "recounts" not in capsys.readouterr().out  # no DeepSpeed strategy ranked
    assert main(argv) == 0
    installed = installed_deepspeed_version()
    assert ("recounts" in capsys.readouterr().out) == recounts_in_every_hook(installed)


def test_the_note_is_none_where_nothing_is_added() -> None:
    assert recount_note("0.18.7", ["zero2"], FIX_SHAPE) is None
    assert recount_note("0.18.5", ["ddp", "fsdp"], FIX_SHAPE) is None
    assert "0.076 s" in recount_note("0.18.5", ["ddp", "zero3"], FIX_SHAPE)


def test_a_release_that_is_no_release_is_refused_in_one_sentence(capsys) -> None:
    argv = ["advise", "--topology", "preset:hgx-h100", "--model", "mistral-7b", "--gpus", "8"]
    assert main([*argv, "--deepspeed-version", "latest"]) == 2
    err = capsys.readouterr().err
    assert "--deepspeed-version: expected a release such as 0.18.7, got 'latest'" in err and err.count("\n") == 1


def test_a_real_models_count_of_tensors_replaces_the_stand_ins() -> None:
    """pi05's 814 trainable tensors (its vision tower and action expert) beside its Gemma-2B stand-in's 146: the
    recount grows with the square of the real count, as OpenTau#177's ~2.7 s of ZeRO-2 hook time did."""
    from shardscope.contracts.models import resolve_model

    gemma = {"model_type": "gemma", "hidden_size": 2048, "num_hidden_layers": 18, "num_attention_heads": 8,
             "num_key_value_heads": 1, "head_dim": 256, "intermediate_size": 16384, "vocab_size": 257152}
    _, stand_in = resolve_model(gemma)
    _, real = resolve_model({**gemma, "parameter_tensors": 814})
    assert stand_in.param_tensors() == 146 and real.param_tensors() == 814
    assert real.param_count() == stand_in.param_count()  # the count of tensors changes nothing else
    assert hook_recount_s("zero2", real, "0.18.5") == pytest.approx(814**2 * SECONDS_PER_VISIT)
    assert 2.2 < hook_recount_s("zero2", real, "0.18.5") < 2.5
    assert real.to_dict()["parameter_tensors"] == 814 and "parameter_tensors" not in stand_in.to_dict()
    assert resolve_model({"preset": "tiny", "parameter_tensors": 9})[1].param_tensors() == 9
    for bad in (0, -3, True, 2.5, "814"):
        with pytest.raises(ValueError, match="model.parameter_tensors must be a positive integer"):
            resolve_model({"preset": "tiny", "parameter_tensors": bad})


def test_the_pipeline_refuses_a_count_its_worker_would_not_build(tmp_path) -> None:
    import json

    from shardscope.contracts.hf_config import spec_of

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
                                "parameter_tensors": 40}))
    with pytest.raises(ValueError, match=r"config key sizing.model: .* parameter_tensors 40, .*leave parameter_tensors out"):
        spec_of(str(path), "sizing.model")
    with pytest.raises(ValueError, match="parameter_tensors 40"):
        spec_of({"preset": "tiny", "parameter_tensors": 40}, "sizing.model")
