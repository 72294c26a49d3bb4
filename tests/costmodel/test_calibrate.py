"""Calibration: fit latency and bandwidth efficiency from measured rows on a known topology."""

from __future__ import annotations

import pytest
from costmodel.published import DATA, fixture_machine
from shardscope.costmodel.calibrate import (
    Calibration,
    calibrate,
    load_rows,
    rows_from_document,
)
from shardscope.costmodel.collectives import predict_collective
from shardscope.costmodel.sweep import job_for, predict_sweep
from shardscope.errors import UserError


def _algbw(op: str, n: int) -> float:
    return 100.0  # GB/s: a stand-in model


def test_recovers_known_latency_and_efficiency() -> None:
    rows = [{"op": "all_reduce", "world_size": 8, "size_bytes": s, "time_s": 20e-6 + s / (0.8 * 100e9)} for s in (2**k for k in range(10, 31))]
    fit = calibrate(rows, _algbw)["all_reduce"]
    assert fit.alpha_s == pytest.approx(20e-6, rel=1e-6)
    assert fit.efficiency == pytest.approx(0.8, rel=1e-6)
    assert fit.rms_relative_error < 1e-9
    assert fit.time_s(1e9, 100.0) == pytest.approx(20e-6 + 1e9 / 80e9)


def test_skips_bad_rows_and_needs_three_sizes() -> None:
    rows = [{"op": "all_reduce", "world_size": 8, "size_bytes": 1024, "time_s": 1e-5}, {"op": "all_reduce", "world_size": 1},
            {"op": "nope", "world_size": 8, "size_bytes": 1, "time_s": 1.0}, {"op": "all_reduce", "world_size": 8, "size_bytes": 8, "time_s": -1}]
    with pytest.raises(UserError, match="at least 3"):
        calibrate(rows, _algbw)


def test_calibration_validates() -> None:
    with pytest.raises(ValueError):
        Calibration("all_reduce", -1.0, 1.0, 5, 0.0)
    with pytest.raises(ValueError):
        Calibration("all_reduce", 0.0, 0.0, 5, 0.0)


def test_imported_nccl_tests_log_calibrates_the_h100_model() -> None:
    machine = fixture_machine("01-hgx-h200-nvswitch-nv18-12nics.txt", gpu="H100")
    rows = load_rows(str(DATA / "nccl-tests" / "all_reduce_perf-gen2-2x8-h100-16ranks.txt"))
    assert len(rows) == 62 and rows[0]["world_size"] == 16
    fit = calibrate(rows, lambda op, n: predict_collective(op, 1 << 40, job_for(machine, n)).algbw_gbps)["all_reduce"]
    assert 50e-6 < fit.alpha_s < 500e-6
    assert 0.3 < fit.efficiency < 1.5
    calibrated = predict_sweep(machine, ["all_reduce"], [16], [1 << 33], {"all_reduce": fit})[0][0]
    assert calibrated.algorithm.startswith("calibrated:")


def test_rows_from_result_documents() -> None:
    doc = {"kind": "collectives_import", "world_size": 4, "rows": [{"op": "all_reduce", "size_bytes": 8, "time_s": 1.0}]}
    assert rows_from_document(doc, "x")[0]["world_size"] == 4
    with pytest.raises(UserError):
        rows_from_document({"kind": "training"}, "x")
    with pytest.raises(UserError, match="not found"):
        load_rows("/nonexistent/rows.json")


def test_cpu_fabric_calibrates_from_our_own_collectives_results(tmp_path) -> None:
    """The CI machine has no GPU: its gloo placeholders are replaced by a fit to measured rows."""
    import json

    from factories import collective_doc
    from shardscope.costmodel.machine import build_machine

    path = tmp_path / "ar.json"
    path.write_text(json.dumps(collective_doc("all_reduce", world_size=2, seconds_per_byte=2e-9)))
    machine = build_machine({"gpus": [], "links": [], "fabric": "cpu"})
    fit = calibrate(load_rows(str(path)), lambda op, n: predict_collective(op, 1 << 40, job_for(machine, n)).algbw_gbps)["all_reduce"]
    assert fit.alpha_s == pytest.approx(10e-6, rel=1e-3)
    pred = predict_sweep(machine, ["all_reduce"], [2], [1 << 20], {"all_reduce": fit})[0][0]
    assert pred.time_s == pytest.approx(10e-6 + (1 << 20) * 2e-9, rel=1e-3)
