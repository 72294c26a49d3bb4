"""DeepSpeed ZeRO-1/2/3's own optimizer step, measured: a real DeepSpeed run (one gloo rank, CPU) under the tensor
tracker against :func:`shardscope.costmodel.memory_peak.zero_step_moments`, the GPU model's step moments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("deepspeed")

from shardscope.costmodel.memory_peak import zero_step_moments  # noqa: E402
from shardscope.training.launch import ops_env  # noqa: E402

PROBE = Path(__file__).with_name("zero_step_probe.py")
sys.path.insert(0, str(PROBE.parent))
from zero_step_probe import SHAPES, SMALL_BUCKET  # noqa: E402  (its rank variables are set only when it runs)

SUB_GROUP = 1_000_000


def _probe(runs: list[str], **env: str) -> list[dict]:
    out = subprocess.run([sys.executable, str(PROBE), *runs], capture_output=True, text=True, timeout=600,
                         env={**ops_env(cpu=True), **env})
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == len(runs) * len(SHAPES), out.stderr[-3000:]
    for row in rows:
        row["cfg"] = SHAPES[row["shape"]]
    return rows


@pytest.fixture(scope="module")
def probed() -> list[dict]:
    return _probe(["zero2:bfloat16", "zero1:bfloat16", "zero3:bfloat16", "zero2:float32", "zero3:float32"])


def _step_bytes(row: dict) -> int:
    """The tracked step's bytes beyond the held states, less ZeRO-3's reduce bucket (the probe's, cut to SMALL_BUCKET
    elements in the reduce dtype, alive through its step)."""
    bucket = SMALL_BUCKET * (4 if row["dtype"] == "float32" else 2) if row["strategy"] == "zero3" else 0
    return row["tracked"]["transient_peak_bytes"] - bucket


def test_the_step_holds_what_the_model_says_it_does(probed: list[dict]) -> None:
    """One rank: the partition is the whole model. In 16 bits a flat copy and its fp32 cast (6 B per parameter), or
    the norm's float64 copy of the embedding where that is larger; in fp32 the flat copy alone (4 B). (In fp32 the
    model that is nearly all embedding peaks in backward, with its embedding's fp32 gradient: its step is not seen.)"""
    for row in probed:
        cfg, tracked = row["cfg"], row["tracked"]
        if (row["dtype"], row["shape"]) == ("float32", "embedding-only"):
            assert tracked["peak_phase"] == "backward"
            continue
        policy = "fp32" if row["dtype"] == "float32" else "bf16"
        modeled = zero_step_moments(row["strategy"], cfg, 1, policy)
        assert tracked["peak_phase"] == "step", row
        assert _step_bytes(row) == pytest.approx(modeled, rel=1e-4), row


def test_each_moment_is_the_step_for_some_shape(probed: list[dict]) -> None:
    """The norm's float64 copy, not the flattening, is the 16-bit step of a model that is nearly all embedding; 6 B
    per parameter for the others: the test would fail if either moment were left out."""
    by = {(r["strategy"], r["dtype"], r["shape"]): _step_bytes(r) for r in probed}
    for row in probed:
        if row["dtype"] != "bfloat16":
            continue
        cfg = row["cfg"]
        largest = max(cfg.vocab_size * cfg.d_model, cfg.d_model * cfg.d_ff)
        expected = 8 * largest if row["shape"] == "embedding-only" else 6 * cfg.param_count()
        assert by[(row["strategy"], "bfloat16", row["shape"])] == pytest.approx(expected, rel=1e-4)


def test_zero3_flattens_one_sub_group_at_a_time() -> None:
    """``sub_group_size`` cut to 1e6 elements: the step of a 6.6M-parameter model holds a sub-group's 6 B per element,
    not the partition's; the model bounds a sub-group by the size and one tensor past it."""
    rows = {r["shape"]: r for r in _probe(["zero3:bfloat16"], PROBE_SUB_GROUP=str(SUB_GROUP))}
    blocks = rows["blocks"]
    cfg = blocks["cfg"]
    measured, modeled = _step_bytes(blocks), zero_step_moments("zero3", cfg, 1, "bf16", sub_group_elements=SUB_GROUP)
    assert measured < 0.25 * 6 * cfg.param_count()  # far below the whole partition's
    assert 6 * SUB_GROUP <= measured <= modeled == 6 * (SUB_GROUP + cfg.d_model * cfg.d_ff)
    # the embedding (3.84M elements, a sub-group of its own) is the norm's moment, sub-groups or not
    embedding = rows["embedding"]
    assert _step_bytes(embedding) == pytest.approx(zero_step_moments("zero3", embedding["cfg"], 1, "bf16", SUB_GROUP),
                                                   rel=1e-4)
