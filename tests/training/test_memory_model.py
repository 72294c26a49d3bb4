"""Analytic per-GPU memory against the ZeRO paper (Rajbhandari et al., 2020) and the seed article."""

from __future__ import annotations

import pytest

from shardscope.costmodel.memory_model import SHARDED, BytesPerParam, assumptions, bytes_per_param, memory_table, predict_memory
from shardscope.training.strategies import STRATEGIES

PSI = 7_241_732_096  # Mistral-7B; divisible by 64, so every N below divides it

# ZeRO paper, Figure 1 / section 5.1: bytes per GPU for mixed-precision Adam (K = 12)
ZERO_PAPER = {
    "ddp": lambda psi, n: 16 * psi,
    "zero0": lambda psi, n: 16 * psi,
    "zero1": lambda psi, n: 4 * psi + 12 * psi / n,
    "zero2": lambda psi, n: 2 * psi + 14 * psi / n,
    "fsdp_grad_op": lambda psi, n: 2 * psi + 14 * psi / n,
    "zero3": lambda psi, n: 16 * psi / n,
    "fsdp": lambda psi, n: 16 * psi / n,
    "hsdp": lambda psi, n: 16 * psi / n,  # n: the shard group's GPUs
    "zero3_hpz": lambda psi, n: 16 * psi / n + (2 * psi / n if n > 1 else 0),  # ZeRO++: + 2Ψ/p; p: all n (1: hpZ off)
}


def test_hpz_adds_a_secondary_partition_over_its_group() -> None:
    """ZeRO++ (Wang et al. 2023): hpZ keeps ZeRO-3's 16Ψ/N and a bf16 copy of the parameters over p GPUs, 2Ψ/p."""
    row = predict_memory(PSI, "zero3_hpz", 16, "bfloat16", hpz_partition=8)
    zero3 = predict_memory(PSI, "zero3", 16, "bfloat16")
    assert row["param_bytes"] == zero3["param_bytes"] + 2 * PSI // 8 and row["total_bytes"] == 16 * PSI // 16 + 2 * PSI // 8
    assert predict_memory(PSI, "zero3_hpz", 8, "float32", hpz_partition=2)["param_bytes"] == 4 * PSI // 8 + 4 * PSI // 2
    with pytest.raises(ValueError, match="zero3_hpz's alone"):
        predict_memory(PSI, "zero3", 16, hpz_partition=8)
    rows = {r["strategy"]: r for r in memory_table("mistral-7b", "all", 8, shard_group=2)}
    assert rows["zero3_hpz"]["shard_group"] == 2 and rows["zero3_hpz"]["total_bytes"] == 16 * PSI // 8 + 2 * PSI // 2
    assert "zero3_hpz" not in {r["strategy"] for r in memory_table("mistral-7b", "all", 8)}  # partition 8 of 8: degenerate


def test_every_strategy_is_modelled() -> None:
    assert set(SHARDED) == set(STRATEGIES) == set(ZERO_PAPER)


@pytest.mark.parametrize("n", [1, 2, 8, 64])
@pytest.mark.parametrize("strategy", sorted(ZERO_PAPER))
def test_totals_follow_the_zero_paper(strategy: str, n: int) -> None:
    row = predict_memory(PSI, strategy, n, "bfloat16", master_weights=True)
    assert row["total_bytes"] == ZERO_PAPER[strategy](PSI, n)
    assert row["param_bytes"] + row["grad_bytes"] + row["optim_bytes"] == row["total_bytes"]
    assert (row["strategy"], row["gpus"], row["n_params"], row["method"]) == (strategy, n, PSI, "modeled")


@pytest.mark.parametrize(
    ("strategy", "parts"),
    [
        ("ddp", (2, 2, 12)),
        ("zero1", (2, 2, 12 / 8)),
        ("zero2", (2, 2 / 8, 12 / 8)),
        ("zero3", (2 / 8, 2 / 8, 12 / 8)),
    ],
)
def test_which_part_is_sharded_on_8_gpus(strategy: str, parts: tuple[float, float, float]) -> None:
    row = predict_memory(PSI, strategy, 8)
    assert (row["param_bytes"], row["grad_bytes"], row["optim_bytes"]) == tuple(int(p * PSI) for p in parts)


def test_sharding_orders_the_strategies_for_more_than_one_gpu() -> None:
    total = {s: predict_memory(PSI, s, 4)["total_bytes"] for s in STRATEGIES}
    assert total["zero3"] < total["zero2"] < total["zero1"] < total["ddp"]
    assert total["fsdp"] == total["zero3"] and total["fsdp_grad_op"] == total["zero2"] and total["zero0"] == total["ddp"]
    assert len({predict_memory(PSI, s, 1)["total_bytes"] for s in STRATEGIES}) == 1  # nothing to shard over


def test_mistral_7b_ddp_does_not_fit_an_80gb_gpu() -> None:
    (row,) = memory_table("mistral-7b", "ddp", 1)
    assert row["model"] == "mistral-7b"
    assert row["total_bytes"] > 80e9
    assert row["total_bytes"] == pytest.approx(115.9e9, rel=1e-3)


def test_mistral_7b_ddp_without_master_weights_is_the_articles_87gb() -> None:
    row = predict_memory(PSI, "ddp", 1, "bfloat16", master_weights=False)
    # ~14 GB parameters + ~14 GB gradients + ~58 GB Adam states
    assert row["param_bytes"] == row["grad_bytes"] == 2 * PSI
    assert row["param_bytes"] == pytest.approx(14.5e9, rel=0.01)
    assert row["optim_bytes"] == 8 * PSI
    assert row["optim_bytes"] == pytest.approx(58e9, rel=0.01)
    assert row["total_bytes"] == 12 * PSI
    assert row["total_bytes"] == pytest.approx(87e9, rel=0.01)


def test_mistral_7b_fits_with_zero3_on_8_gpus() -> None:
    row = predict_memory(PSI, "zero3", 8)
    assert row["total_bytes"] == 2 * PSI < 80e9


def test_bytes_per_param() -> None:
    assert bytes_per_param("bfloat16") == (2, 2, 12)
    assert bytes_per_param("bfloat16", master_weights=False) == (2, 2, 8)
    assert bytes_per_param("float32") == (4, 4, 8)
    assert predict_memory(1000, "ddp", 1, "float32")["total_bytes"] == 16_000


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"strategy": "zero4"}, "zero4"),
        ({"gpus": 0}, "GPUs"),
        ({"gpus": -2}, "GPUs"),
        ({"dtype": "float16"}, "float16"),
    ],
)
def test_bad_inputs_raise(kwargs: dict, match: str) -> None:
    args = {"n_params": PSI, "strategy": "ddp", "gpus": 8, "dtype": "bfloat16", **kwargs}
    with pytest.raises(ValueError, match=match):
        predict_memory(**args)


def test_memory_table_for_all_strategies() -> None:
    rows = memory_table("llama-1b", "all", 8)
    assert [r["strategy"] for r in rows] == [s for s in STRATEGIES if s != "zero3_hpz"]  # no partition below 8: no hpZ row
    assert [r["strategy"] for r in memory_table("llama-1b", "all", 8, shard_group=4)] == list(STRATEGIES)
    assert {r["model"] for r in rows} == {"llama-1b"}
    assert {r["n_params"] for r in rows} == {1_235_814_400}
    assert {r["dtype"] for r in rows} == {"bfloat16"}


# --------------------------------------------------------------------------- explicit assumptions


def test_assumptions_default_to_the_dtype_and_say_so() -> None:
    assert (assumptions("bfloat16").param_bytes, assumptions("bfloat16").optim_bytes) == (2, 12)
    assert "master" in assumptions("bfloat16").description
    no_master = assumptions("bfloat16", master_weights=False)
    assert (no_master.param_bytes, no_master.grad_bytes, no_master.optim_bytes) == (2, 2, 8)
    assert "no master copy" in no_master.description
    fp32 = assumptions("float32")
    assert (fp32.param_bytes, fp32.grad_bytes, fp32.optim_bytes, fp32.total_bytes) == (4, 4, 8, 16)


def test_overrides_replace_only_what_is_given() -> None:
    custom = assumptions("bfloat16", optim_bytes=2)  # e.g. 8-bit Adam: two 1-byte moments
    assert (custom.param_bytes, custom.grad_bytes, custom.optim_bytes) == (2, 2, 2)
    assert "overridden: optim 2 B" in custom.description
    row = predict_memory(PSI, "ddp", 1, per_param=custom)
    assert row["total_bytes"] == 6 * PSI
    assert set(row) == {"strategy", "gpus", "dtype", "n_params", "param_bytes", "grad_bytes", "optim_bytes",
                        "total_bytes", "method"}  # the database's columns, whatever the assumption


@pytest.mark.parametrize(
    "kwargs",
    [{"param_bytes": -1, "grad_bytes": 2, "optim_bytes": 8}, {"param_bytes": float("nan"), "grad_bytes": 2, "optim_bytes": 8},
     {"param_bytes": True, "grad_bytes": 2, "optim_bytes": 8}, {"param_bytes": 0, "grad_bytes": 0, "optim_bytes": 0}],
)
def test_bytes_per_param_is_validated(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="bytes"):
        BytesPerParam(**kwargs)


def test_memory_table_marks_what_fits() -> None:
    rows = {r["strategy"]: r for r in memory_table("mistral-7b", "all", 8, gpu_memory_gb=20)}
    assert rows["ddp"]["fits"] is False and rows["zero3"]["fits"] is True  # 116 GB vs 14.5 GB against 20 GB
    assert rows["zero3"]["gpu_memory_bytes"] == 20 * 10**9
    assert rows["ddp"]["bytes_per_param"]["optim_bytes"] == 12
    with pytest.raises(ValueError, match="zero4"):
        memory_table("tiny", "zero4", 2)
