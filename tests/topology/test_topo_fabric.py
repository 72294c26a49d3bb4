"""Fabric classification: NVSwitch versus direct NVLink from each GPU's NVLink budget."""

from __future__ import annotations

import pytest

from shardscope.topology.model import (
    DEFAULT_NVLINK_BUDGET,
    Gpu,
    Link,
    Topology,
    classify_fabric,
    fabric_note,
    from_dict,
    max_nvlinks,
)


def _all_pairs(n: int, code: str, nvlinks: int) -> list[Link]:
    return [Link(a, b, code, nvlinks) for a in range(n) for b in range(a + 1, n)]


def _topology(names: list[str | None], links: list[Link]) -> Topology:
    return Topology(
        gpus=[Gpu(index=i, name=name) for i, name in enumerate(names)],
        links=links,
        numa_nodes=[],
        source={"method": "test"},
    )


@pytest.mark.parametrize(
    ("name", "budget"),
    [
        ("NVIDIA H100 80GB HBM3", 18),
        ("NVIDIA H200", 18),
        ("NVIDIA H20", 18),
        ("NVIDIA B200", 18),
        ("NVIDIA A100-SXM4-80GB", 12),
        ("NVIDIA A800-SXM4-80GB", 8),
        ("NVIDIA H800", 8),
        ("Tesla V100-SXM2-16GB", 6),
        ("Tesla P100-SXM2-16GB", 4),
        ("NVIDIA RTX A6000", 4),
        ("NVIDIA GeForce RTX 3090", 4),
        ("Some Future GPU", DEFAULT_NVLINK_BUDGET),
        (None, DEFAULT_NVLINK_BUDGET),
    ],
)
def test_nvlink_budget_by_name(name: str | None, budget: int) -> None:
    assert max_nvlinks(name) == budget


def test_more_links_than_a_gpu_has_means_a_switch() -> None:
    # 8 GPUs, NV18 to 7 peers each: 126 links per GPU, H100 has 18.
    assert classify_fabric(list(range(8)), _all_pairs(8, "NV18", 18)) == "nvswitch"
    # DGX A100: NV12 to 7 peers = 84 links, A100 has 12.
    assert classify_fabric(list(range(8)), _all_pairs(8, "NV12", 12), {i: 12 for i in range(8)}) == "nvswitch"


def test_full_mesh_within_budget_is_direct() -> None:
    # 4-GPU HGX A100: NV4 to 3 peers = 12 links, exactly the A100 budget.
    assert classify_fabric(list(range(4)), _all_pairs(4, "NV4", 4), {i: 12 for i in range(4)}) == "nvlink_mesh"


def test_budget_from_gpu_names_decides() -> None:
    # NV2 to 3 peers = 6 links: direct on V100 (6 links), impossible on P100 (4 links).
    links = _all_pairs(4, "NV2", 2)
    assert _topology(["Tesla V100-SXM2-16GB"] * 4, links).fabric == "nvlink_mesh"
    assert _topology(["Tesla P100-SXM2-16GB"] * 4, links).fabric == "nvswitch"


def test_two_gpus_cannot_tell_and_say_so_once() -> None:
    topology = _topology([None, None], [Link(0, 1, "NV4", 4)])
    assert topology.fabric == "nvlink_mesh"
    notes = [n for n in topology.notes if "cannot tell direct links from a switch" in n]
    assert len(notes) == 1
    again = from_dict(topology.to_dict())
    assert again.notes == topology.notes


def test_no_note_when_the_class_is_certain() -> None:
    assert fabric_note(list(range(8)), _all_pairs(8, "NV18", 18)) is None
    assert _topology([None] * 8, _all_pairs(8, "NV18", 18)).notes == []


def test_other_classes() -> None:
    assert classify_fabric([], []) == "cpu"
    assert classify_fabric([0], []) == "single"
    assert classify_fabric([0, 1], [Link(0, 1, "PHB")]) == "pcie"
    pairs = [Link(0, 1, "NV4", 4), Link(0, 2, "NODE"), Link(1, 2, "NODE")]
    assert classify_fabric([0, 1, 2], pairs) == "nvlink_islands"
    chain = [Link(0, 1, "NV1", 1), Link(0, 2, "SYS"), Link(1, 2, "NV1", 1)]
    assert classify_fabric([0, 1, 2], chain) == "nvlink_partial"


def test_fabric_override_wins_and_skips_the_note() -> None:
    topology = Topology(
        gpus=[Gpu(0), Gpu(1)],
        links=[Link(0, 1, "NV18", 18)],
        numa_nodes=[],
        source={},
        fabric_override="nvswitch",
    )
    assert topology.fabric == "nvswitch"
    assert topology.notes == []
