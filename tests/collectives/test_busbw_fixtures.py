"""Every printed algbw and busbw of every real nccl-tests log in tests/data/nccl-tests, reproduced
from its size, its printed time and the world size with shardscope.contracts.factors.

The table is read here with a few lines of independent code (not the importer), so this
checks factors.py against nccl-tests itself. nccl-tests computes bandwidths from the
unrounded time and prints the time with 2, 1 or 0 decimals (by magnitude) and bandwidths
with 2 decimals, so "to printed precision" means: some time that prints as the printed time
gives bandwidths that print as the printed ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

from shardscope.contracts.factors import algbw_gbps, busbw_gbps
from shardscope.collectives.nccl_tests import read_nccl_tests

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-tests"
FIXTURES = sorted(DATA.glob("*.txt"))
RANK = re.compile(r"^#\s*Rank\s+(\d+)\s")
# Which op each fixture measured (SOURCES.md); the file names say so too.
OP_OF = {"all_reduce_perf-gen2-2x8-h100-16ranks.txt": "all_reduce",
         "all_reduce_perf-gen3-2x-gb10.txt": "all_reduce",
         "alltoall-gen1-header-8x-a100.txt": "all_to_all"}
HALF_CENT = 0.005  # half a unit in the last printed place of a bandwidth
SLACK = 1e-9  # float representation of the printed decimals


@dataclass(frozen=True)
class Printed:
    """One placement group of one printed line: the raw tokens nccl-tests wrote."""

    fixture: str
    size_bytes: int
    mode: str
    time_us: str
    algbw: str
    busbw: str


def _table(path: Path) -> tuple[int, list[Printed]]:
    """World size (distinct Rank lines) and the printed groups of every data line of a fixture."""
    lines = path.read_text().splitlines()
    ranks = {int(m[1]) for line in lines if (m := RANK.match(line))}
    printed = []
    for line in lines:
        tokens = line.split()
        if len(tokens) < 13 or not tokens[0].isdigit():
            continue
        for mode, at in (("out_of_place", 5), ("in_place", 9)):
            printed.append(Printed(path.name, int(tokens[0]), mode, tokens[at], tokens[at + 1], tokens[at + 2]))
    return len(ranks), printed


def _half_ulp(text: str) -> float:
    """Half a unit in the last printed decimal place of ``text`` (0.5 for ``12646``, 0.005 for ``35.15``)."""
    return 0.5 * 10.0 ** Decimal(text).as_tuple().exponent


def _interval(op: str, world_size: int, row: Printed, busbw: bool) -> tuple[float, float]:
    """The bandwidths (GB/s) of all times that print as ``row.time_us``, from factors.py."""
    t_us, half = float(row.time_us), _half_ulp(row.time_us)
    fast_s, slow_s = (t_us - half) / 1e6, (t_us + half) / 1e6
    if busbw:
        return busbw_gbps(op, world_size, row.size_bytes, slow_s), busbw_gbps(op, world_size, row.size_bytes, fast_s)
    return algbw_gbps(row.size_bytes, slow_s), algbw_gbps(row.size_bytes, fast_s)


def _prints_as(printed: str, interval: tuple[float, float]) -> bool:
    """Whether some value in ``interval`` rounds to the printed 2-decimal value."""
    value = float(printed)
    low, high = interval
    return high >= value - HALF_CENT - SLACK and low <= value + HALF_CENT + SLACK


TABLES = {path.name: _table(path) for path in FIXTURES}
ROWS = [(world_size, row) for world_size, rows in TABLES.values() for row in rows]


def test_every_fixture_is_covered() -> None:
    assert set(OP_OF) == {path.name for path in FIXTURES}, "a new fixture needs its op in OP_OF"
    counts = {name: len(rows) for name, (_, rows) in TABLES.items()}
    # 31 lines x 2 placements (16 ranks), 4 lines x 2 (2 ranks); the generation-1 file is a header only.
    assert counts == {"all_reduce_perf-gen2-2x8-h100-16ranks.txt": 62, "all_reduce_perf-gen3-2x-gb10.txt": 8,
                      "alltoall-gen1-header-8x-a100.txt": 0}
    assert {name: ws for name, (ws, _) in TABLES.items()} == {
        "all_reduce_perf-gen2-2x8-h100-16ranks.txt": 16, "all_reduce_perf-gen3-2x-gb10.txt": 2,
        "alltoall-gen1-header-8x-a100.txt": 8}


@pytest.mark.parametrize(("world_size", "row"), ROWS, ids=[f"{r.fixture[:20]}-{r.size_bytes}-{r.mode}" for _, r in ROWS])
def test_printed_algbw_and_busbw_are_reproduced(world_size: int, row: Printed) -> None:
    op = OP_OF[row.fixture]
    assert _prints_as(row.algbw, _interval(op, world_size, row, busbw=False)), (row, _interval(op, world_size, row, False))
    assert _prints_as(row.busbw, _interval(op, world_size, row, busbw=True)), (row, _interval(op, world_size, row, True))


@pytest.mark.parametrize(("world_size", "row"), ROWS, ids=[f"{r.fixture[:20]}-{r.size_bytes}-{r.mode}" for _, r in ROWS])
def test_the_printed_time_alone_is_within_one_printed_unit(world_size: int, row: Printed) -> None:
    # Simpler reading of the same fact: from the printed time, busbw is off by at most 0.01.
    op = OP_OF[row.fixture]
    t_s = float(row.time_us) / 1e6
    assert abs(round(busbw_gbps(op, world_size, row.size_bytes, t_s), 2) - float(row.busbw)) <= 0.01 + SLACK
    assert abs(round(algbw_gbps(row.size_bytes, t_s), 2) - float(row.algbw)) <= 0.01 + SLACK


def test_a_wrong_factor_would_be_caught() -> None:
    # The check can fail: (n-1)/n (all_gather's factor) instead of 2(n-1)/n for the 16-rank all_reduce
    # breaks every row whose busbw is large enough to tell them apart.
    world_size, rows = TABLES["all_reduce_perf-gen2-2x8-h100-16ranks.txt"]
    telling = [row for row in rows if float(row.busbw) >= 1.0]
    assert len(telling) == 34
    assert not any(_prints_as(row.busbw, _interval("all_gather", world_size, row, busbw=True)) for row in telling)
    # ... and so does a world size off by one (15 ranks), at the large sizes where busbw has 5 digits.
    big = [row for row in telling if row.size_bytes >= 2**30]
    assert big and not any(_prints_as(row.busbw, _interval("all_reduce", 15, row, busbw=True)) for row in big)


@pytest.mark.parametrize("name", ["all_reduce_perf-gen2-2x8-h100-16ranks.txt", "all_reduce_perf-gen3-2x-gb10.txt"])
def test_the_importer_reads_the_same_numbers(name: str) -> None:
    # The importer and this file's reader agree row by row (same sizes, times and printed bandwidths).
    _, rows = TABLES[name]
    imported = read_nccl_tests(DATA / name).rows
    assert [(r.size_bytes, r.mode, float(r.time_us) / 1e6, float(r.algbw), float(r.busbw)) for r in rows] == [
        (i["size_bytes"], i["placement_mode"], pytest.approx(i["time_s"], rel=1e-12), i["algbw_gbps"], i["busbw_gbps"])
        for i in imported
    ]
