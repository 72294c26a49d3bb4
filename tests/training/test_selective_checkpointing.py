"""torchtitan's selective checkpointing through the real strategies: 2-rank CPU runs against the modeled terms.

FSDP2 and DeepSpeed ZeRO-3 wrap the block's forward in a selective checkpoint as they wrap it in a full one; the
recompute must run the ops the forward ran (torch checks it op by op), and what each rank keeps must be what the
memory model says: the activations within 1% and the whole tracked peak within 10%, as ``test_memory_proof.py`` asks
of every strategy without checkpointing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardscope.costmodel.memory_check import compare_job

from training.conftest import run_train


@pytest.mark.parametrize("mode", ["selective_op", "selective_layer"])
@pytest.mark.parametrize("strategy", ["fsdp", "zero3"])
def test_selective_checkpointing_runs_and_keeps_what_the_model_says(tmp_path: Path, strategy: str, mode: str) -> None:
    proc, out, _ = run_train(tmp_path, strategy, "tiny", f"{strategy}-{mode}", "--seed", "7", "--dtype", "float32",
                             "--activation-checkpointing", mode)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["outcome"] == "ok", doc.get("error")
    categories = compare_job(doc, 0.0)["categories"]
    assert categories["activation_peak_bytes"]["ratio"] == pytest.approx(1.0, abs=0.01)
    assert categories["tracked_peak_bytes"]["ratio"] == pytest.approx(1.0, abs=0.10)
    _host_calls_are_the_modeled_ones(doc, strategy, mode)


def _host_calls_are_the_modeled_ones(doc: dict, strategy: str, mode: str) -> None:
    """The Python calls the run counted are the step model's for its strategy and checkpointing (within 5%: a
    DeepSpeed or torch release may move a few), so a checkpointing mode's host work cannot drift from the model."""
    from shardscope.contracts.models import PRESETS
    from shardscope.costmodel.step import modeled_host_calls

    counted = doc["summary"]["host_calls_per_step"]
    assert counted == pytest.approx(modeled_host_calls(strategy, PRESETS["tiny"], mode), rel=0.05)


@pytest.mark.parametrize("strategy", ["ddp", "zero3"])
def test_full_checkpointing_host_calls_are_the_modeled_ones(tmp_path: Path, strategy: str) -> None:
    """Under full checkpointing every block's saved tensors go through Python hooks and ZeRO-3's fetch and release
    hooks fire again in the recompute: the count the model uses is what a real run makes."""
    proc, out, _ = run_train(tmp_path, strategy, "tiny", f"{strategy}-full", "--seed", "7", "--dtype", "float32",
                             "--activation-checkpointing", "full")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    _host_calls_are_the_modeled_ones(doc, strategy, "full")
    assert doc["summary"]["host_calls_per_step"] > 1.3 * modeled_none(strategy)


def modeled_none(strategy: str) -> int:
    from shardscope.contracts.models import PRESETS
    from shardscope.costmodel.step import modeled_host_calls

    return modeled_host_calls(strategy, PRESETS["tiny"], "none")
