"""``advise`` and ``memory`` describe any real run (issue 31.1): HF configs, dtype, checkpointing, global batch,
transport, frozen weights, optimizer offload; bad input is one sentence and exit 2; no fit is an answer."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from shardscope.cli import main
from shardscope.contracts.models import PRESETS
from shardscope.costmodel.answer import job_peak
from shardscope.costmodel.step import StepAssumptions

HF = Path(__file__).resolve().parents[1] / "data" / "hf"
H100 = ("--topology", "preset:hgx-h100")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _advise(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = _run(capsys, "advise", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def _peaks(doc: dict) -> dict[str, int]:
    return {r["strategy"]: r["peak_bytes"] for r in doc["ranking"]}


def test_hf_config_in_advise_and_memory(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(HF / "llama-3.2-1b" / "config.json")
    by_path = _advise(capsys, "--model", path, "--gpus", "8", *H100, "--seq-len", "2048")
    by_preset = _advise(capsys, "--model", "llama-1b", "--gpus", "8", *H100, "--seq-len", "2048")
    assert by_path["model"] == "llama-3.2-1b" and _peaks(by_path) == _peaks(by_preset)
    code, out, _ = _run(capsys, "memory", "--model", str(HF / "gpt2" / "config.json"), "--gpus", "2", "--json",
                        "--no-deepspeed-estimate")
    assert code == 0 and json.loads(out)[0]["model"] == "gpt2"


def test_a_config_json_object_on_the_command_line_is_read_as_the_file_would_be(capsys: pytest.CaptureFixture[str]) -> None:
    """``--model '{...}'`` with a config.json's own keys: the same shape as the file (the keys a user copies from the
    Hub), named by its model type."""
    doc = (HF / "llama-3.2-1b" / "config.json").read_text()
    by_object = _advise(capsys, "--model", doc, "--gpus", "8", *H100, "--seq-len", "2048")
    by_path = _advise(capsys, "--model", str(HF / "llama-3.2-1b" / "config.json"), "--gpus", "8", *H100,
                      "--seq-len", "2048")
    assert _peaks(by_object) == _peaks(by_path) and by_object["model"] == "llama"


@pytest.mark.parametrize(("hf", "layers", "d_ff", "mlp"), [
    ({"model_type": "t5", "d_model": 1024, "num_layers": 24, "num_decoder_layers": 24, "num_heads": 16, "d_kv": 64,
      "d_ff": 4096, "vocab_size": 32128, "feed_forward_proj": "relu"}, 48, 4096, "gelu"),
    ({"model_type": "t5", "d_model": 768, "num_layers": 12, "num_heads": 12, "d_kv": 64, "d_ff": 2048,
      "vocab_size": 250112, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False}, 24, 2048, "swiglu"),
    ({"model_type": "blenderbot", "d_model": 1280, "encoder_layers": 2, "decoder_layers": 12,
      "encoder_attention_heads": 32, "encoder_ffn_dim": 5120, "vocab_size": 8008, "activation_function": "gelu",
      "max_position_embeddings": 128}, 14, 5120, "gelu"),
    ({"model_type": "deberta-v2", "hidden_size": 1536, "num_hidden_layers": 24, "num_attention_heads": 24,
      "intermediate_size": 6144, "vocab_size": 128100, "hidden_act": "gelu", "max_position_embeddings": 512},
     24, 6144, "gelu"),
], ids=["t5-large", "mt5-base-gated", "blenderbot-400m", "deberta-v2-xlarge"])
def test_encoders_and_encoder_decoders_stand_as_one_decoder_of_all_their_layers(hf: dict, layers: int, d_ff: int,
                                                                              mlp: str) -> None:
    """T5's ``num_layers`` + ``num_decoder_layers`` (the decoder's defaulting to the encoder's), BART/BlenderBot's
    ``encoder_layers`` + ``decoder_layers``; T5's ``feed_forward_proj`` says whether its MLP is gated; the encoder
    families' GELU MLPs are ungated (the dimensions as the cases of tests/data/published write them)."""
    from shardscope.contracts.models import resolve_model

    _, cfg = resolve_model(hf)
    assert (cfg.n_layers, cfg.d_ff, cfg.mlp) == (layers, d_ff, mlp)


@pytest.mark.parametrize(("model", "fragment"), [
    ('{"preset": "tiny", "n_layers": 0}', "n_layers must be a positive integer"),
    ('{"preset": "tiny", "n_heads": 3}', "divisible by model.n_heads"),
], ids=["zero-layers", "heads-width"])
def test_impossible_dimensions_are_one_sentence(capsys: pytest.CaptureFixture[str], model: str, fragment: str) -> None:
    for command in (["advise", *H100], ["memory"]):
        code, out, err = _run(capsys, *command, "--model", model, "--gpus", "2")
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and fragment in err


def test_config_json_without_a_needed_key_names_file_and_key(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    doc = json.loads((HF / "llama-3.2-1b" / "config.json").read_text())
    del doc["intermediate_size"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    for command in (["advise", *H100], ["memory"]):
        code, out, err = _run(capsys, *command, "--model", str(path), "--gpus", "2")
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert str(path) in err and "intermediate_size" in err and "Traceback" not in err


def test_global_batch_ranks_each_strategy_at_its_own_largest_fitting_micro_batch(capsys: pytest.CaptureFixture[str]) -> None:
    # 60 sequences per rank: divisors fine enough (6, 10, 12) that freed memory shows as a larger micro-batch
    doc = _advise(capsys, "--model", "llama-1b", "--gpus", "8", *H100, "--seq-len", "2048", "--global-batch", "480")
    cfg = PRESETS["llama-1b"]
    usable = doc["decision"]["usable_bytes"]
    for entry in doc["ranking"]:
        mb, accum = entry["micro_batch"], entry["grad_accum"]
        assert mb * accum * 8 == 480
        asked = StepAssumptions(micro_batch=mb, seq_len=2048)
        assert entry["peak_bytes"] == job_peak(entry["strategy"], cfg, 8, asked, capacity_bytes=usable).peak_bytes
        assert entry["allocated_peak_bytes"] == job_peak(entry["strategy"], cfg, 8, asked).allocated_peak_bytes
        if entry["fits"] and mb < 60:  # the next divisor of the per-rank 60 sequences does not fit
            bigger = next(d for d in (2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60) if d > mb)
            assert not job_peak(entry["strategy"], cfg, 8, StepAssumptions(micro_batch=bigger, seq_len=2048)).fits(usable)
        assert entry["tokens_per_s"] == pytest.approx(480 * 2048 / entry["step_time_s"])
    mbs = {e["strategy"]: e["micro_batch"] for e in doc["ranking"]}
    assert mbs["zero3"] > mbs["ddp"]  # sharding frees memory for a larger micro-batch
    code, _, err = _run(capsys, "advise", "--model", "llama-1b", "--gpus", "8", *H100, "--global-batch", "12")
    assert code == 2 and "multiple of the 8 data-parallel ranks" in err


def test_run_flags_move_the_peak_the_right_way(capsys: pytest.CaptureFixture[str]) -> None:
    base = _peaks(_advise(capsys, "--model", "mistral-7b", "--gpus", "8", *H100))
    frozen = _peaks(_advise(capsys, "--model", "mistral-7b", "--gpus", "8", *H100, "--trainable-fraction", "0.01"))
    offload = _peaks(_advise(capsys, "--model", "mistral-7b", "--gpus", "8", *H100, "--offload-optimizer", "cpu"))
    recompute = _peaks(_advise(capsys, "--model", "mistral-7b", "--gpus", "8", *H100, "--activation-checkpointing", "full"))
    fp32 = _peaks(_advise(capsys, "--model", "mistral-7b", "--gpus", "8", *H100, "--dtype", "float32"))
    fp16 = _peaks(_advise(capsys, "--model", "mistral-7b", "--gpus", "8", *H100, "--dtype", "float16"))
    for s in base:
        assert frozen[s] < base[s] and offload[s] < base[s] and recompute[s] < base[s] and fp16[s] == base[s]
    assert fp32["zero3"] > base["zero3"]


def test_pcie_transport_slows_communication(capsys: pytest.CaptureFixture[str]) -> None:
    nvlink = _advise(capsys, "--model", "llama-1b", "--gpus", "8", *H100)
    pcie = _advise(capsys, "--model", "llama-1b", "--gpus", "8", *H100, "--transport", "pcie")
    comm = {d["transport"]: {r["strategy"]: r["comm_time_s"] for r in d["ranking"]} for d in (nvlink, pcie)}
    # comm_time_s includes the framework host work that exceeds the GPU's (ZeRO-3's hooks on a 1 B model over
    # NVLink), which PCIe does not slow: every strategy's grows, DDP's (whose host calls hide) more than 3x
    assert all(comm["pcie"][s] > comm["default"][s] for s in comm["default"])
    assert comm["pcie"]["ddp"] > 3 * comm["default"]["ddp"]


def test_a_model_nothing_holds_is_an_answer(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _advise(capsys, "--model", "mistral-7b", "--gpus", "1", *H100)
    assert doc["recommended"] is None and not any(r["fits"] for r in doc["ranking"])
    no_fit = doc["no_fit"]
    assert no_fit["smallest_peak_bytes"] == min(_peaks(doc).values()) and no_fit["gpus_needed"] > 1
    code, out, _ = _run(capsys, "advise", "--model", "mistral-7b", "--gpus", "1", *H100)
    assert code == 0 and "the smallest peak is" in out and "would need" in out
    assert f"would need {no_fit['gpus_needed']} GPUs ({no_fit['strategy_needed']})" in out


def test_the_gpus_a_model_would_need_are_the_fewest_any_strategy_fits_on() -> None:
    """Not the GPU count of the strategy with the smallest peak here: ZeRO-2 keeps every parameter and activation,
    so it can be the smallest on one GPU and never fit, where FSDP fits on 16."""
    from shardscope.contracts.models import PRESETS
    from shardscope.costmodel.answer import job_peak, smallest_holding
    from shardscope.costmodel.step import StepAssumptions

    cfg, a, usable = PRESETS["mistral-7b"], StepAssumptions(micro_batch=1, seq_len=4096), 52 * 10**9
    strategies = ["ddp", "fsdp", "zero1", "zero2", "zero3"]
    no_fit = smallest_holding(strategies, cfg, 1, a, usable)
    n, chosen = no_fit["gpus_needed"], no_fit["strategy_needed"]
    assert n and job_peak(chosen, cfg, n, a).fits(usable)
    assert not any(job_peak(s, cfg, n // 2, a).fits(usable) for s in strategies)


def test_activations_no_gpu_count_holds_are_answered_with_checkpointing_and_the_gpus_both_need() -> None:
    """At 65,536 tokens a 7B model's activations alone outgrow an 80 GB GPU whatever shards its states, and on one GPU
    its states outgrow it with checkpointing: the answer is the fewest GPUs at which a strategy fits with full
    activation checkpointing, and at half as many none does."""
    from dataclasses import replace

    from shardscope.contracts.models import PRESETS
    from shardscope.costmodel.answer import job_peak, smallest_holding
    from shardscope.costmodel.step import StepAssumptions

    cfg = replace(PRESETS["mistral-7b"], max_seq_len=65536)
    a, usable = StepAssumptions(micro_batch=1, seq_len=65536), 80 * 10**9
    strategies = ["ddp", "fsdp", "zero1", "zero2", "zero3"]
    no_fit = smallest_holding(strategies, cfg, 1, a, usable)
    assert no_fit["gpus_needed"] is None and no_fit["fits_with_checkpointing"] is None
    n, chosen = no_fit["gpus_needed_with_checkpointing"], no_fit["strategy_needed_with_checkpointing"]
    ckpt = replace(a, checkpointing="full")
    assert n and job_peak(chosen, cfg, n, ckpt).fits(usable)
    assert not any(job_peak(s, cfg, n // 2, ckpt).fits(usable) for s in strategies)


def test_unknown_gpu_is_a_note_not_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "advise", "--model", "gpt2-small", "--gpus", "2", "--topology", "preset:pcie-l40s",
                          "--gpu", "Quantum 9000")
    assert code == 0, err
    assert "note: memory of Quantum 9000 is not known: 24 GB assumed" in out
    assert "note: peak FLOP/s of Quantum 9000 is not known: 125 TFLOP/s" in out


def test_advise_answers_in_under_a_second_of_cpu() -> None:
    """Timed in CPU seconds of this process (the machine may be shared), on Mistral-7B, 8 GPUs, a global batch."""
    start = time.process_time()
    assert main(["advise", "--model", "mistral-7b", "--gpus", "8", *H100, "--global-batch", "64", "--json"]) == 0
    assert time.process_time() - start < 1.0


def test_grad_accum_describes_the_runs_accumulation_and_excludes_global_batch(capsys: pytest.CaptureFixture[str]) -> None:
    """``--grad-accum K`` keeps the given micro-batch and accumulates K of it per optimizer step, for every strategy:
    DeepSpeed ZeRO-2 reduces in every micro-batch, ZeRO-1 once a step, so accumulation slows ZeRO-2 against ZeRO-1
    (BELLE's issue #402 measured that). With ``--global-batch`` (each strategy's own accumulation) it is refused."""
    shape = ["--model", "llama-1b", "--gpus", "2", "--topology", "preset:pcie-l40s", "--micro-batch", "1",
             "--seq-len", "1024", "--strategies", "zero1,zero2"]
    once = {r["strategy"]: r for r in _advise(capsys, *shape)["ranking"]}
    accum = {r["strategy"]: r for r in _advise(capsys, *shape, "--grad-accum", "4")["ranking"]}
    assert {(r["micro_batch"], r["grad_accum"]) for r in accum.values()} == {(1, 4)}
    assert once["zero1"]["step_time_s"] == pytest.approx(once["zero2"]["step_time_s"])
    assert accum["zero2"]["step_time_s"] > 1.2 * accum["zero1"]["step_time_s"]
    assert accum["zero1"]["tokens_per_s"] > once["zero1"]["tokens_per_s"]  # the update and reduction spread
    code, out, err = _run(capsys, "advise", *shape, "--grad-accum", "4", "--global-batch", "8")
    assert code == 2 and out == "" and "--grad-accum" in err and len(err.strip().splitlines()) == 1


def test_each_entry_says_the_peak_on_the_allocators_basis_and_as_nvidia_smi_sees_it(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _advise(capsys, "--model", "llama-1b", "--gpus", "8", *H100)
    for entry in doc["ranking"]:
        assert entry["device_bytes"] > entry["peak_bytes"]  # the CUDA context and NCCL's buffers beside it
    code, out, _ = _run(capsys, "memory", "--model", "llama-1b", "--gpus", "8", "--json", "--no-deepspeed-estimate")
    by_memory = {r["strategy"]: r["peak"]["device_bytes"] for r in json.loads(out)}
    assert {e["strategy"]: e["device_bytes"] for e in doc["ranking"]}.items() <= by_memory.items()


def test_an_hf_config_without_tie_word_embeddings_takes_its_familys_default() -> None:
    """transformers' PretrainedConfig ties by default (GPT-2, BLOOM, Gemma, T5); Llama's, Mistral's, Qwen's and
    GPT-NeoX's config classes set it false."""
    from shardscope.contracts.models import resolve_model

    dims = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 512,
            "vocab_size": 1000}
    assert resolve_model({**dims, "model_type": "bloom"})[1].tie_embeddings is True
    assert resolve_model({**dims, "model_type": "llama"})[1].tie_embeddings is False
    assert resolve_model({**dims, "model_type": "qwen3"})[1].tie_embeddings is False
    assert resolve_model({**dims, "model_type": "llama", "tie_word_embeddings": True})[1].tie_embeddings is True


def test_heads_wider_than_the_width_are_described_not_refused() -> None:
    """Qwen3-32B (64 heads of 128 on a width of 5120) and T5-3B (``d_kv`` 128 x 32 heads on 1024): the queries are
    ``n_heads x head_size`` wide, the parameters counted with them; a shape whose heads divide the width stores no
    head size (its specs and job ids stay as they were)."""
    from shardscope.contracts.models import resolve_model

    _, qwen = resolve_model({"model_type": "qwen3", "hidden_size": 5120, "num_hidden_layers": 64,
                             "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
                             "intermediate_size": 25600, "vocab_size": 151936, "tie_word_embeddings": False})
    assert (qwen.head_size, qwen.q_dim) == (128, 8192)
    assert qwen.param_count() == pytest.approx(32.76e9, rel=0.01)  # Qwen3-32B: 32.8 B published
    _, llama = resolve_model({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
                              "num_attention_heads": 32, "head_dim": 128, "intermediate_size": 11008,
                              "vocab_size": 32000})
    assert llama.head_size is None and "head_size" not in llama.to_dict()


def test_layernorm_families_build_torchs_fused_layernorm() -> None:
    """GPT-2, GPT-NeoX, BLOOM and the BERT and BART families normalise with LayerNorm (a gain and a bias: one more
    parameter per width per norm), Llama, Qwen, Gemma and T5 with RMSNorm; the worker builds what the shape says."""
    from shardscope.contracts.models import resolve_model
    from shardscope.training.model import GPT, assert_param_count

    dims = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 512,
            "vocab_size": 300}
    gpt2 = resolve_model({**dims, "model_type": "gpt2"})[1]
    llama = resolve_model({**dims, "model_type": "llama"})[1]
    t5 = resolve_model({"model_type": "t5", "d_model": 128, "num_layers": 1, "num_heads": 4, "d_ff": 512,
                        "vocab_size": 300})[1]
    assert (gpt2.norm, llama.norm, t5.norm) == ("layernorm", "rmsnorm", "rmsnorm")
    assert gpt2.to_dict()["norm"] == "layernorm" and "norm" not in llama.to_dict()
    untied = resolve_model({**dims, "model_type": "gpt2", "tie_word_embeddings": False})[1]
    assert untied.param_count() - resolve_model({**dims, "model_type": "llama"})[1].param_count() \
        == (2 * untied.n_layers + 1) * untied.d_model - untied.n_layers * untied.d_model * untied.d_ff  # biases; 2 MLP
    # matrices, not SwiGLU's 3
    assert_param_count(GPT(gpt2), gpt2)


def test_a_fused_rmsnorm_is_named_by_a_norm_key_and_holds_less_than_the_eager_one() -> None:
    """A config.json object may name the norm the run's framework uses (``"norm": "fused_rmsnorm"``: torchtitan's
    kernel); the fused kernel keeps its input and one statistic where the eager RMSNorm keeps fp32 copies, so the
    same Llama holds less and streams fewer bytes; the worker builds it with the same parameters."""
    from dataclasses import replace

    from shardscope.contracts.models import resolve_model
    from shardscope.costmodel.answer import job_peak
    from shardscope.training.model import GPT, assert_param_count

    dims = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
            "intermediate_size": 1376, "vocab_size": 4000, "max_position_embeddings": 2048}
    eager = resolve_model(dims)[1]
    fused = resolve_model({**dims, "norm": "fused_rmsnorm"})[1]
    assert (eager.norm, fused.norm) == ("rmsnorm", "fused_rmsnorm") and eager.param_count() == fused.param_count()
    a = StepAssumptions(micro_batch=4, seq_len=2048)
    assert job_peak("fsdp", fused, 8, a).peak_bytes < job_peak("fsdp", eager, 8, a).peak_bytes
    assert_param_count(GPT(replace(fused, n_layers=1)), replace(fused, n_layers=1))


def test_falcons_multi_query_and_grouped_keys_are_read() -> None:
    from shardscope.contracts.models import resolve_model

    dims = {"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71,
            "vocab_size": 65024}
    assert resolve_model({**dims, "multi_query": True})[1].n_kv_heads == 1
    assert resolve_model({**dims, "hidden_size": 8192, "num_attention_heads": 128, "new_decoder_architecture": True,
                          "num_kv_heads": 8})[1].n_kv_heads == 8
    assert resolve_model(dims)[1].n_kv_heads == 71


def test_eager_attention_from_the_flag_or_the_config_holds_more_and_runs_slower(capsys: pytest.CaptureFixture[str]) -> None:
    """--attention eager (or a config's attn_implementation) prices Hugging Face's eager attention: every score's float32
    softmax and its cast kept and streamed; a config's attention dropout keeps its mask too. The flag and the config
    give the same answer; selective_op beside it is refused in one sentence."""
    shape = ("--gpus", "8", *H100, "--seq-len", "2048", "--micro-batch", "1")
    fused = _advise(capsys, "--model", "llama-1b", *shape)
    flag = _advise(capsys, "--model", "llama-1b", "--attention", "eager", *shape)
    config = _advise(capsys, "--model", json.dumps({"preset": "llama-1b", "attention": "eager"}), *shape)
    assert _peaks(flag) == _peaks(config)
    assert all(_peaks(flag)[s] > _peaks(fused)[s] for s in _peaks(fused))
    times = {doc_id: {r["strategy"]: r["step_time_s"] for r in doc["ranking"]}
             for doc_id, doc in (("fused", fused), ("eager", flag))}
    # ZeRO-3's step here is its host calls' (the same either way); the others compute longer
    assert all(times["eager"][s] >= times["fused"][s] for s in times["fused"]) and times["eager"]["fsdp"] > 1.5 * times[
        "fused"]["fsdp"]
    dropout = _advise(capsys, "--model", json.dumps({"preset": "llama-1b", "attention": "eager",
                                                     "attention_dropout": 0.1}), *shape)
    assert all(_peaks(dropout)[s] > _peaks(flag)[s] for s in _peaks(flag))
    code, _, err = _run(capsys, "advise", "--model", "llama-1b", "--attention", "eager", *shape,
                        "--activation-checkpointing", "selective_op")
    assert code == 2 and "selective_op" in err and err.count("\n") == 1
    back = _advise(capsys, "--model", json.dumps({"preset": "llama-1b", "attention": "eager"}), "--attention", "sdpa",
                   *shape)
    assert _peaks(back) == _peaks(fused)  # the flag names the run's attention over its model's
