"""A rank that runs out of memory makes an ``oom`` row (the memory-bound scale's DDP on 80 GB), not a crash."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from shardscope.training.launch import failure_document
from shardscope.training.worker import error_path, is_out_of_memory


def test_out_of_memory_errors_are_recognised_also_when_wrapped() -> None:
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 27.00 GiB"))
    assert is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    try:
        try:
            raise torch.OutOfMemoryError("Tried to allocate 2.00 GiB")
        except torch.OutOfMemoryError as inner:
            raise RuntimeError("DeepSpeed engine initialisation failed") from inner
    except RuntimeError as wrapped:
        assert is_out_of_memory(wrapped)
    assert not is_out_of_memory(RuntimeError("NCCL error: unhandled system error"))
    assert not is_out_of_memory(ValueError("--seq-len 8192 is longer than the model's max_seq_len"))


def test_an_oom_report_of_one_rank_makes_the_job_an_oom_row(tmp_path: Path) -> None:
    out = str(tmp_path / "ddp-mistral-7b-ws8-all.json")
    Path(error_path(out, 0)).write_text(json.dumps({"rank": 0, "oom": False, "error": "NCCL watchdog: peer gone"}))
    snapshot = out + ".rank3.oom_snapshot.pickle"
    Path(error_path(out, 3)).write_text(json.dumps({"rank": 3, "oom": True, "error": "OutOfMemoryError: CUDA out of memory",
                                                    "memory_snapshot": snapshot}))
    doc = failure_document({"job_id": "ddp-mistral-7b-ws8-all", "strategy": "ddp"}, out, 8, 1, "log")
    assert doc["outcome"] == "oom" and doc["job"]["world_size"] == 8 and doc["summary"] == {}
    assert doc["error"] == f"rank 3: OutOfMemoryError: CUDA out of memory (memory snapshot: {snapshot})"
    Path(error_path(out, 3)).unlink()
    assert failure_document({"job_id": "x", "strategy": "ddp"}, out, 8, 1, "log")["outcome"] == "failed"
