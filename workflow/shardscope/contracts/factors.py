"""Bandwidth definitions of nccl-tests (doc/PERFORMANCE.md), in one place.

``algbw = S / t`` with ``S`` the message size in bytes as nccl-tests reports it, and
``busbw = algbw * factor(op, n)`` so that bus bandwidth is comparable to the link speed
whatever the number of ranks. GB/s means 1e9 bytes per second, as in nccl-tests.
"""

from __future__ import annotations

from shardscope.contracts.names import OPS

__all__ = ["OPS", "algbw_gbps", "busbw_factor", "busbw_gbps"]


def busbw_factor(op: str, world_size: int) -> float:
    """The factor that turns algorithm bandwidth into bus bandwidth for ``op`` on ``world_size`` ranks."""
    if world_size < 1:
        raise ValueError(f"world size must be at least 1, got {world_size}")
    n = world_size
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    raise ValueError(f"unknown collective {op!r}; expected one of {', '.join(OPS)}")


def algbw_gbps(size_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 B/s) of moving ``size_bytes`` in ``time_s`` seconds."""
    if time_s <= 0:
        raise ValueError(f"time must be positive, got {time_s}")
    return size_bytes / time_s / 1e9


def busbw_gbps(op: str, world_size: int, size_bytes: float, time_s: float) -> float:
    """Bus bandwidth in GB/s: algorithm bandwidth times the op's nccl-tests factor."""
    return algbw_gbps(size_bytes, time_s) * busbw_factor(op, world_size)
