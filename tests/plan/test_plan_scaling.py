"""Planning many GPUs (issue 35): the fast paths give exactly the answers of the per-pair code they replace."""

from __future__ import annotations

import itertools
from dataclasses import replace
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
    fast_switches = [machine._switch_groups(a + b[:3]) for a, b in cuts]
    slow_machine = replace(machine)  # the same machine without its caches (build_machine would return this one)
    assert slow_machine is not machine and "_pair_index" not in slow_machine.__dict__
    monkeypatch.setattr("shardscope.costmodel.machine._pair_index", lambda machine, members: None)
    slow = [(slow_machine.cut_gbps(a, b, nv), socket_groups(slow_machine, gpus)) for a, b in cuts for nv in (True, False)]
    assert fast == slow
    assert fast_switches == [slow_machine._switch_groups(a + b[:3]) for a, b in cuts]


def test_the_same_document_builds_one_machine_and_another_document_its_own() -> None:
    doc = _islands(16, 4)
    first = build_machine(doc)
    assert build_machine(dict(doc)) is first  # equal content, another object
    assert build_machine(doc, gpu_name="NVIDIA A100-SXM4-80GB") is not first
    doc["gpus"][0]["numa_node"] = 1
    assert build_machine(doc) is not first


def test_a_shape_is_the_same_pair_by_pair_and_from_the_matrices(monkeypatch: pytest.MonkeyPatch) -> None:
    view = placement.View(_islands(40, 4))
    sets = [tuple(range(0, 40, 2)), tuple(range(3, 24)),
            (0, 1, 2, 3, 20, 21, 22, 23, 24, 30, 31, 32, 33, 34, 35, 36, 38)]
    by_arrays = [view.shape(d) for d in sets]
    monkeypatch.setattr(placement, "SMALL_SET", 10**6)
    assert [view.shape(d) for d in sets] == by_arrays


def test_grown_sets_asked_in_any_order_match_one_at_a_time() -> None:
    view = placement.View(_islands(24, 3))
    for n in (13, 5, 8, 2, 13):
        assert placement._grown_sets(view, n) == {placement._grow(view, seed, n) for seed in view.gpus}


def test_one_seed_of_each_kind_places_as_every_seed_would(monkeypatch: pytest.MonkeyPatch) -> None:
    """A board of alike NVLink pairs: scoring the lowest pair of each kind finds the placement all pairs would."""
    from shardscope.costmodel import placement as costmodel_placement

    doc = _islands(96, 2)
    kinds = {n: costmodel_placement.best_placement(build_machine(doc), n) for n in (2, 3, 4, 8, 24)}
    monkeypatch.setattr(costmodel_placement, "_one_of_each_kind", lambda machine, groups: groups)
    every = replace(build_machine(doc))
    assert {n: costmodel_placement.best_placement(every, n) for n in kinds} == kinds


def test_a_cut_of_a_large_ring_answers_as_the_plain_cut() -> None:
    """The ring's own index (its members' order and rows, built once per ring) gives the plain cut's capacity."""
    from shardscope.costmodel.machine import _pair_index, _RingIndex

    machine = build_machine(_islands(40, 4))
    members = [g for g in machine.gpus if g % 3 != 1][:20]
    ring = _RingIndex(_pair_index(machine, members), members)
    sides = [(g,) for g in members] + [tuple(members[i:i + 4]) for i in range(0, 20, 4)] + [tuple(members[:10])]
    for side in sides:
        other = [g for g in members if g not in side]
        for nv in (True, False):
            assert machine.cut_gbps(side, other, nv, ring) == machine.cut_gbps(side, other, nv), side
