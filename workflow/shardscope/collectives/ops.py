"""One call of each collective through torch.distributed, and an optional correctness check."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from shardscope.collectives.sweep import Buffers


def op_call(op: str, buffers: Buffers, rank: int, world_size: int) -> Callable[[], None]:
    """A zero-argument function that runs ``op`` once on ``buffers`` (synchronously issued)."""
    send, recv = buffers.send, buffers.recv
    if op == "all_reduce":
        return lambda: dist.all_reduce(send)
    if op == "all_gather":
        return lambda: dist.all_gather_into_tensor(recv, send)
    if op == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(recv, send)
    if op == "broadcast":
        return lambda: dist.broadcast(send, src=0)
    if op == "reduce":
        return lambda: dist.reduce(send, dst=0)
    if op == "all_to_all":
        return lambda: dist.all_to_all_single(recv, send)
    if op == "sendrecv":
        peer_to, peer_from = (rank + 1) % world_size, (rank - 1) % world_size

        def sendrecv() -> None:
            ops = [dist.P2POp(dist.isend, send, peer_to), dist.P2POp(dist.irecv, recv, peer_from)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()

        return sendrecv
    raise ValueError(f"unknown collective {op!r}")


def check_result(op: str, buffers: Buffers, rank: int, world_size: int) -> bool:
    """Run ``op`` once on rank-dependent data and verify the result every rank receives."""
    send, recv = buffers.send, buffers.recv
    send.fill_(rank + 1)
    if recv is not send:
        recv.fill_(-1)
    op_call(op, buffers, rank, world_size)()
    total = world_size * (world_size + 1) / 2
    if op == "all_reduce":
        expected = torch.full_like(send, total)
        return bool(torch.allclose(send.float(), expected.float()))
    if op == "all_gather":
        parts = recv.view(world_size, -1).float()
        return all(bool((parts[r] == r + 1).all()) for r in range(world_size))
    if op == "reduce_scatter":
        return bool((recv.float() == total).all())
    if op == "broadcast":
        return bool((send.float() == 1).all())
    if op == "reduce":
        return rank != 0 or bool((send.float() == total).all())
    if op == "all_to_all":
        parts = recv.view(world_size, -1).float()
        return all(bool((parts[r] == r + 1).all()) for r in range(world_size))
    if op == "sendrecv":
        return bool((recv.float() == (rank - 1) % world_size + 1).all())
    raise ValueError(f"unknown collective {op!r}")
