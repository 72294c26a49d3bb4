"""Summary numbers per sweep on real nccl-tests output and on our own job documents.

The nccl-tests logs are verbatim public copies (tests/data/nccl-tests, tests/data/diagnose);
our documents come from tests/factories.py. Edge cases are CONSTRUCTED and say so.
"""

from __future__ import annotations

import copy

import pytest
from diagnose.fixtures import NCCL_TESTS, RUN_293_GDR, RUN_293_NPS4
from factories import collective_doc
from shardscope.diagnose.inputs import group_repeats, load_sweep, sweep_from_document
from shardscope.diagnose.sweep_summary import normalise_rows, spread, summarize, t95
from shardscope.errors import UserError

GEN2 = NCCL_TESTS / "all_reduce_perf-gen2-2x8-h100-16ranks.txt"
GEN3 = NCCL_TESTS / "all_reduce_perf-gen3-2x-gb10.txt"


def _summary(path):
    sweep = load_sweep(str(path))
    return summarize(sweep.rows, sweep.op, sweep.world_size)


def test_plateau_of_the_2x8_h100_log_is_the_top_sizes_not_the_footer_average():
    s = _summary(GEN2)
    # Printed busbw: 318.4/318.5 at 2 GiB, 334-339 at 4-8 GiB; the footer says 70.742.
    assert s.plateau_busbw_gbps == pytest.approx(334.3, abs=1.0)
    # Sizes are compared on their median over repeats: at 8 GiB out-of-place 338.82, in-place ~337.4.
    assert s.max_busbw_gbps == pytest.approx(338.1, abs=0.1)
    assert min(s.plateau_sizes_bytes) >= 4 << 30
    assert s.plateau_busbw_gbps > 4 * 70.742
    assert s.size_to_90pct_bytes == 2 << 30  # 318.5 >= 0.9 * 334.3, 298.8 at 1 GiB is not
    # Latency floor: the smallest time among the three smallest sizes (8, 16, 32 B), in-place 122.3 us.
    assert s.latency_floor_sizes_bytes == [8, 16, 32]
    assert s.latency_floor_us == pytest.approx(122.3)
    assert s.latency_floor_is_latency


def test_in_place_and_out_of_place_rows_are_two_runs_with_a_confidence_interval():
    s = _summary(GEN2)
    assert len(s.runs) == 2 and {r.rsplit(":", 1)[1] for r in s.runs} == {"in_place", "out_of_place"}
    ci = s.plateau_spread
    assert ci.n == 2 and ci.ci95_low < s.plateau_busbw_gbps < ci.ci95_high
    big = next(p for p in s.per_size if p["size_bytes"] == 8 << 30)
    assert big["repeats"] == 2 and big["busbw_ci95_gbps"][0] < big["busbw_median_gbps"] < big["busbw_ci95_gbps"][1]


def test_a_truncated_sweep_has_no_plateau_and_says_why():
    s = _summary(GEN3)  # verbatim, cut after 64 KiB
    assert s.plateau_busbw_gbps is None and s.size_to_90pct_bytes is None
    assert any("65536 B" in note and "no plateau" in note for note in s.notes)
    assert s.latency_floor_us == pytest.approx(30.33)


def test_low_reference_plateaus_and_floors():
    gdr, nps4 = _summary(RUN_293_GDR), _summary(RUN_293_NPS4)
    assert gdr.plateau_busbw_gbps == pytest.approx(6.42, abs=0.02)
    assert nps4.plateau_busbw_gbps == pytest.approx(8.83, abs=0.05)
    assert gdr.size_to_90pct_bytes == nps4.size_to_90pct_bytes == 4 << 20
    assert gdr.latency_floor_us == pytest.approx(16.66)


def test_our_worker_documents_are_summarised_the_same_way():
    doc = collective_doc("all_reduce", seconds_per_byte=1e-9)  # 1 KiB..1 MiB, 10 us floor
    sweep = sweep_from_document(doc, "doc.json")
    s = summarize(sweep.rows, sweep.op, sweep.world_size)
    assert s.latency_floor_us == pytest.approx(10 + 1024 * 1e-3, rel=1e-6)
    # busbw 0.963 GB/s at 256 KiB is within 5% of 0.990 at 1 MiB; 0.63 at 16 KiB is not.
    assert s.plateau_sizes_bytes == [1 << 18, 1 << 20]
    assert s.plateau_spread.ci95_low is None  # one run: no interval


def test_repeated_documents_of_one_job_are_grouped_and_give_an_interval():
    docs = [collective_doc("all_gather", seconds_per_byte=k) for k in (1.0e-9, 1.1e-9, 0.9e-9)]
    sweeps = [sweep_from_document(d, f"rep{i}.json") for i, d in enumerate(docs)]
    groups = group_repeats(sweeps + [sweep_from_document(collective_doc("all_gather", host="hostB"), "other.json")])
    assert [len(g) for g in groups] == [3, 1]
    rows = [r for s in groups[0] for r in s.rows]
    s = summarize(rows, "all_gather", 2)
    assert s.plateau_spread.n == 3
    assert s.plateau_spread.ci95_low < s.plateau_spread.mean < s.plateau_spread.ci95_high


def test_t_quantiles_and_spread():
    assert t95(1) == pytest.approx(12.706) and t95(30) == pytest.approx(2.042) and t95(100) == 1.96
    sp = spread([1.0, 2.0, 3.0])
    assert sp.mean == 2.0 and sp.stdev == 1.0
    assert sp.ci95_high - sp.mean == pytest.approx(4.303 / 3 ** 0.5)


def test_constructed_bad_rows_are_user_errors():
    # CONSTRUCTED: rows without times, and an unknown op.
    with pytest.raises(UserError, match="numeric size_bytes or time_s"):
        normalise_rows([{"size_bytes": 1024}], "all_reduce", 2, "x.json")
    with pytest.raises(UserError, match="unknown collective"):
        normalise_rows([], "allreduce", 2, "x.json")
    with pytest.raises(UserError, match="no measured rows"):
        summarize([], "all_reduce", 2)


def test_document_without_rows_is_a_user_error():
    doc = copy.deepcopy(collective_doc())
    doc["rows"] = []
    with pytest.raises(UserError, match="has no rows"):
        sweep_from_document(doc, "empty.json")
