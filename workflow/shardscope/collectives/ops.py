"""One call of each collective through torch.distributed, and an optional correctness check."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.distributed as dist

from shardscope.collectives.sweep import Buffers

# torch >= 2.13 renamed the tensor-in/tensor-out gather and scatter (same arguments) and made the
# old names warn on every call, which a timed loop would pay for; older torch has only the old names.
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def op_call(op: str, buffers: Buffers, rank: int, world_size: int) -> Callable[[], object]:
    """A zero-argument function that runs ``op`` once on ``buffers`` (synchronously issued).

    The single-call ops are bound with :func:`functools.partial`, so a timed loop pays for
    the torch.distributed call only, not for an extra Python frame per iteration.
    """
    send, recv = buffers.send, buffers.recv
    if op == "all_reduce":
        return partial(dist.all_reduce, send)
    if op == "all_gather":
        return partial(_ALL_GATHER, recv, send)
    if op == "reduce_scatter":
        return partial(_REDUCE_SCATTER, recv, send)
    if op == "broadcast":
        return partial(dist.broadcast, send, src=0)
    if op == "reduce":
        return partial(dist.reduce, send, dst=0)
    if op == "all_to_all":
        return partial(dist.all_to_all_single, recv, send)
    if op == "sendrecv":
        peer_to, peer_from = (rank + 1) % world_size, (rank - 1) % world_size
        ops = [dist.P2POp(dist.isend, send, peer_to), dist.P2POp(dist.irecv, recv, peer_from)]

        def sendrecv() -> None:
            for work in dist.batch_isend_irecv(ops):
                work.wait()

        return sendrecv
    raise ValueError(f"unknown collective {op!r}")


def count_wrong(op: str, buffers: Buffers, rank: int, world_size: int) -> int:
    """Run ``op`` once on rank-dependent data; the number of elements this rank got wrong.

    Like nccl-tests' ``#wrong``: 0 means every element this rank checks is exact (the inputs
    are small integers, exact in every float type including bfloat16).
    """
    send, recv = buffers.send, buffers.recv
    send.fill_(rank + 1)
    if recv is not send:
        recv.fill_(-1)
    op_call(op, buffers, rank, world_size)()
    total = world_size * (world_size + 1) / 2
    if op == "all_reduce":
        return _mismatches(send, torch.full_like(send, total))
    if op in ("all_gather", "all_to_all"):
        sources = torch.arange(1, world_size + 1, dtype=recv.dtype, device=recv.device)
        return _mismatches(recv.view(world_size, -1), sources.view(world_size, 1).expand(world_size, recv.numel() // world_size))
    if op == "reduce_scatter":
        return _mismatches(recv, torch.full_like(recv, total))
    if op == "broadcast":
        return _mismatches(send, torch.ones_like(send))
    if op == "reduce":
        return _mismatches(send, torch.full_like(send, total)) if rank == 0 else 0
    if op == "sendrecv":
        return _mismatches(recv, torch.full_like(recv, (rank - 1) % world_size + 1))
    raise ValueError(f"unknown collective {op!r}")


def check_result(op: str, buffers: Buffers, rank: int, world_size: int) -> bool:
    """Run ``op`` once on rank-dependent data and verify the result every rank receives."""
    return count_wrong(op, buffers, rank, world_size) == 0


def _mismatches(got: torch.Tensor, expected: torch.Tensor) -> int:
    """How many elements of ``got`` differ from ``expected`` (compared in float32)."""
    return int((got.float() != expected.float()).sum().item())
