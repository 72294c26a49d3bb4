"""Step calibration: the compute rate and overlap fitted to measured training runs, stored, and used by advise."""

from __future__ import annotations

import argparse
import math
import shutil

import duckdb
import pytest
from shardscope.costmodel.step import RecordedCollective
from shardscope.costmodel.step_calibration import (
    StepSample,
    _modeled,
    calibrate_steps,
    latest_calibration,
    store_calibrations,
)

STRATEGIES = ("ddp", "fsdp", "fsdp_grad_op", "zero1", "zero3")
SIZES = [1024 * 4**k for k in range(7)]
ALPHA_S, GBPS = 50e-6, 1.0


def _truth_timer(op: str, size: int) -> float:
    return ALPHA_S + size / (GBPS * 1e9)


#: Python calls per step a synthetic run records (ZeRO-3's per-submodule hooks make the most).
HOST_CALLS = {"ddp": 2000, "fsdp": 6000, "fsdp_grad_op": 5200, "zero1": 2600, "zero3": 15000}


def _synthetic_db(path, rate: float, overlap: float, recorded: bool, per_call: float = 0.002,
                  per_host: float | None = None) -> None:
    """A database with only the columns the calibration reads: a sweep per op and one measured run per strategy;
    with ``per_host`` each run also records :data:`HOST_CALLS` and its step includes that many calls' seconds."""
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE runs (run_id VARCHAR, source VARCHAR, host VARCHAR, measured_at VARCHAR, transport VARCHAR)")
    con.execute("CREATE TABLE collectives (run_id VARCHAR, op VARCHAR, world_size INTEGER, size_bytes BIGINT, time_s DOUBLE)")
    con.execute("CREATE TABLE training_runs (run_id VARCHAR, strategy VARCHAR, model VARCHAR, world_size INTEGER, dtype VARCHAR, "
                "micro_batch INTEGER, seq_len INTEGER, outcome VARCHAR, median_step_time_s DOUBLE, reduce_dtype VARCHAR"
                + (", host_calls_per_step BIGINT)" if per_host is not None else ")"))
    con.execute("CREATE TABLE training_comm (run_id VARCHAR, op VARCHAR, dtype VARCHAR, calls INTEGER, size_bytes BIGINT, "
                "volume_bytes BIGINT)")
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        con.execute("INSERT INTO runs VALUES (?, 'measured', 'box', '2026-01-01', 'default')", [f"sweep-{op}"])
        for size in SIZES:
            con.execute("INSERT INTO collectives VALUES (?, ?, 2, ?, ?)", [f"sweep-{op}", op, size, _truth_timer(op, size)])
    for strategy in STRATEGIES:
        comm = (RecordedCollective("all_reduce" if strategy in ("ddp", "zero1") else "reduce_scatter", 3, 400_000),
                RecordedCollective("all_gather", 6, 900_000)) if recorded and strategy != "ddp" else ()
        host = HOST_CALLS[strategy] if per_host is not None else None
        sample = StepSample(f"run-{strategy}", strategy, "tiny", 2, "float32", 2, 64, 1.0, "float32", "box", comm,
                            host_calls=host)
        measured = _modeled(sample, rate, overlap, _truth_timer, per_call, per_host or 0.0)
        con.execute("INSERT INTO runs VALUES (?, 'measured', 'box', '2026-01-02', 'default')", [sample.run_id])
        con.execute("INSERT INTO training_runs VALUES (?, ?, 'tiny', 2, 'float32', 2, 64, 'ok', ?, 'float32'"
                    + (", ?)" if host is not None else ")"), [sample.run_id, strategy, measured, *([host] if host else [])])
        for c in comm:
            con.execute("INSERT INTO training_comm VALUES (?, ?, 'float32', ?, ?, ?)",
                        [sample.run_id, c.op, c.calls, c.size_bytes, c.size_bytes])
    con.close()


@pytest.mark.parametrize("recorded", [False, True])
def test_the_fit_recovers_the_rate_and_overlap_the_runs_were_made_with(tmp_path, recorded) -> None:
    db = tmp_path / "s.duckdb"
    _synthetic_db(db, rate=2e9, overlap=0.3, recorded=recorded)
    with duckdb.connect(str(db), read_only=True) as con:
        found, notes = calibrate_steps(con)
    assert notes == [] and len(found) == 1
    c = found[0]
    assert c.effective_flops == pytest.approx(2e9, rel=0.03) and c.overlap == pytest.approx(0.3, abs=0.051)
    assert c.call_overhead_s == pytest.approx(0.002, rel=0.1)
    assert c.host_call_s == 0.0  # no run recorded a Python-call count: no host term
    assert c.mfu is None  # CPU processes: no peak, no MFU
    assert c.worst_error < 0.02 and math.isfinite(c.held_out_worst_error)  # held out: reported (4 runs, 3 parameters)
    assert c.ranking["disagree"] == [] and sorted(c.run_ids) == sorted(f"run-{s}" for s in STRATEGIES)
    wire = {s["strategy"]: s["wire_bytes"] for s in c.strategies}
    assert wire["ddp"].startswith("modeled (float32")
    assert wire["zero3"] == ("recorded" if recorded else "modeled (float32 gradients)")


def test_the_fit_recovers_the_seconds_per_recorded_python_call(tmp_path) -> None:
    """Runs whose steps include 2 us per recorded Python call: the fit finds it beside the rate, overlap and
    per-collective-call overhead, and the modeled steps without it would miss ZeRO-3 by far."""
    db = tmp_path / "s.duckdb"
    _synthetic_db(db, rate=2e9, overlap=0.3, recorded=True, per_host=2e-6)
    with duckdb.connect(str(db), read_only=True) as con:
        found, notes = calibrate_steps(con)
    c = found[0]
    assert c.host_call_s == pytest.approx(2e-6, rel=0.05) and c.effective_flops == pytest.approx(2e9, rel=0.05)
    assert c.call_overhead_s == pytest.approx(0.002, rel=0.1) and c.worst_error < 0.02
    assert {s["strategy"]: s["host_calls"] for s in c.strategies} == HOST_CALLS
    zero3 = next(s for s in c.strategies if s["strategy"] == "zero3")
    sample = StepSample("z", "zero3", "tiny", 2, "float32", 2, 64, 1.0, "float32", "box",
                        (RecordedCollective("reduce_scatter", 3, 400_000), RecordedCollective("all_gather", 6, 900_000)))
    without = _modeled(sample, c.effective_flops, c.overlap, _truth_timer, c.call_overhead_s, c.host_call_s)
    assert zero3["measured_s"] - without == pytest.approx(HOST_CALLS["zero3"] * 2e-6, rel=0.05)
    assert c.assumptions().host_call_s == c.host_call_s


def _calibrated_after(db, change: str, recorded: bool = False) -> tuple[list, list[str]]:
    """The calibration of a synthetic database (rate 2e9, overlap 0.3) after one SQL ``change`` to it."""
    _synthetic_db(db, rate=2e9, overlap=0.3, recorded=recorded)
    with duckdb.connect(str(db)) as con:
        con.execute(change)
    with duckdb.connect(str(db), read_only=True) as con:
        return calibrate_steps(con)


def test_too_few_strategies_or_no_sweep_give_a_note_not_a_calibration(tmp_path) -> None:
    found, notes = _calibrated_after(tmp_path / "s.duckdb", "DELETE FROM training_runs WHERE strategy NOT IN ('ddp', 'zero3')")
    assert found == [] and notes == ["tiny on 2 ranks (box): 2 strategies measured, a calibration needs 4"]
    found, notes = _calibrated_after(tmp_path / "t.duckdb", "DELETE FROM collectives")
    assert found == [] and "no measured collective sweep" in notes[0]


def test_stored_calibrations_keep_their_runs_and_label_advise(module_db, tmp_path) -> None:
    from shardscope.costmodel.commands import _step_constants
    from shardscope.results.store import connect_readonly

    db = tmp_path / "copy.duckdb"
    shutil.copy(module_db, db)
    with connect_readonly(db) as con:
        found, _ = calibrate_steps(con)
    assert found, "the module database has five strategies of one job and the sweeps at its world size"
    store_calibrations(str(db), found, created_at="2026-01-01T00:00:00+00:00")
    stored = latest_calibration(db, found[0].model, found[0].world_size)
    with connect_readonly(db) as con:
        measured = {r for (r,) in con.execute("SELECT run_id FROM training_runs").fetchall()}
        from shardscope.results.ddl import schema_problems

        assert schema_problems(con) == []  # tables of the schema: `collect` still takes the database
        stored_rows = con.execute("SELECT count(*), count(DISTINCT calibration_id) FROM step_calibrations").fetchall()[0]
    assert stored_rows == (len(found[0].strategies), 1)  # one row per run the calibration was fitted on
    store_calibrations(str(db), found, created_at="2026-01-01T00:00:00+00:00")  # the same fit again replaces its rows
    with connect_readonly(db) as con:
        assert con.execute("SELECT count(*) FROM step_calibrations").fetchall()[0][0] == len(found[0].strategies)
    assert latest_calibration(db, "gpt2-small") is None
    assert stored["overlap"] == pytest.approx(found[0].overlap) and set(stored["run_ids"]) <= measured
    assert len(stored["run_ids"]) == len(found[0].strategies)

    def args(**kw):
        return argparse.Namespace(**{"mfu": None, "overlap": None, "calibration_db": None, "model": found[0].model,
                                     "gpus": found[0].world_size, **kw})

    from shardscope.costmodel.step import STEP_DEFAULTS_LABEL

    (mfu, overlap), labels = _step_constants(args())
    # no calibration: None, the step model's own defaults (the compute curve, each strategy's schedule)
    assert (mfu, overlap) == (None, None) and labels == STEP_DEFAULTS_LABEL
    (mfu, overlap), labels = _step_constants(args(calibration_db=str(db)))
    assert overlap == pytest.approx(found[0].overlap) and labels[1].startswith(f"calibrated from {len(stored['run_ids'])} measured runs")
    assert mfu is None and "no known peak" in labels[0]  # CPU runs: the rate does not transfer to a GPU's MFU
    (mfu, overlap), labels = _step_constants(args(calibration_db=str(db), overlap=0.2))
    assert overlap == 0.2 and labels[1] == "given"


def test_a_calibration_the_schema_refuses_leaves_the_database_as_it_was(module_db, tmp_path) -> None:
    from shardscope.costmodel.step_calibration import calibration_rows
    from shardscope.errors import UserError
    from shardscope.results.calibrations import store_calibration_rows
    from shardscope.results.store import connect_readonly

    db = tmp_path / "copy.duckdb"
    shutil.copy(module_db, db)
    with connect_readonly(db) as con:
        found, _ = calibrate_steps(con)
    rows = calibration_rows(found, "2026-01-01T00:00:00+00:00")
    before = db.read_bytes()
    with pytest.raises(UserError, match="overlap"):
        store_calibration_rows(db, [{**rows[0], "overlap": 1.5}, *rows[1:]])
    assert db.read_bytes() == before
    with pytest.raises(UserError, match="no results database"):
        store_calibration_rows(tmp_path / "absent.duckdb", rows)


def test_runs_no_positive_rate_fits_get_a_note_not_a_broken_calibration(tmp_path) -> None:
    """Collectives timed 10,000 times slower than the runs could have spent on them: no compute rate explains the steps,
    so the job is not calibrated and a note says so (the step_calibration rule used to stop on a rate of 0)."""
    found, notes = _calibrated_after(tmp_path / "s.duckdb", "UPDATE collectives SET time_s = time_s * 1e4", recorded=True)
    assert found == []
    assert notes == ["tiny on 2 ranks (box): no positive compute rate fits the runs (all runs, without ddp, without "
                     "fsdp, without fsdp_grad_op, without zero3); not calibrated"]
