"""The job document's modeled block: both analytic models, their assumptions and measured/modeled."""

from __future__ import annotations

import pytest

from shardscope.costmodel.memory_model import SHARDED
from shardscope.costmodel.modeled import IMPLEMENTATION, implementation_memory, measured_max, modeled_block

PSI = 1_000_000


def test_every_strategy_has_an_implementation_model_in_both_dtypes() -> None:
    for dtype in ("float32", "bfloat16"):
        assert set(IMPLEMENTATION[dtype]) == set(SHARDED)


def test_implementation_model_of_deepspeed_zero1_in_fp32() -> None:
    row = implementation_memory(PSI, "zero1", 4, "float32")
    # fp32 params kept whole; grads partitioned; fp32 master partition + two moments partitioned
    assert (row["param_bytes"], row["grad_bytes"], row["optim_bytes"]) == (4 * PSI, PSI, 3 * PSI)
    assert row["total_bytes"] == 8 * PSI
    assert row["sharded"] == {"param_bytes": False, "grad_bytes": True, "optim_bytes": True}


def test_implementation_model_rejects_unknown_inputs() -> None:
    with pytest.raises(ValueError, match="zero9"):
        implementation_memory(PSI, "zero9", 2, "float32")
    with pytest.raises(ValueError, match="float16"):
        implementation_memory(PSI, "ddp", 2, "float16")


def test_block_compares_the_largest_rank_with_both_models() -> None:
    ranks = [{"rank": 0, "param_bytes": 4 * PSI, "grad_bytes": 2 * PSI, "optim_bytes": 6 * PSI},
             {"rank": 1, "param_bytes": 4 * PSI, "grad_bytes": 2 * PSI + 10, "optim_bytes": 6 * PSI - 10}]
    assert measured_max(ranks) == {"param_bytes": 4 * PSI, "grad_bytes": 2 * PSI + 10, "optim_bytes": 6 * PSI,
                                   "total_bytes": 12 * PSI + 10}
    block = modeled_block("zero2", PSI, 2, "float32", ranks)
    assert block["method"] == "modeled"
    paper = block["zero_paper"]
    assert (paper["param_bytes"], paper["grad_bytes"], paper["optim_bytes"]) == (4 * PSI, 2 * PSI, 4 * PSI)
    assert paper["bytes_per_param"]["optim_bytes"] == 8 and "fp32" in paper["bytes_per_param"]["description"]
    assert paper["sharded"] == {"param_bytes": False, "grad_bytes": True, "optim_bytes": True}
    assert paper["measured_over_modeled"]["optim_bytes"] == pytest.approx(1.5)  # the fp32 master partition
    implementation = block["implementation"]["measured_over_modeled"]
    assert implementation["optim_bytes"] == pytest.approx(1.0)
    assert implementation["grad_bytes"] == pytest.approx(1.0, abs=1e-5)
