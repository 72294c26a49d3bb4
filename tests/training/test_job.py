"""A training job's validation: everything the launcher checks before torchrun starts."""

from __future__ import annotations

import pytest

from shardscope.training.job import TrainJob
from shardscope.training.model import PRESETS


def test_valid_job_resolves_its_model() -> None:
    job = TrainJob(strategy="zero2", model={"preset": "tiny", "n_layers": 3, "name": "t3"}, nproc=2, micro_batch=4, seq_len=128)
    assert job.model_name == "t3" and job.config.n_layers == 3
    assert job.tokens_per_step == 4 * 128 * 2
    assert TrainJob(strategy="ddp", model="tiny", nproc=1).config == PRESETS["tiny"]


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"strategy": "zero4"}, "zero4"),
        ({"model": "gpt3"}, "gpt3"),
        ({"model": {"preset": "nope"}}, "nope"),
        ({"model": {"preset": "tiny", "d_model": 130}}, r"model\.d_model"),  # 130 is not divisible by 4 heads
        ({"nproc": 0}, "--nproc"),
        ({"micro_batch": 0}, "--micro-batch"),
        ({"micro_batch": 1.5}, "--micro-batch"),
        ({"seq_len": 0}, "--seq-len"),
        ({"seq_len": 129}, "max_seq_len"),  # tiny is sized for 128
        ({"warmup": 0}, "--warmup"),
        ({"steps": 0}, "--steps"),
        ({"dtype": "float16"}, "float16"),
        ({"memory_budget_bytes": 0}, "--memory-budget-bytes"),
        ({"seed": -1}, "--seed"),
        ({"nproc": True}, "--nproc"),
    ],
)
def test_bad_jobs_raise_one_sentence(change: dict, match: str) -> None:
    args = {"strategy": "ddp", "model": "tiny", "nproc": 2, **change}
    with pytest.raises(ValueError, match=match) as info:
        TrainJob(**args)
    assert "\n" not in str(info.value)


def test_job_is_frozen() -> None:
    job = TrainJob(strategy="ddp", model="tiny", nproc=2)
    with pytest.raises(AttributeError):
        job.nproc = 4  # type: ignore[misc]
