"""A training job's spec as `shardscope train` builds it from its flags: every bound checked once, in the spec."""

from __future__ import annotations

import argparse

import pytest

from shardscope.cli import build_parser
from shardscope.contracts.jobs import SpecError, TrainingJob, job_from_dict, job_to_dict
from shardscope.errors import UserError
from shardscope.training.commands import training_spec
from shardscope.training.model import PRESETS


def _flags(*extra: str) -> argparse.Namespace:
    return build_parser().parse_args(["train", "--strategy", "ddp", "--model", "tiny", "--nproc", "2", "--out", "o.json",
                                      "--log", "o.log", *extra])


def test_the_flags_build_the_same_spec_a_plan_lists() -> None:
    job = training_spec(_flags("--strategy", "zero2", "--model", '{"preset": "tiny", "n_layers": 3, "name": "t3"}',
                               "--micro-batch", "4", "--seq-len", "128"))
    assert isinstance(job, TrainingJob) and job.job_id == "zero2-t3-ws2-local" and job.model == "t3"
    assert job.resolved_model()[1].n_layers == 3
    assert job.tokens_per_step == 4 * 128 * 2
    assert job_from_dict(job_to_dict(job)) == job  # what the worker reads back is the same job
    assert training_spec(_flags()).resolved_model()[1] == PRESETS["tiny"]


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (["--strategy", "zero4"], "--strategy is 'zero4'"),
        (["--model", "gpt3"], "gpt3"),
        (["--model", '{"preset": "nope"}'], "nope"),
        (["--model", '{"preset": "tiny", "d_model": 130}'], r"model\.d_model"),  # 130 is not divisible by 4 heads
        (["--nproc", "0"], "--nproc"),
        (["--micro-batch", "0"], "--micro-batch"),
        (["--seq-len", "0"], "--seq-len"),
        (["--seq-len", "129"], "max_seq_len"),  # tiny is sized for 128
        (["--warmup", "0"], "--warmup"),
        (["--steps", "0"], "--steps"),
        (["--memory-budget-bytes", "0"], "--memory-budget-bytes"),
        (["--seed", "-1"], "--seed"),
        (["--wall-s", "0"], "--wall-s"),
        (["--timeout-s", "-1"], "--timeout-s"),
        (["--shard-size", "3"], "--shard-size"),
        (["--optimizer", "adamw_bf16_states"], "--optimizer"),
    ],
)
def test_bad_flags_raise_one_sentence_naming_the_flag(flags: list[str], match: str) -> None:
    with pytest.raises(UserError, match=match) as info:
        training_spec(_flags(*flags))
    assert "\n" not in str(info.value)


def test_the_spec_is_frozen() -> None:
    job = training_spec(_flags())
    with pytest.raises(AttributeError):
        job.micro_batch = 4  # type: ignore[misc]


def test_a_hand_edited_spec_is_refused_naming_the_field() -> None:
    data = job_to_dict(training_spec(_flags()))
    with pytest.raises(SpecError, match="'micro_batch'"):
        job_from_dict(dict(data, micro_batch=0))
