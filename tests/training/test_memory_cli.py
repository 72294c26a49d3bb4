"""`shardscope memory` as a user runs it: the seed article's figures, explicit assumptions, DeepSpeed's estimator."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from shardscope.cli import main
from shardscope.costmodel.deepspeed_estimate import largest_layer_params
from shardscope.training.model import GPT, PRESETS, ModelConfig

PSI = PRESETS["mistral-7b"].param_count()  # 7_241_732_096


@pytest.fixture
def memory(capsys: pytest.CaptureFixture[str]) -> Any:
    """``shardscope memory ARGS`` in this process (the CLI's own entry point): (exit status, stdout, stderr)."""
    def run(*args: str) -> tuple[int, str, str]:
        status = main(["memory", *args])
        out, err = capsys.readouterr()
        return status, out, err
    return run


@pytest.fixture
def memory_json(memory: Any) -> Any:
    def run(*args: str) -> list[dict[str, Any]]:
        status, out, err = memory(*args, "--json")
        assert status == 0, err
        return json.loads(out)
    return run


def test_mistral_7b_ddp_is_the_articles_87_gb_and_does_not_fit_80_gb(memory_json: Any) -> None:
    (row,) = memory_json("--model", "mistral-7b", "--strategy", "ddp", "--gpus", "1", "--no-master-weights")
    assert row["bytes_per_param"]["param_bytes"] == 2 and row["bytes_per_param"]["grad_bytes"] == 2
    assert row["bytes_per_param"]["optim_bytes"] == 8
    assert "no master copy" in row["bytes_per_param"]["description"]
    # ~14 GB parameters + ~14 GB gradients + ~58 GB Adam states = ~87 GB
    assert round(row["param_bytes"] / 1e9) == 14 and round(row["grad_bytes"] / 1e9) == 14
    assert round(row["optim_bytes"] / 1e9) == 58 and round(row["total_bytes"] / 1e9) == 87
    assert row["total_bytes"] == 12 * PSI
    assert row["gpu_memory_bytes"] == 80 * 10**9 and row["fits"] is False
    assert row["method"] == "modeled" and row["deepspeed_estimate"] is None  # DeepSpeed has none for DDP


def test_human_output_is_in_gb_and_states_its_assumptions() -> None:
    """As a user runs it: the console script's module in a fresh process."""
    proc = subprocess.run([sys.executable, "-m", "shardscope", "memory", "--model", "mistral-7b", "--strategy", "ddp",
                           "--gpus", "1", "--no-master-weights"], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "params 2 + grads 2 + optimizer 8" in out and "no master copy" in out
    assert "1 GB = 1e9 bytes" in out and "GiB" not in out and "modeled" in out
    (line,) = [x for x in out.splitlines() if x.strip().startswith("ddp")]
    assert line.split() == ["ddp", "14.48", "GB", "14.48", "GB", "57.93", "GB", "86.90", "GB", "no", "-"]


def test_one_strategy_as_text_is_one_row_under_a_header(memory: Any) -> None:
    status, out, err = memory("--model", "tiny", "--strategy", "zero2", "--gpus", "2", "--no-deepspeed-estimate")
    assert status == 0, err
    rows = [x for x in out.splitlines() if x.strip().startswith(("ddp", "fsdp", "zero"))]
    assert len(rows) == 1 and rows[0].split()[0] == "zero2" and "MB" in rows[0]  # too small for GB
    assert "0.79 M parameters" in out and "1 MB = 1e6 bytes" in out


def test_bytes_per_parameter_flags_and_gpu_size_switch_the_answer(memory_json: Any) -> None:
    (default,) = memory_json("--model", "mistral-7b", "--strategy", "ddp", "--gpus", "1")
    assert default["total_bytes"] == 16 * PSI and default["fits"] is False  # with a fp32 master copy: 116 GB
    (custom,) = memory_json("--model", "mistral-7b", "--strategy", "ddp", "--gpus", "1", "--param-bytes", "2",
                            "--grad-bytes", "2", "--optimizer-bytes", "12", "--gpu-memory-gb", "141")
    assert custom["total_bytes"] == 16 * PSI and custom["fits"] is True  # an H200's 141 GB holds it
    assert "overridden" in custom["bytes_per_param"]["description"]
    (eight_bit,) = memory_json("--model", "mistral-7b", "--strategy", "zero1", "--gpus", "8", "--optimizer-bytes", "2",
                               "--no-deepspeed-estimate")
    assert eight_bit["optim_bytes"] == 2 * PSI // 8  # sharded as ZeRO-1 shards the optimizer


def test_deepspeed_estimator_beside_ours_for_zero2_and_zero3(memory_json: Any) -> None:
    rows = {r["strategy"]: r for r in memory_json("--model", "mistral-7b", "--gpus", "8")}
    assert {s for s, r in rows.items() if r["deepspeed_estimate"]} == {"zero2", "zero3"}
    z2, z3 = rows["zero2"]["deepspeed_estimate"], rows["zero3"]["deepspeed_estimate"]
    # DeepSpeed's documented formulas, no offload: 2Ψ + 18Ψ/N and 4·largest_layer + 18Ψ/N
    assert z2["gpu_bytes"] == 2 * PSI + int(18 * PSI / 8)
    largest = 32000 * 4096  # the embedding (= the untied head) is Mistral's largest layer
    assert z3["gpu_bytes"] == 4 * largest + int(18 * PSI / 8)
    assert z2["method"] == z3["method"] == "deepspeed_estimator"
    assert "estimate_zero2" in z2["function"] and "offload_optimizer=none" in z2["options"]
    assert rows["zero2"]["total_bytes"] == 2 * PSI + 14 * PSI // 8  # ours (ZeRO paper) beside it


@pytest.mark.parametrize(
    "cfg",
    [PRESETS["tiny"], ModelConfig(n_layers=1, d_model=64, n_heads=4, n_kv_heads=2, d_ff=512, vocab_size=32),
     ModelConfig(n_layers=1, d_model=32, n_heads=4, n_kv_heads=4, d_ff=48, vocab_size=80, tie_embeddings=True)],
    ids=["tiny", "mlp-largest", "tied"],
)
def test_largest_layer_matches_deepspeeds_count_on_the_built_model(cfg: ModelConfig) -> None:
    stage3 = pytest.importorskip("deepspeed.runtime.zero.stage3")
    total, largest = stage3.model_to_params(GPT(cfg))
    assert total == cfg.param_count()
    assert largest_layer_params(cfg) == largest


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--model", "gpt3", "--gpus", "8"], "gpt3"),
        (["--model", "tiny", "--strategy", "zero4", "--gpus", "8"], "zero4"),
        (["--model", "tiny", "--gpus", "0"], "GPUs"),
        (["--model", "tiny", "--gpus", "2", "--optimizer-bytes", "-4"], "optim_bytes"),
        (["--model", "tiny", "--gpus", "2", "--gpu-memory-gb", "0"], "GPU memory"),
        (["--model", '{"preset": "nope"}', "--gpus", "2"], "nope"),
    ],
)
def test_bad_input_is_one_sentence_and_exit_2(memory: Any, args: list[str], fragment: str) -> None:
    status, out, err = memory(*args)
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardscope: error:") and fragment in lines[0], err
    assert out == ""
