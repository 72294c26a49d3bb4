"""Rank groups of a job: how many consecutive ranks share one NVLink island, node or switch.

Shared by the planner (which plans ``hsdp`` and ``zero3_hpz`` with that shard size) and the cost
model (which times their collectives inside one group), so both cut the ranks the same way.
"""

from __future__ import annotations

__all__ = ["hsdp_shard_size"]


def hsdp_shard_size(groups: list[int]) -> int:
    """Ranks of one HSDP shard group: the largest count that divides the world size with every block of
    that many consecutive ranks inside one group (an NVLink island, a node, an emulated switch).

    ``groups`` names each rank's group, in rank order. All in one group: every rank (HSDP is FSDP
    there); no two neighbours sharing one: 1 (every rank replicates the whole state)."""
    n = len(groups)
    for size in range(n, 0, -1):
        if n % size == 0 and all(len(set(groups[i:i + size])) == 1 for i in range(0, n, size)):
            return size
    return 1
