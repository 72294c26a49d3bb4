"""Repeats of a timed window: median, the 95% interval over repeats, and when two runs are within noise."""

from __future__ import annotations

import math

import pytest

from shardscope.contracts.repeats import ci95, summarize_repeats, t95, within_noise
from factories import default_config


def test_t_quantiles_fall_towards_the_normal() -> None:
    assert t95(1) == pytest.approx(12.706) and t95(2) == pytest.approx(4.303)
    assert t95(30) > t95(31) == pytest.approx(1.960)
    with pytest.raises(ValueError):
        t95(0)


def test_interval_is_positive_and_brackets_the_geometric_mean() -> None:
    low, high = ci95([1.0, 1.1, 0.9])
    geometric = math.exp(sum(map(math.log, [1.0, 1.1, 0.9])) / 3)
    assert 0 < low < geometric < high
    assert ci95([1.0, 1.0, 1.0]) == (1.0, 1.0)
    assert ci95([1.0]) is None  # one repeat: no interval


def test_repeats_split_the_steps_into_equal_windows() -> None:
    steps = [1.0, 1.2, 9.0, 2.0, 2.2, 2.1, 1.5, 1.4, 1.6]  # 3 windows of 3; one outlier step
    out = summarize_repeats(steps, 3, tokens_per_step=100)
    assert out["repeat_step_time_s"] == [1.2, 2.1, 1.5]
    assert out["median_step_time_s"] == 1.5
    assert out["ci95_low_step_time_s"] < 1.5 < out["ci95_high_step_time_s"]
    assert out["ci95_low_tokens_per_s"] == pytest.approx(100 / out["ci95_high_step_time_s"])
    assert out["ci95_high_tokens_per_s"] == pytest.approx(100 / out["ci95_low_step_time_s"])
    single = summarize_repeats(steps, 1, tokens_per_step=100)
    assert single["median_step_time_s"] == 1.6 and single["ci95_low_step_time_s"] is None
    with pytest.raises(ValueError, match="equal repeats"):
        summarize_repeats(steps, 2, tokens_per_step=100)


def test_overlapping_intervals_are_within_noise() -> None:
    assert within_noise(1.0, 2.0, 1.5, 3.0)
    assert not within_noise(1.0, 2.0, 2.5, 3.0)
    assert not within_noise(None, None, 1.0, 2.0)  # no interval: never called a tie
    assert not within_noise(float("nan"), 2.0, 1.0, 2.0)


def test_a_repeat_count_that_is_not_a_positive_integer_stops_before_any_job() -> None:
    import copy
    from pathlib import Path

    import yaml

    from shardscope.config import validate_config
    from shardscope.errors import UserError
    from shardscope.contracts.jobs import SpecError, TrainingJob

    repo = Path(__file__).resolve().parents[2]
    config = default_config()
    schema = repo / "workflow" / "schemas" / "config.schema.yaml"
    validate_config(config, schema)  # the shipped defaults are valid
    for section, value in (("gpu", 0), ("cpu", "three")):
        bad = copy.deepcopy(config)
        bad[section]["repeats"] = value
        with pytest.raises(UserError, match=f"{section}.repeats"):
            validate_config(bad, schema)
    bad = copy.deepcopy(config)
    bad["training"]["reduce_dtype"] = "fp8"
    with pytest.raises(UserError, match="training.reduce_dtype"):
        validate_config(bad, schema)
    with pytest.raises(SpecError, match="'repeats'"):
        TrainingJob(job_id="j", world_size=2, nproc_per_node=2, placement="local", strategy="ddp", model="tiny",
                    model_spec="tiny", dtype="float32", micro_batch=1, seq_len=8, warmup=1, steps=1, timeout_s=300,
                    wall_s=600, repeats=0)


def test_equal_buckets_are_25_mib_in_the_dtype_each_travels_in() -> None:
    from shardscope.contracts.fairness import DDP_BUCKET_BYTES, FairSettings, deepspeed_bucket_elements

    equal = deepspeed_bucket_elements(FairSettings(buckets="equal"), "float32", "bfloat16")
    assert equal == {"reduce": DDP_BUCKET_BYTES // 4, "allgather": DDP_BUCKET_BYTES // 2, "prefetch": DDP_BUCKET_BYTES // 2}
    default = deepspeed_bucket_elements(FairSettings(), "float32", "bfloat16")
    assert default == {"reduce": 500_000_000, "allgather": 500_000_000, "prefetch": 50_000_000}  # DeepSpeed's defaults
    assert FairSettings(reduce_dtype="auto").resolved_reduce_dtype("bfloat16") == "bfloat16"
    assert FairSettings(reduce_dtype="float32").resolved_reduce_dtype("bfloat16") == "float32"
    with pytest.raises(ValueError, match="--buckets"):
        FairSettings(buckets="big")
