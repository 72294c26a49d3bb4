"""DeepSpeed ZeRO-1/2's own optimizer step, measured: a real DeepSpeed run (one gloo rank, CPU) under the tensor
tracker against :func:`shardscope.costmodel.memory_peak.zero12_step_moments`, the GPU model's step moments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("deepspeed")

from shardscope.costmodel.memory_peak import zero12_step_moments  # noqa: E402
from shardscope.training.launch import ops_env  # noqa: E402

PROBE = Path(__file__).with_name("zero_step_probe.py")


@pytest.fixture(scope="module")
def probed() -> list[dict]:
    sys.path.insert(0, str(PROBE.parent))
    from zero_step_probe import SHAPES

    out = subprocess.run([sys.executable, str(PROBE), "zero2:bfloat16", "zero1:bfloat16", "zero2:float32"],
                         capture_output=True, text=True, timeout=600, env=ops_env(cpu=True))
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 3 * len(SHAPES), out.stderr[-3000:]
    for row in rows:
        row["cfg"] = SHAPES[row["shape"]]
    return rows


def test_the_step_holds_what_the_model_says_it_does(probed: list[dict]) -> None:
    """One rank: the partition is the whole model. In 16 bits a flat copy and its fp32 cast (6 B per parameter), or
    the norm's float64 copy of the embedding where that is larger; in fp32 the flat copy alone (4 B). (In fp32 the model
    that is nearly all embedding peaks in backward, with its embedding's fp32 gradient, so its step is not seen.)"""
    for row in probed:
        cfg, tracked = row["cfg"], row["tracked"]
        if (row["dtype"], row["shape"]) == ("float32", "embedding-only"):
            assert tracked["peak_phase"] == "backward"
            continue
        policy = "fp32" if row["dtype"] == "float32" else "bf16"
        modeled = zero12_step_moments(row["strategy"], cfg, cfg.param_count(), policy)
        assert tracked["peak_phase"] == "step", row
        assert tracked["transient_peak_bytes"] == pytest.approx(modeled, rel=1e-4), row


def test_each_moment_is_the_step_for_some_shape(probed: list[dict]) -> None:
    """The norm's float64 copy, not the flattening, is the 16-bit step of a model that is nearly all embedding; 6 B
    per parameter for the others: the test would fail if either moment were left out."""
    by = {(r["strategy"], r["dtype"], r["shape"]): r["tracked"]["transient_peak_bytes"] for r in probed}
    for shape, cfg in ((r["shape"], r["cfg"]) for r in probed if r["dtype"] == "bfloat16"):
        largest = max(cfg.vocab_size * cfg.d_model, cfg.d_model * cfg.d_ff)
        expected = 8 * largest if shape == "embedding-only" else 6 * cfg.param_count()
        assert by[("zero2", "bfloat16", shape)] == pytest.approx(expected, rel=1e-4)
