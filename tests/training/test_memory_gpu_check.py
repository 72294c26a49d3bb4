"""tests/gpu/memory_check.py, the prepared GPU memory check, must work before a GPU session runs it (no GPU, no torchrun here).

Its pure parts are checked on a made-up one-rank CUDA result of the tiny model whose tracked
categories equal the modeled ones (plumbing, not a measurement): the overhead
calibrated on the first job's CUDA peak and checked on the next, the CUDA counters required,
a ratio the model cannot give printed rather than crashing, and the capped worker's torchrun
command (the OOM job) being the launcher's own with only the worker swapped.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

GPU = Path(__file__).parents[1] / "gpu"


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"gpu_{name}", GPU / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def check() -> Any:
    return _load("memory_check")


def _cuda_doc(peak_over_model: float, counters: bool = True) -> dict[str, Any]:
    """A one-rank bf16 DDP result of the tiny model on "CUDA": tracked = modeled, CUDA peak = ``peak_over_model`` x modeled."""
    from shardscope.contracts.models import resolve_model
    from shardscope.costmodel.memory_check import modeled_for_job

    cfg = resolve_model("tiny")[1]
    job = {"strategy": "ddp", "model": "tiny", "model_config": cfg.to_dict(), "world_size": 1, "micro_batch": 1, "seq_len": 64,
           "dtype": "bfloat16", "activation_checkpointing": "none", "optimizer": "adamw"}
    doc = {"job": job, "env": {"device_type": "cuda", "devices": ["NVIDIA H200"]}, "settings": {}, "outcome": "ok"}
    terms = modeled_for_job(doc)
    rank = {"rank": 0, "param_bytes": terms.param_bytes, "grad_bytes": terms.grad_bytes, "optim_bytes": terms.optim_bytes,
            "activation_peak_bytes": terms.assumptions["activation_peak"], "buffer_bytes": terms.buffer_bytes,
            "tracked_peak_bytes": terms.peak_bytes, "tracked_peak_phase": terms.peak_phase.split("_")[0]}
    known = 1 if counters else None
    doc["ranks"] = [rank]
    doc["summary"] = {"peak_memory_bytes": int(terms.peak_bytes * peak_over_model),
                      "memory_categories": {"reserved_minus_allocated_bytes": known, "num_alloc_retries": known and 0,
                                            "num_ooms": known and 0}}
    return doc


def test_overhead_is_calibrated_on_the_first_cuda_peak_and_checked_on_the_next(check: Any) -> None:
    from shardscope.costmodel.memory_check import modeled_for_job

    first, fraction, ok = check.check_job(_cuda_doc(1.05), None, on_cuda=True)
    assert first["calibration"] and first["cuda"]["cuda_peak_bytes"]["ratio"] == pytest.approx(1.0, abs=1e-6) and ok
    assert fraction == pytest.approx(1 - 1 / 1.05, abs=1e-6)
    second, again, ok = check.check_job(_cuda_doc(1.30), fraction, on_cuda=True)
    assert not second["calibration"] and again == fraction and not ok
    assert second["cuda"]["cuda_peak_bytes"]["ratio"] == pytest.approx(1.30 / 1.05, rel=1e-3)
    # tracked tensors are compared with the model without the allocator's overhead
    assert second["categories"]["tracked_peak_bytes"]["modeled"] == modeled_for_job(_cuda_doc(1.0)).peak_bytes
    assert check.check_job(_cuda_doc(1.08), fraction, on_cuda=True)[2]


def test_a_cuda_run_without_the_allocator_counters_fails(check: Any) -> None:
    assert check.check_job(_cuda_doc(1.0), 0.0, on_cuda=True)[2]
    assert not check.check_job(_cuda_doc(1.0, counters=False), 0.0, on_cuda=True)[2]


def test_a_ratio_the_model_cannot_give_prints(check: Any) -> None:
    assert check.ratio_cell("buffers_beside_bucket_bytes", {"measured": 5e8, "modeled": 0, "ratio": None}) == \
        "buffers_beside_bucket 0.500/0.000 GB (-)"
    assert check.within({"x": {"ratio": None}, "y": {"ratio": 1.05}}) and not check.within({"y": {"ratio": 1.2}})


def test_the_oom_job_runs_the_launchers_command_with_the_capped_worker(check: Any) -> None:
    from shardscope.training.launch import launch_command

    capped = _load("capped_worker")
    cmd = launch_command(1, 1, ["--strategy", "ddp", "--out", "x.json"])
    wrapped = capped.wrapped_command(cmd, "/repo/tests/gpu/capped_worker.py")
    assert wrapped[: cmd.index("-m", 3)] == cmd[: cmd.index("-m", 3)]
    assert wrapped[-5:] == ["/repo/tests/gpu/capped_worker.py", "--strategy", "ddp", "--out", "x.json"]
    assert "shardscope.training" not in wrapped
    with pytest.raises(ValueError, match="not a torchrun command"):
        capped.wrapped_command(["python", "shardscope.training"], "w.py")
