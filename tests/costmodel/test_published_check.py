"""benchmarks/published_check.py: its scoring on constructed data, the published training set's form and split,
and today's figures on that set pinned (floors and ceilings, rounded to the safe side) so a change that makes
the modeled answer agree worse with the published runs fails here."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("published_check", ROOT / "benchmarks" / "published_check.py")
pc = importlib.util.module_from_spec(_SPEC)
sys.modules["published_check"] = pc
_SPEC.loader.exec_module(pc)


# ------------------------------------------------------------------------------------- scoring on made-up data
def test_a_clear_winner_is_found_and_a_gap_under_three_percent_is_a_tie() -> None:
    assert pc.clear_winner({"ddp": 1.10, "fsdp": 1.00}) == "ddp"
    assert pc.clear_winner({"ddp": 1.02, "fsdp": 1.00}) is None
    assert pc.clear_winner({"ddp": 1.0}) is None


def test_top1_counts_a_picked_winner_a_missed_one_and_skips_a_tie() -> None:
    measured = {"ddp": 2.0, "zero2": 1.0, "zero3": 0.5}
    assert pc.top1(measured, {"ddp": 3.0, "zero2": 1.0, "zero3": 2.0}) is True
    assert pc.top1(measured, {"ddp": 1.0, "zero2": 3.0, "zero3": 2.0}) is False
    assert pc.top1(measured, {"ddp": 3.0, "zero2": 3.0, "zero3": 2.0}) is False  # a modeled tie picks nobody
    assert pc.top1({"ddp": 1.02, "zero2": 1.0}, {"ddp": 1.0, "zero2": 2.0}) is None  # measured tie: not counted


def test_pairwise_skips_pairs_measured_within_three_percent_and_counts_modeled_ties_as_misses() -> None:
    measured = {"a": 3.0, "b": 2.0, "c": 1.01, "d": 1.0}  # c-d is a tie: 5 pairs count
    assert pc.pairwise(measured, {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}) == (5, 5)
    # a last: 3 misses; b = c modeled: a miss; b > d: right
    assert pc.pairwise(measured, {"a": 1.0, "b": 2.0, "c": 2.0, "d": 1.5}) == (1, 5)


def test_speed_ratio_error_is_a_factor_against_the_measured_fastest() -> None:
    errors = pc.ratio_errors({"ddp": 2.0, "zero3": 1.0}, {"ddp": 3.0, "zero3": 1.0})
    assert errors == [pytest.approx(1.5)]
    assert pc.ratio_errors({"ddp": 2.0, "zero3": 1.0}, {"ddp": 1.0, "zero3": 1.0}) == [pytest.approx(2.0)]
    assert pc.ratio_errors({"ddp": 2.0}, {"ddp": 1.0}) == []


def test_an_oom_predicted_to_fit_is_counted_and_so_is_a_run_predicted_not_to_fit() -> None:
    rows = [("oom", True), ("oom", True), ("oom", None), ("ok", False), ("ok", True)]
    assert pc.oom_misses(rows) == (2, 2, 2, 1)  # the unknown fit is not counted


def test_memory_error_is_signed_relative_to_the_measurement() -> None:
    assert pc.memory_error(90.0, 100.0) == pytest.approx(-0.10)
    assert pc.memory_error(125.0, 100.0) == pytest.approx(0.25)
    assert pc.spread([]) == {"n": 0, "median": None, "worst": None}
    assert pc.spread([0.1, 0.3, 0.2]) == {"n": 3, "median": 0.2, "worst": 0.3}


def test_summarize_scores_a_constructed_case_end_to_end() -> None:
    def result(label: str, measured: float | None, modeled: float, outcome: str, fits: bool) -> Any:
        answer = pc.Answer(fits=fits, peak_bytes=None, peak_key="peak_bytes", tokens_per_s=modeled, step_time_s=1.0,
                           micro_batch=1, seconds=0.1, route="cli")
        return pc.RunResult(case="c", use="held_out", label=label, strategy=label, gpus=1, micro_batch=1,
                            outcome=outcome, measured_throughput=measured, modeled_throughput=modeled,
                            measured_tokens_per_gpu=None, measured_memory=None, memory_basis=None, answer=answer)

    rows = [result("ddp", 2.0, 1.0, "ok", True), result("zero2", 1.0, 2.0, "ok", True),
            result("zero3", None, 1.5, "oom", True)]
    s = pc.summarize(rows, [{"id": "c", "use": "held_out"}])
    assert s["top1"] == {"right": 0, "of": 1}
    assert s["pairwise"] == {"right": 0, "of": 1}
    assert s["speed_ratio_factor"]["worst"] == pytest.approx(4.0)
    assert s["oom"] == {"went_oom": 1, "predicted_to_fit": 1, "ran": 2, "ran_but_predicted_not_to_fit": 0}


# ------------------------------------------------------------------------------- asking, with a made-up command
def test_internal_dims_of_gated_and_plain_mlps() -> None:
    llama = pc.internal_dims({"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                              "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
                              "hidden_act": "silu", "tie_word_embeddings": False}, 8192)
    assert llama == {"n_layers": 32, "d_model": 4096, "n_heads": 32, "n_kv_heads": 8, "d_ff": 14336,
                     "vocab_size": 128256, "max_seq_len": 8192, "tie_embeddings": False}
    gpt2 = pc.internal_dims({"n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257, "n_positions": 1024,
                             "activation_function": "gelu_new", "tie_word_embeddings": True}, 128)
    assert (gpt2["d_ff"], gpt2["max_seq_len"], gpt2["n_kv_heads"]) == (2048, 1024, 12)
    t5 = pc.internal_dims({"d_model": 1024, "num_layers": 24, "num_decoder_layers": 24, "num_heads": 16,
                           "d_ff": 4096, "vocab_size": 32128, "feed_forward_proj": "relu"}, 128)
    assert (t5["n_layers"], t5["d_ff"]) == (48, 2731)


def test_unknown_flags_are_dropped_and_recorded_float16_falls_back_and_a_refused_model_gets_own_fields() -> None:
    calls: list[list[str]] = []

    def fake(argv: list[str]) -> tuple[int, str, str]:
        calls.append(list(argv))
        if "--trainable-fraction" in argv:
            return 2, "", "shardscope: error: advise: unrecognized arguments: --trainable-fraction 0.5 (see help)"
        if "float16" in argv:
            return 2, "", "argument --dtype: invalid choice: 'float16' (choose from 'bfloat16', 'float32')"
        if argv[argv.index("--model") + 1].startswith('{"hidden_size"'):
            return 2, "", "shardscope: error: unknown model field(s) hidden_size"
        return 0, "[]", ""

    argv = ["memory", "--model", '{"hidden_size":8}', "--dtype", "float16", "--trainable-fraction", "0.5", "--json"]
    others = [("cli (config.json)", '{"hidden_size":8,"path":1}'), ("cli (own fields)", '{"d_model":8}')]
    code, _, _, lost, route, _ = pc.call_with_fallbacks(argv, fake, others)
    assert code == 0 and route == "cli (own fields)"
    assert lost == ["--trainable-fraction 0.5", "--dtype float16 (given as bfloat16)"]
    assert calls[-1] == ["memory", "--model", '{"d_model":8}', "--dtype", "bfloat16", "--json"]


def test_the_question_carries_the_case_machine_and_the_run_flags(tmp_path: Path) -> None:
    case = next(c for c in CASES if c["id"] == "torchtitan-llama31-8b-h100-8-vs-128")
    argv = pc.advise_argv(case, case["runs"][0], tmp_path)
    pairs = {flag: argv[i + 1] for i, flag in enumerate(argv[:-1]) if flag.startswith("--")}
    assert pairs["--topology"] == "preset:hgx-h100" and pairs["--gpus"] == "8" and pairs["--strategies"] == "fsdp"
    assert pairs["--activation-checkpointing"] == "selective_op"  # torchtitan's op policy, as its config names it
    bare = dict(case["runs"][0], activation_checkpointing="selective")  # a source that does not say which
    assert dict(pc._flag_pairs(bare))["--activation-checkpointing"] == "full"
    assert json.loads(pairs["--model"])["num_key_value_heads"] == 8
    titan = next(c for c in CASES if c["id"] == "hf-ds-blog-deberta-xl-2x-titanrtx")
    argv = pc.advise_argv(titan, titan["runs"][1], tmp_path)
    assert "--gpu" not in argv and "--peak-tflops" in argv  # a GPU the table lacks: named by the topology only
    assert json.loads(Path(argv[argv.index("--topology") + 1]).read_text())["fabric"] == "pcie"
    path = Path(pc._model_arg(titan["model"], tmp_path, "path"))
    assert path.name == "config.json" and json.loads(path.read_text())["hidden_size"] == 1536


def test_plain_asks_with_issue_31s_flags_alone(tmp_path: Path) -> None:
    """``--plain`` drops what a case says about how its software ran (the DeepSpeed release, the AdamW loop, the
    attention a run chose, the parameter-tensor count) and keeps the run's shape and machine."""
    case = next(c for c in CASES if c["id"] == "opentau-pi05-zero2-vs-zero3-8x-a100")
    argv = pc.advise_argv(case, case["runs"][0], tmp_path)
    plain = pc.plain_argv(argv + ["--adamw", "for-loop", "--ddp-bucket-view", "--attention", "eager"])
    assert "--deepspeed-version" in argv and json.loads(argv[argv.index("--model") + 1])["parameter_tensors"] == 814
    assert not {"--deepspeed-version", "--adamw", "--ddp-bucket-view", "--attention"} & set(plain)
    model = json.loads(plain[plain.index("--model") + 1])
    assert "parameter_tensors" not in model and model["hidden_size"] == 2048
    kept = [t for t in argv if t not in ("--deepspeed-version", case["deepspeed_version"]) and not t.startswith("{")]
    assert [t for t in plain if not t.startswith("{")] == kept


def test_an_error_that_is_not_about_a_flag_or_the_model_is_returned_as_is() -> None:
    def fake(argv: list[str]) -> tuple[int, str, str]:
        return 2, "", "shardscope: error: --gpus 3 is more than the 2 GPUs of the topology"

    code, _, err, lost, route, _ = pc.call_with_fallbacks(["advise", "--model", "x"], fake, [("own", '{"d_model":8}')])
    assert (code, lost, route) == (2, [], "cli") and "more than" in err


# --------------------------------------------------------------------------------------- the published set
CASES = pc.load_cases()


def test_the_set_has_at_least_thirty_measurements_each_with_its_quote_and_source() -> None:
    runs = [run for case in CASES for run in case["runs"]]
    assert len(runs) >= 30
    for case in CASES:
        assert case["source"]["url"].startswith("https://") and case["use"] in pc.SPLITS, case["id"]
        assert case["seq_len"] and case["seq_len_basis"] and case["hardware"]["topology"], case["id"]
        assert case["model"].get("hf") or case["model"].get("preset"), case["id"]
        for run in case["runs"]:
            m = run["measured"]
            assert run["quote"] and m["outcome"] in ("ok", "oom"), (case["id"], run["label"])
            if m["outcome"] == "ok":
                assert pc.measured_throughput(case, run) or m.get("memory") or m == {"outcome": "ok"}, run["label"]
            if m.get("memory"):
                assert m["memory"]["unit"] in ("GiB", "GB", "MiB", "MB") and m["memory"]["basis"], run["label"]


def test_one_case_measures_throughput_one_way() -> None:
    kinds = ("work_time_s", "samples_per_s", "tokens_per_s_per_gpu")
    for case in CASES:
        used = {k for run in case["runs"] for k in kinds if run["measured"].get(k) is not None}
        assert len(used) <= 1, (case["id"], used)


def test_the_split_follows_its_stated_rule_by_source_and_is_about_one_third_defaults() -> None:
    order_of_url: dict[str, int] = {}
    for case in CASES:
        order = case["source"]["order"]
        assert order_of_url.setdefault(case["source"]["url"], order) == order, case["id"]
        assert case["use"] == ("defaults" if order % 3 == 2 else "held_out"), case["id"]
    share = sum(case["use"] == "defaults" for case in CASES) / len(CASES)
    assert 0.25 <= share <= 0.45


# ------------------------------------------------------------------------------- today's figures, pinned
#: Today's figures on the published set (issue 31's join of the data, model and physics branches), rounded to the
#: safe side: a ceiling for an error, a floor for an agreement. Tighten them when the model gets better; never loosen
#: them to let a change in. One was loosened, said here: the optimizer's update (costmodel/optimizer_step.py) took the
#: defaults' worst speed ratio from x1.10 to x1.15 (the TITAN RTX NVLink-vs-P2P-off pair, whose fabric effect the
#: model already draws too small, diluted by the fp32 update both runs pay) while held-out pairwise order went from
#: 56% to 80% and its worst ratio from x21.7 to x2.95. Two more, by a physical fix: a float32 step is priced at the
#: GPU's fp32 CUDA-core peak, not its 16-bit tensor one (a TITAN RTX has 16.3 TFLOP/s of fp32 beside 130.5 of fp16
#: tensor math; costmodel/step.py dtype_peak_flops). Held-out top-1 went from 4/8 to 5/8 and pairwise from 43 to 44 of
#: 54; the defaults' worst ratio from x1.14 to x1.24 (the same NVLink-vs-P2P-off pair: with fp32 compute 8x longer
#: the all-reduce hides behind it, where the run shows it exposed) and held-out median from x1.73 to x1.85 (the T5
#: case, whose assumed 128-token sequences would need 18.4 fp32 TFLOP/s, above the card's peak: its real, padded-to-
#: the-batch sequences are shorter, so its fp16 speed-up is overhead-bound, which the model does not see).
#: Two more moved by the non-matmul traffic (costmodel/elementwise.py: an eager step's norms, activations, casts and
#: loss stream their tensors at the memory's bandwidth, traced op by op; DDP's autocast streams more than a bf16
#: module and reduces its fp32 gradients): held-out top-1 5/8 -> 6/8, pairwise 44 -> 45 of 54, median ratio x1.85 ->
#: x1.52, worst absolute throughput x4.2 -> x2.5; the defaults' absolute median x1.05 -> x1.07 and worst x1.07 ->
#: x1.12 (torchtitan's Llama 3.1 8B on H100, asked with full checkpointing for its selective one: the matmul ceiling
#: the published MPT-7B run now implies once its own traffic is taken out is higher, 5940 -> 6241 tokens/s against
#: 5762 measured). Then the HF keys read as given (encoder-decoders' layers together, T5's and BlenderBot's
#: ungated MLPs, T5-3B's and Qwen3-32B's heads wider than the width over their count, where before the SwiGLU of the
#: same weights stood in): runs that ran but were predicted not to fit 8 -> 6 of 40 held-out, the all-split median
#: ratio x1.47 -> x1.48 (T5-large's runs, now priced with a GELU MLP's traffic). Then a new held-out source, BELLE's
#: issue #402 (BLOOM-560M/1B1, ZeRO-1/2/3 on 2x TITAN RTX, asked with the run's --grad-accum 4): its 9 runs' order is
#: all right (held-out top-1 6/8 -> 9/11, pairwise 45/54 -> 54/63), but its nvidia-smi memory is 17-30% above the
#: modeled device bytes, so the held-out memory median is pinned 0.22 -> 0.24 and the absolute median x1.11 -> x1.16:
#: new measurements, not a change of the model. Then the norm (torch's fused LayerNorm for the GPT-2, GPT-NeoX, BLOOM,
#: BERT and BART families and llm-foundry's MPT-7B, whose blocks stream 35-55% fewer bytes than the eager RMSNorm;
#: its saved activations traced too): held-out median ratio x1.42 -> x1.37, runs that ran but were predicted not to
#: fit 6 -> 4, the defaults' absolute throughput median x1.07 -> x1.05 and worst x1.12 -> x1.06; the held-out absolute
#: median x1.16 -> x1.21 and worst x2.47 -> x2.69 (pythia-70m on A40, a LayerNorm model 2x slower than every term
#: here, now modeled faster still). Then torchtitan's Llama 2 13B described with the fused RMSNorm kernel its config
#: named (norm_type = "fused_rmsnorm"): 74.7 GiB where the eager norm's copies made 101 GiB, so it fits as it ran
#: (held-out runs that ran but were predicted not to fit 4 -> 3). Then torchtitan's selective checkpointing modeled as
#: it runs (selective_op, selective_layer: traced, and asked so where the runs had been asked as full, their memory
#: not compared) and what any checkpoint computes again counted op by op (torch's non-reentrant checkpoint stops before
#: a block's last matmul; the head is never recomputed), with the torchtitan table's four rows that had been left out
#: for want of the modes. The 70B selective-op OOM, compared at last, is predicted not to fit (held-out OOMs: 2 of 10
#: predicted to fit, the same two), held-out absolute median x1.21 -> x1.11. Loosened, each named: the defaults' memory
#: median 0.13 -> 0.16 (the two H100 runs' reserved memory compared at last, 15-17% above the model); their absolute
#: median and worst x1.05/x1.06 -> x1.07/x1.17 (the same runs asked with their op policy, modeled 13-16% fast where
#: full had made them 5% slow); the held-out median ratio x1.37 -> x1.39 and the all-split x1.34 -> x1.35 (BELLE's
#: ZeRO ratios, and pythia-70m's FSDP run with checkpointing against its DDP runs); and the absolute worst x2.69 ->
#: x2.92 (that pythia run, recomputing less). Lightning's checkpoint is non-reentrant, as modeled; Hugging Face's,
#: which BELLE's DeepSpeed-Chat ran, is reentrant and recomputes the whole block, a difference the model does not draw.
#: The largest micro-batch (runs a source calls the largest that ran), first pinned here: the model's was 2.1x theirs
#: in the median, above in 20 of 21 held-out runs. Then torch DDP's default buckets (gradient_as_bucket_view off: a
#: second copy of the gradients, what Hugging Face's Trainer, Accelerate and Lightning build; pytorch/pytorch#41954):
#: held-out largest micro-batch median x2.14 -> x2.07 and worst x4.0 -> x3.0 (DeBERTa-XL's DDP 19 -> 9 against 8
#: that ran), all-split median x2.10 -> x1.80; the held-out memory median 0.240 -> 0.245, loosened to 0.25 (OpenTau's
#: DDP runs, a stand-in without its vision tower, already above their unstated-basis measurement, now further).
#: Then eager attention (Hugging Face's code, traced: a float32 softmax, its cast and dropout kept for every score, and
#: their traffic), which the 2021-23 Hugging Face runs used, their transformers having no other for these families, with
#: each config's attention dropout: T5-large's DDP and DeBERTa-XL's DDP now get exactly the largest micro-batch that
#: ran (16 and 8), held-out largest median x2.07 -> x1.86 and worst x3.0 -> x2.6, all-split x1.80 -> x1.69, held-out
#: absolute median x1.10 -> x1.08. Loosened: held-out runs that ran but were predicted not to fit 3 -> 8 (five of those
#: largest runs, now modeled 1-2% over their GPU: T5's ZeRO-2 at 40 and 50 against 39 and 49, DeBERTa's ZeRO-2 at 40
#: against 39, Blenderbot's ZeRO-2, T5-3B's offload at 20; a largest run sits at the edge, where a model right on
#: average puts about half above), the held-out median ratio x1.39 -> x1.44 and the all-split x1.35 -> x1.37 (BELLE's
#: ZeRO-3 ratios: the eager attention's compute dilutes the communication that makes ZeRO-3 slow there).
#: Then the backward re-traced with the tracker that sees an operator's outputs beside the inputs it releases: the
#: log-softmax's backward holds three T·V fp32 tensors at once (the loss's gradient, the log-softmax output, the
#: logits' gradient), SwiGLU's product backward three T·f gradients, and FSDP2 keeps the last block's gather through the
#: head's backward (benchmarks/memory_model_check.py: 57 of 60 real 2-rank runs within 0.15% of the tracked peak).
#: Defaults memory median 0.158 -> 0.103 (torchtitan's reserved 8B peaks -15/-17% -> -10/-11%), largest micro-batch
#: x1.52 -> x1.33; held-out worst 0.442 -> 0.404, largest median x1.86 -> x1.79. Loosened: the held-out memory median
#: 0.245 -> 0.254, to 0.26: 13 of its 17 memory runs moved toward their measurement, but the median row is now one of
#: OpenTau's DDP runs (a stand-in without its vision tower, already above its unstated-basis measurement: +23% -> +28%).
#: Then a classifier head read from a config's architectures: DeBERTa-XL-MNLI (DebertaV2ForSequenceClassification),
#: described before as a tied language model, loses the vocabulary logits it never had (128,100 x 128 tokens x 40);
#: its ZeRO-2 run at 40 now fits (held-out runs that ran but were predicted not to fit 8 -> 7) and its ratio over DDP
#: is x3.69 against x3.57 measured (was x3.10). Loosened: the largest micro-batch medians, held-out x1.79 -> x1.82 and
#: all x1.57 -> x1.80: DeBERTa's ZeRO-2 largest is now modeled x1.8 over the 40 that ran and its DDP above the 8; the
#: phantom logits had stood in for what DeBERTa's disentangled attention (its relative-position terms, not modeled)
#: holds, and the published 40 may be a floor.
#: Then the host calls counted under each checkpointing mode (a real run's count, not the plain one): BELLE's ZeRO-3
#: runs (full checkpointing, host-bound on TITAN RTX) over ZeRO-1 at 0.31, 0.59 and 0.49 against 0.31, 0.65 and 0.40
#: measured (were 0.46, 0.81 and 0.51): held-out ratio median x1.43 -> x1.39, all x1.37 -> x1.34.
#: Then torch's offloaded CPU AdamW per rank, not per host (torchrun's one thread per rank: a host's ranks update side by
#: side; DeepSpeed's CPU-Adam still shares the host's cores): the FSDP blog's 2-GPU offload runs over their FSDP runs
#: at 0.41, 0.44 and 0.45 against 0.65, 0.62 and 0.52 measured (were 0.27, 0.29 and 0.28): held-out ratio median
#: x1.39 -> x1.25, all x1.34 -> x1.23.
#: Then Hugging Face's gelu_new (GPT-2's activation_function) as the Python tensor ops transformers runs, which keep
#: three more T·f tensors than a fused GELU (traced; 20 real 2-rank runs within 0.1%): the GPT-2 runs' largest
#: micro-batches, all modeled above the largest that ran, move toward it (FSDP blog GPT-2 large x1.9-2.2 ->
#: x1.14-1.45, GPT-2 XL ZeRO-3 offload x2.25 -> x1.56): held-out largest median x1.82 -> x1.27 and worst x2.6 -> x2.0,
#: all x1.80 -> x1.27.
#: Then a new held-out source (16, held out by the split rule): transformers' single-GPU page, bert-large on one V100
#: with accumulation, checkpointing and fp16, its memory on nvidia-smi's basis. Its memory is within 4-17% (held-out
#: median 0.254 -> 0.183, all 0.194 -> 0.161); its fp16 speed-ups are modeled x3.29 and x2.20 against x2.10 and x1.14
#: measured (fp32 absolute within 2%, fp16 1.59x too fast: AMP on Volta as the 2022 Trainer ran it is slower than the
#: model's fp16), so the ratio and absolute medians are loosened: held-out x1.25 -> x1.27 and x1.08 -> x1.11, all
#: x1.23 -> x1.25 and x1.08 -> x1.11.
#: Then DeepSpeed 0.18.5's recount of the backward's parameters in every gradient hook (deepspeedai/DeepSpeed#7886),
#: asked for OpenTau's runs, whose uv.lock pins 0.18.5: the pi05 stand-in has 146 of pi05's several hundred parameter
#: tensors, so its ZeRO steps grow 0.075 s where the thread measured about 2.8 s; held-out worst ratio x2.93 -> x2.74,
#: pairwise 64/73 -> 65/73.
#: Then pi05's own count of trainable parameter tensors, 814 (``parameter_tensors``, counted from OpenTau's model code:
#: the vision tower, the action expert's AdaRMS norms), in place of the stand-in's 146: the recount is 2.33 s per
#: ZeRO backward where #177 measured 3442 - ~760 ms. DDP over ZeRO-2 is modeled x3.40 against x2.64 measured (was
#: x0.99), so the case's top-1 is right: held-out top-1 10/12 -> 11/12, pairwise 65/73 -> 67/73, worst ratio
#: x2.74 -> x2.09, ratio median x1.27 -> x1.25.
#: Then DeepSpeed ZeRO-1/2's own optimizer step on a GPU (stage_1_and_2.py read at v0.18.5): the gradient norm casts each
#: chunk to float64 (8 B per element of the largest: BLOOM's 257M-element embedding, 2.1 GB on the rank that holds
#: it), and the partition's 16-bit gradients are flattened and cast to fp32 beside them (6 B per local parameter,
#: where 4 were modeled): BELLE's ZeRO-1/2 runs move toward their nvidia-smi peaks, held-out memory median
#: 0.183 -> 0.167.
#: Then an encoder-decoder's cross-attentions counted in its weights and FLOPs (``cross_attention_layers``), so T5-large
#: is 737.67 M (was 636.98 M), T5-3B 2.852 B (was 2.449 B) and BlenderBot-400M 364.2 M (was 285.6 M), each now
#: within 0.3% of its published count: T5-large's DDP runs at micro-batch 16 (fp32) and 20 (fp16) are modeled at
#: 23.8 and 24.0 GiB on a 23.65 GiB card, so two runs that ran are called out of memory (held-out false OOM 7 -> 9),
#: and T5-large's ratios and largest micro-batches move (held-out ratio median x1.252 -> x1.262; all: largest
#: micro-batch median x1.27 -> x1.28, T5 now modeled below where it was above). Those runs' 128 tokens are an upper
#: bound: the post's script pads each batch to its longest sample, which the case cannot state (its
#: ``seq_len_basis``).
#: Then the fused attention kernel at its own share of the matmuls' rate (``FUSED_ATTENTION_SHARE``: 0.85 on the Ampere
#: class, 0.6 on the Hopper class, fitted on llm-foundry's MPT 7B-70B rows and checked on its 760M-3B rows,
#: ``benchmarks/compute_curve_check.py``): the defaults' absolute median and worst x1.07/x1.16 -> x1.04/x1.09 (the H100
#: torchtitan runs at 8,192 tokens), the held-out ratio median x1.262 -> x1.256 and absolute worst x2.91 -> x2.87, all
#: absolute median x1.11 -> x1.08. The held-out absolute median moves x1.107 -> x1.112: the eager-attention runs
#: (BERT on V100, BLOOM on TITAN RTX), whose score matmuls are plain matmuls, run 0.5-1% faster on the re-solved
#: matmul ceiling, and the median run is one of them.
#: Then the optimizer's update at its implementation's traced bytes: torch's default multi-tensor AdamW (DDP, FSDP)
#: streams 84 B per parameter where DeepSpeed's fused kernel streams 28, and clipping scales the gradient in place
#: (12 B, was 4). Absolute tokens/s improve (held-out median x1.112 -> x1.075, worst x2.87 -> x2.82) and so does the
#: worst speed ratio (x2.09 -> x1.91: fp16 over fp32 on one GPU, where the fp32 update is paid alike), while the
#: held-out ratio median moves x1.262 -> x1.268 and one pair more is misordered (GPT-2 large's FSDP SHARD_GRAD_OP at
#: micro-batch 11 against FULL_SHARD at 15, measured 1.36 and 1.25: FULL_SHARD's update is now the smaller; 67 -> 66 of
#: 73). The 2021-22 Hugging Face runs used transformers' per-tensor AdamW, which streams the same 84 B.
#: Then DeepSpeed 0.18.5's gradient-hook recount taken as host work beside the frameworks' other host work, the step
#: the longer of the GPU's work and the host's (it was added to the step whatever the GPU did): OpenTau's pi05 ZeRO-2
#: at micro-batch 8 and 16 is host-bound on the recount, ZeRO-3's per-submodule hooks add to it, so ZeRO-2 at 16 is now
#: the clear winner it measured (held-out top-1 11/12 -> 12/12, pairs 66 -> 68 of 73).
#: Then the caching allocator's cache where the GPU has room (``ALLOCATOR_CACHE_FRACTION``, then the median of eight
#: published traces: reserved 1.13x allocated, within what the GPU leaves; "fits" unchanged), and an
#: allocated measurement compared with the model's allocated peak (``allocated_peak_bytes``, new in advise's and
#: memory's JSON) instead of its reserved one: whole-peak memory median defaults 10.3% -> 2.9%, held-out 17.8% ->
#: 13.1% (worst 40.4% -> 35.0%), all 16.1% -> 11.2%. The defaults' worst moves 69.7% -> 70.8%: litgpt's 13B LoRA
#: under FSDP, whose allocated peak the model puts at a third (the load-time peak noted in the case), now compared
#: on its own basis.
#: Then the AdamW a run's software stepped with, where that was the per-tensor loop (``adamw: for-loop``: PyTorch
#: before 2.0, the Trainer's ``adamw_hf``; 9 cases of 2021-22 say why in ``adamw_basis``): its step keeps temporaries
#: of its largest tensors, not one per parameter, so BERT-large's two checkpointed runs at micro-batch 1 on a V100,
#: whose peak is the step, go from +20.5% and +12.2% to +3.3% and +2.2% (held-out memory median 13.1% -> 11.3%, all
#: 11.2% -> 9.8%). Speeds are unchanged: the loop streams foreach's 84 B per parameter.
#: Then ``ALLOCATOR_CACHE_FRACTION`` from the six published traces that are training steps, what the model describes,
#: leaving out two whose workloads are not stated (reserved 1.18x allocated where it was 1.13x; "fits" unchanged):
#: held-out memory median 11.3% -> 8.3%, worst 35.0% -> 32.4% (OpenTau's pi05 ZeRO-3 at micro-batch 8, whose vision
#: tower and action expert the stand-in leaves out), all 9.8% -> 7.0%.
#: Then the A100 40GB at its own bandwidth and Ampere's attention share refitted to 0.875 (``compute_curve_check.py``):
#: the held-out absolute worst x2.822 -> x2.830 (litgpt's pythia-70m under FSDP on A40s, whose fused attention now
#: runs a little faster).
#: Then a GPU from the table at what CUDA gives a process (``DRIVER_RESERVED_FRACTION``, 1.25% less than the datasheet's
#: binary gigabytes, the median of six published totals): on an 80 GB A100, 79.0 GiB where it was 80. OpenTau's pi05
#: ZeRO-2 at micro-batch 18, which went out of memory, is no longer predicted to fit (held-out 2 -> 1 of 10); fms-fsdp's
#: Llama 2 7B HSDP at micro-batch 2, modeled at 79.24 GiB, which ran, now is (held-out false OOM 9 -> 10); the defaults'
#: largest micro-batch x1.33 -> x1.26 (cosmos3's ZeRO-2, modeled 34 where 27 was the largest that ran).
#: Then the matmuls on the classic roofline, min(1, I / R), where they had compute plus memory time (llm-foundry's
#: held-out 125M-3B rows, ``compute_curve_check.py``: median x1.098 -> x1.031 on A100s, x1.074 -> x1.044 on H100s):
#: narrow models and 16-bit steps run faster. Worse here: litgpt's pythia-70m on A40s, already modeled 2-3x faster than
#: it ran, now has FSDP with checkpointing at 4 GPUs 1.03x the lone GPU per GPU where it measured 0.68x (held-out top-1
#: 12/12 -> 11/12, pairs 68 -> 67 of 73, absolute worst x2.83 -> x3.60); the fp16 runs on Volta and Turing, already
#: modeled too fast against fp32, a little more so (absolute median x1.08 -> x1.11, held-out speed-ratio median x1.27
#: unchanged); OpenTau's pi05 DeepSpeed-against-DDP ratios improve (x1.19 -> x1.14).
PINNED: dict[str, dict[str, float]] = {
    "defaults": {"top1": 1.0, "pairwise": 1.0, "ratio_median": 1.041, "ratio_worst": 1.25, "memory_median": 0.03,
                 "memory_worst": 0.71, "oom_fit": 3, "false_oom": 0, "absolute_median": 1.05, "absolute_worst": 1.1,
                 "largest_median": 1.26, "largest_worst": 1.26},
    "held_out": {"top1": 0.91, "pairwise": 0.91, "ratio_median": 1.27, "ratio_worst": 1.91, "memory_median": 0.09,
                 "memory_worst": 0.33, "oom_fit": 1, "false_oom": 10, "absolute_median": 1.12, "absolute_worst": 3.61,
                 "largest_median": 1.27, "largest_worst": 2.01},
    "all": {"top1": 0.92, "pairwise": 0.91, "ratio_median": 1.26, "ratio_worst": 1.91, "memory_median": 0.07,
            "memory_worst": 0.71, "oom_fit": 4, "false_oom": 10, "absolute_median": 1.10, "absolute_worst": 3.61,
            "largest_median": 1.27, "largest_worst": 2.01},
}


@pytest.fixture(scope="module")
def checked() -> tuple[list[Any], dict[str, Any]]:
    return pc.check(CASES, pc.call_inprocess, with_collectives=False)


def _figures(s: dict[str, Any]) -> dict[str, float]:
    def frac(d: dict[str, int]) -> float:
        return d["right"] / d["of"] if d["of"] else 1.0

    return {"top1": frac(s["top1"]), "pairwise": frac(s["pairwise"]),
            "ratio_median": s["speed_ratio_factor"]["median"], "ratio_worst": s["speed_ratio_factor"]["worst"],
            "memory_median": s["whole_peak_abs_error"]["median"], "memory_worst": s["whole_peak_abs_error"]["worst"],
            "oom_fit": s["oom"]["predicted_to_fit"], "false_oom": s["oom"]["ran_but_predicted_not_to_fit"],
            "absolute_median": s["absolute_throughput_factor"]["median"],
            "absolute_worst": s["absolute_throughput_factor"]["worst"],
            "largest_median": s["largest_micro_batch_factor"]["median"],
            "largest_worst": s["largest_micro_batch_factor"]["worst"]}


#: The held-out figures of ``published_check.py --plain``: asked with issue 31's flags alone, without what a case says
#: about how its software ran. Far below the full question's: OpenTau's pi05 runs lose DeepSpeed 0.18.5's per-hook
#: recount (the release installed here, 0.19, has none) and their top-1s; the 2021-22 runs lose the per-tensor AdamW
#: loop and eager attention (memory median 8.3% -> 14.9%).
PINNED_PLAIN = {"top1": 0.66, "pairwise": 0.82, "ratio_median": 1.45, "ratio_worst": 3.31, "memory_median": 0.15,
                "memory_worst": 0.33, "oom_fit": 1, "false_oom": 10}


def test_the_plain_answer_agrees_no_worse_than_today() -> None:
    _, summary = pc.check(CASES, lambda argv: pc.call_inprocess(pc.plain_argv(argv)), with_collectives=False)
    now = _figures(summary["held_out"])
    worse = {k: (now[k], v) for k, v in PINNED_PLAIN.items()
             if (now[k] < v if k in ("top1", "pairwise") else now[k] > v)}
    assert not worse, f"plain held-out: worse than pinned (now, pinned): {json.dumps(worse)}"


@pytest.mark.parametrize("split", sorted(PINNED))
def test_the_modeled_answer_agrees_no_worse_than_today(checked: tuple[list[Any], dict[str, Any]], split: str) -> None:
    results, summary = checked
    assert not [r.error for r in results if r.error]
    now, pinned = _figures(summary[split]), PINNED[split]
    floors = ("top1", "pairwise")
    worse = {k: (now[k], pinned[k]) for k in pinned
             if (now[k] < pinned[k] if k in floors else now[k] > pinned[k])}
    assert not worse, f"{split}: worse than pinned (now, pinned): {json.dumps(worse)}"


def test_advise_answers_in_under_a_second(checked: tuple[list[Any], dict[str, Any]]) -> None:
    probe = pc.probe_seconds(pc.call_inprocess, repeats=3)
    assert probe["median"] < 1.0


def test_the_ratio_listing_puts_each_ranked_case_measured_beside_modeled(checked, capsys) -> None:
    results, _ = checked
    pc.print_ratios(results, CASES)
    out = capsys.readouterr().out
    ranked = [c for c in CASES if not c.get("absolute_only") and not c.get("memory_only")]
    assert out.count("clear winner measured") == sum(
        len([r for r in results if r.case == c["id"] and r.measured_throughput and r.modeled_throughput]) >= 2
        for c in ranked)
    assert "measured   1.00  modeled   1.00" in out  # each case's first run is its unit


def test_every_run_published_as_the_largest_gets_the_models_largest(checked: tuple[list[Any], dict[str, Any]]) -> None:
    results, summary = checked
    published = [r for r in results if r.measured_largest and r.outcome == "ok"]
    assert published and all(r.modeled_largest for r in published)
    assert summary["all"]["largest_micro_batch_factor"]["n"] == len(published)
    big = summary["all"]["largest_micro_batch_factor"]
    assert big["modeled_below"] + big["modeled_above"] <= big["n"]
