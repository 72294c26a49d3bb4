"""Message sizes and buffers for one collective, with nccl-tests' meaning of "size".

``size_bytes`` is what nccl-tests prints in its ``size`` column: the whole buffer for
all_reduce, broadcast and send/recv, and the total (gathered / pre-scatter) buffer for
all_gather, reduce_scatter and all_to_all.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def message_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """The ``-b/-e/-f`` sweep of nccl-tests: min, min*f, … up to and including max."""
    if min_bytes < 1 or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"bad sweep: min {min_bytes}, max {max_bytes}, factor {factor}")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


@dataclass(frozen=True)
class Buffers:
    """Input and output tensors for one call of an op, and the size nccl-tests would print."""

    send: torch.Tensor
    recv: torch.Tensor
    size_bytes: int
    count: int


def make_buffers(op: str, size_bytes: int, world_size: int, dtype: torch.dtype, device: torch.device) -> Buffers:
    """Allocate the buffers of ``op`` for a requested size, rounded down to whole elements per rank.

    Buffers are zero-filled, not left uninitialised: reductions on CPU run at the speed of
    their data (leftover denormal floats are many times slower to add), so timings must not
    depend on what the allocator happened to hand out.
    """
    elem = torch.tensor([], dtype=dtype).element_size()
    per_rank_split = op in ("all_gather", "reduce_scatter", "all_to_all")
    granule = elem * (world_size if per_rank_split else 1)
    count = max(size_bytes // granule, 1) * (world_size if per_rank_split else 1)
    total = torch.zeros(count, dtype=dtype, device=device)
    if op == "all_gather":
        send = torch.zeros(count // world_size, dtype=dtype, device=device)
        return Buffers(send, total, count * elem, count)
    if op == "reduce_scatter":
        recv = torch.zeros(count // world_size, dtype=dtype, device=device)
        return Buffers(total, recv, count * elem, count)
    recv = torch.zeros_like(total) if op in ("all_to_all", "sendrecv") else total
    return Buffers(total, recv, count * elem, count)
