"""The step model's calibrations in the results database: written by ``calibrate-step --store``, read by ``advise`` and the report.

Rows follow :mod:`shardscope.results.schemas_calibration`: a step calibration is one row per
measured run it was fitted on, its collective check one row per op group. Writing goes through
the store's private copy (:func:`shardscope.results.store.updating`), so a refused or failed write
leaves the database as it was. Reading rebuilds one calibration as a plain dict, the shape
``advise --calibration-db`` and the report's ledger section use.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

STEP_TABLE = "step_calibrations"
CHECK_TABLE = "collective_calibration_checks"


def store_calibration_rows(db: str | os.PathLike[str], step_rows: Sequence[dict[str, Any]],
                           check_rows: Sequence[dict[str, Any]] = ()) -> dict[str, int]:
    """Append validated calibration rows to ``db`` (an existing results database), atomically; rows written per table."""
    from shardscope.errors import UserError
    from shardscope.results.ddl import upgrade
    from shardscope.results.store import insert_frame, problem_report, updating, validate_frame

    path = Path(db)
    if not path.is_file():
        raise UserError(f"--db {path}: no results database there to store the calibration in")
    frames, problems = {}, []
    for table, rows in ((STEP_TABLE, step_rows), (CHECK_TABLE, check_rows)):
        if rows:
            frame, found = validate_frame(table, list(rows), f"{table} rows")
            problems += found
            frames[table] = frame
    if problems:
        raise UserError(problem_report(problems, "the calibration"))
    with updating(path) as con:
        con.execute("BEGIN TRANSACTION")
        upgrade(con)
        for table, frame in frames.items():
            ids = sorted(set(frame["calibration_id"]))
            placeholders = ", ".join("?" for _ in ids)
            con.execute(f"DELETE FROM {table} WHERE calibration_id IN ({placeholders})", ids)  # the same fit stored again
            insert_frame(con, table, frame)
        con.execute("COMMIT")
    return {table: len(frame) for table, frame in frames.items()}


def _tables(con: Any) -> set[str]:
    return {name for (name,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}


def _dicts(con: Any, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    cur = con.execute(sql, list(params))
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def latest_step_calibration(con: Any, model: str | None = None, world_size: int | None = None) -> dict[str, Any] | None:
    """The newest stored step calibration (of ``model`` on ``world_size`` ranks when given) as a dict, or None.

    Keys: calibration_id, created_at, host, model, world_size, dtype, micro_batch, seq_len,
    effective_flops, overlap, call_overhead_s, host_call_s (0 in a calibration stored without it), mfu, run_ids, strategies (per run: strategy, run_id,
    measured_s, modeled_s, held_out_s, wire_bytes, measured_ci95_s) and ranking (agree, pairs_ranked, within_noise,
    noise, disagree).
    """
    from shardscope.results.tablebase import iso_text

    if STEP_TABLE not in _tables(con):
        return None
    found = con.execute(
        f"SELECT calibration_id FROM {STEP_TABLE} WHERE (? IS NULL OR model = ?) AND (? IS NULL OR world_size = ?) "
        "ORDER BY created_at DESC, calibration_id DESC LIMIT 1", [model, model, world_size, world_size]).fetchall()
    if not found:
        return None
    rows = _dicts(con, f"SELECT * FROM {STEP_TABLE} WHERE calibration_id = ? ORDER BY strategy, run_id", [found[0][0]])
    first = rows[0]
    keys = ("calibration_id", "created_at", "host", "model", "world_size", "dtype", "micro_batch", "seq_len",
            "overlap", "call_overhead_s", "mfu")
    return {**{k: first[k] for k in keys}, "created_at": iso_text(first["created_at"]),
            "effective_flops": first["effective_flops_per_s"],
            "host_call_s": first.get("host_call_s") or 0.0,
            "run_ids": [r["run_id"] for r in rows],
            "strategies": [{"strategy": r["strategy"], "run_id": r["run_id"], "measured_s": r["measured_s"],
                            "modeled_s": r["modeled_s"], "held_out_s": r["held_out_s"], "wire_bytes": r["wire_source"],
                            "measured_ci95_s": ([r["measured_ci95_low_s"], r["measured_ci95_high_s"]]
                                                if r["measured_ci95_low_s"] is not None else None)}
                           for r in rows],
            "ranking": {"agree": first["ranking_agree"], "pairs_ranked": first["ranking_pairs"],
                        "within_noise": first["ranking_within_noise"], "noise": first["ranking_noise"],
                        "disagree": [d for d in (first["ranking_disagree"] or "").split("\n") if d]}}


def latest_collective_check(con: Any) -> tuple[list[dict[str, Any]], str | None]:
    """The newest stored check of the collective model after calibration on one sweep: (rows per op group, what it was fitted on)."""
    if CHECK_TABLE not in _tables(con):
        return [], None
    rows = _dicts(con, f"""
        SELECT * FROM {CHECK_TABLE} WHERE calibration_id = (
            SELECT calibration_id FROM {CHECK_TABLE} ORDER BY created_at DESC, calibration_id DESC LIMIT 1)
        ORDER BY op_group = 'held out', op_group""")
    return rows, (rows[0]["calibrated_on"] if rows else None)


def stored_step_calibration(db: str | os.PathLike[str], model: str | None = None,
                            world_size: int | None = None) -> dict[str, Any] | None:
    """:func:`latest_step_calibration` of the database file ``db`` (opened read-only)."""
    from shardscope.results.store import connect_readonly

    with connect_readonly(db) as con:
        return latest_step_calibration(con, model, world_size)
