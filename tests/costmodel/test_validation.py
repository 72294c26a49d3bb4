"""Predictions against published nccl-tests bus bandwidths (tests/data/published/, with sources).

Target: every in-scope record within ±25% of its published peak busbw. The model's constants
come from NCCL's source and datasheets (shardscope.costmodel.hardware), not from these records.
"""

from __future__ import annotations

import json

import pytest
from costmodel.published import DATA, published_records, record_prediction

TOLERANCE = json.loads((DATA / "published" / "collectives.json").read_text())["tolerance"]
IN_SCOPE = [r for r in published_records() if r["in_scope"]]


def test_every_record_names_its_source() -> None:
    for record in published_records():
        assert record["source"], record["id"]
        assert record["quote"], record["id"]
        assert record["busbw_gbps"] > 0, record["id"]
        if not record["in_scope"]:
            assert record.get("reason_out_of_scope"), f"{record['id']}: out of scope without a reason"


def test_ids_are_unique_and_cover_the_machine_classes() -> None:
    ids = [r["id"] for r in published_records()]
    assert len(ids) == len(set(ids))
    described = " ".join(ids)
    for machine in ("h100-sxm", "h200", "a100-sxm", "h800", "nv12-pair", "pcie", "x8"):
        assert machine in described


@pytest.mark.parametrize("record", IN_SCOPE, ids=[r["id"] for r in IN_SCOPE])
def test_prediction_within_tolerance_of_published(record: dict) -> None:
    predicted = record_prediction(record)
    error = predicted / record["busbw_gbps"] - 1
    assert abs(error) <= TOLERANCE, (f"{record['id']}: predicted {predicted:.1f} GB/s, published {record['busbw_gbps']} GB/s "
                                     f"({error:+.0%}; source {record['source']})")


def test_validation_table(capsys: pytest.CaptureFixture[str]) -> None:
    """The whole table at once, printed for the report (pytest -s shows it)."""
    lines = [f"{'record':<30} {'published':>9} {'modeled':>9} {'error':>7}"]
    worst = 0.0
    for record in IN_SCOPE:
        predicted = record_prediction(record)
        error = predicted / record["busbw_gbps"] - 1
        worst = max(worst, abs(error))
        lines.append(f"{record['id']:<30} {record['busbw_gbps']:>9.1f} {predicted:>9.1f} {error:>+7.1%}")
    with capsys.disabled():
        print("\n" + "\n".join(lines) + f"\nworst |error| {worst:.1%} over {len(IN_SCOPE)} records")
    assert worst <= TOLERANCE
