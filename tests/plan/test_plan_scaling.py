"""Planning many GPUs (issue 35): the fast paths give exactly the answers of the per-pair code they replace."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from shardscope.costmodel.machine import build_machine, socket_groups
from shardscope.plan import placement
from shardscope.topology.parse import parse_file

TOPO = Path(__file__).resolve().parents[1] / "data" / "topo"
FIXTURES = sorted(p.name for p in TOPO.glob("*.txt"))


def _islands(n: int, per_island: int = 4) -> dict[str, Any]:
    """n GPUs in NVLink islands of ``per_island``, NODE within each half, SYS across, a NUMA node per half."""
    from shardscope.topology.model import Gpu, Link, Topology

    half = n // 2
    links = [Link(a, b, "NV6", 6) if a // per_island == b // per_island
             else Link(a, b, "NODE" if (a < half) == (b < half) else "SYS")
             for a in range(n) for b in range(a + 1, n)]
    gpus = [Gpu(i, numa_node=int(i >= half)) for i in range(n)]
    return Topology(gpus=gpus, links=links, numa_nodes=[], source={"method": "test"}, accelerator="nvidia").to_dict()


@pytest.mark.parametrize("name", FIXTURES)
def test_all_seeds_grown_at_once_match_one_at_a_time(name: str) -> None:
    view = placement.View(parse_file(TOPO / name).to_dict())
    for n in range(2, len(view.gpus)):
        assert placement._grown_sets(view, n) == {placement._grow(view, seed, n) for seed in view.gpus}


def test_grown_sets_on_a_larger_machine_match() -> None:
    view = placement.View(_islands(24, 3))
    for n in (2, 5, 8, 13):
        assert placement._grown_sets(view, n) == {placement._grow(view, seed, n) for seed in view.gpus}


@pytest.mark.parametrize("name", FIXTURES)
def test_cut_capacity_and_sockets_match_the_per_pair_loops(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    machine = build_machine(parse_file(TOPO / name).to_dict())
    gpus = list(machine.gpus)
    cuts = [(list(side), [g for g in gpus if g not in side]) for k in range(1, len(gpus))
            for side in itertools.combinations(gpus, k)][:200]
    fast = [(machine.cut_gbps(a, b, nv), socket_groups(machine, gpus)) for a, b in cuts for nv in (True, False)]
    slow_machine = build_machine(parse_file(TOPO / name).to_dict())
    monkeypatch.setattr("shardscope.costmodel.machine._pair_index", lambda machine, members: None)
    slow = [(slow_machine.cut_gbps(a, b, nv), socket_groups(slow_machine, gpus)) for a, b in cuts for nv in (True, False)]
    assert fast == slow
