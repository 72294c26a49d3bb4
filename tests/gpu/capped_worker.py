"""The training worker under a CUDA memory cap, so that ``memory_check.py`` can make a real job run out of memory.

    torchrun --standalone --nproc-per-node 1 tests/gpu/capped_worker.py <worker flags>

``SHARDSCOPE_CHECK_CUDA_CAP_BYTES`` caps what the caching allocator may hand out on this rank's
GPU (``torch.cuda.set_per_process_memory_fraction``); beyond it the allocator raises
``torch.OutOfMemoryError`` exactly as a full GPU would, so the worker's OOM path runs for real:
the outcome ``oom`` and the allocator snapshot next to the result. Not a test pytest collects.
"""

from __future__ import annotations

import os
import sys


def wrapped_command(cmd: list[str], script: str) -> list[str]:
    """The launcher's torchrun command with ``-m shardscope.training`` replaced by ``script`` (this file)."""
    i = cmd.index("shardscope.training")
    if cmd[i - 1] != "-m":
        raise ValueError(f"not a torchrun command of the training worker: {cmd}")
    return [*cmd[: i - 1], script, *cmd[i + 1:]]


def main() -> int:
    """Apply the cap to this rank's GPU, then run the ordinary worker with the given flags."""
    import torch

    cap = int(os.environ.get("SHARDSCOPE_CHECK_CUDA_CAP_BYTES", "0"))
    if cap > 0 and torch.cuda.is_available():
        device = int(os.environ.get("LOCAL_RANK", "0"))
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(cap / total, 1.0), device)
    from shardscope.training.worker import main as worker_main

    return worker_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
