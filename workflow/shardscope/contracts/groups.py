"""Rank groups of a job: how many consecutive ranks share one NVLink island, node or switch.

Shared by the planner (which plans ``hsdp`` and ``zero3_hpz`` with that shard size) and the cost
model (which times their collectives inside one group), so both cut the ranks the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["gpu_islands", "hsdp_shard_size"]


def gpu_islands(islands: Iterable[Iterable[int]], gpus: Sequence[int]) -> list[int]:
    """Each of ``gpus``' island (its index in ``islands``), in ``gpus`` order: the groups :func:`hsdp_shard_size` cuts.

    A GPU in no island is a group of its own (an index past every island's).
    """
    islands = [list(island) for island in islands]
    index = {g: i for i, island in enumerate(islands) for g in island}
    return [index.get(g, len(islands) + k) for k, g in enumerate(gpus)]


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
