"""The report's Mistral-7B memory table: the seed's case per strategy, modeled whole peak, and measured where run.

The modeled rows are what the predictions stage stored (``memory_case_predictions``, case
``seed_mistral``: 8 GPUs of 80 GB, seq 4096, micro-batch 1, bf16, without and with full
activation checkpointing); a measured run of the same case (Mistral-7B, 8 ranks, seq 4096,
micro-batch 1) puts its peak beside them. Only queries: nothing is computed here.
"""

from __future__ import annotations

import duckdb
import pandas as pd

#: The columns of the report's table, in order.
COLUMNS = ("strategy", "peak_none_gb", "fits_none", "peak_full_gb", "fits_full", "capacity_gb", "measured_peak_gb",
           "measured_method", "measured_outcome")
GB_FORMATS = {"peak_none_gb": "{:.1f}", "peak_full_gb": "{:.1f}", "capacity_gb": "{:.0f}", "measured_peak_gb": "{:.1f}"}


def _has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = ?",
                            [name]).fetchone()[0])


def seed_case_modeled(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The latest stored ``seed_mistral`` rows: per strategy and checkpointing mode, the whole peak and whether it fits."""
    if not _has_table(con, "memory_case_predictions"):
        return pd.DataFrame(columns=["strategy", "checkpointing", "gpus", "seq_len", "peak_bytes", "capacity_bytes", "fits"])
    return con.execute("""
        SELECT c.strategy, c.checkpointing, c.gpus, c.seq_len, c.peak_bytes, c.capacity_bytes, c.fits
        FROM memory_case_predictions c JOIN runs r USING (run_id)
        WHERE c.memory_case = 'seed_mistral'
        QUALIFY row_number() OVER (PARTITION BY c.strategy, c.checkpointing ORDER BY r.measured_at DESC NULLS LAST, c.run_id DESC) = 1
        ORDER BY c.strategy, c.checkpointing""").df()


def seed_case_measured(con: duckdb.DuckDBPyConnection, gpus: int = 8, seq_len: int = 4096) -> pd.DataFrame:
    """The latest measured run per strategy of Mistral-7B on ``gpus`` ranks at ``seq_len``, micro-batch 1: its peak per rank.

    The peak is the tracked tensor peak where the run has one (the model's own currency),
    else the peak the worker measured (CUDA's allocator on GPU); a run that ran out of memory
    has no peak and says so in its outcome.
    """
    return con.execute("""
        SELECT t.strategy, t.outcome,
               coalesce(max(m.tracked_peak_bytes), max(m.peak_memory_bytes)) AS measured_peak_bytes,
               CASE WHEN max(m.tracked_peak_bytes) IS NOT NULL THEN 'tracked tensors'
                    ELSE any_value(t.peak_memory_method) END AS measured_method
        FROM training_runs t JOIN runs r USING (run_id) LEFT JOIN training_memory m USING (run_id)
        WHERE t.model = 'mistral-7b' AND t.world_size = ? AND t.seq_len = ? AND t.micro_batch = 1
        GROUP BY t.strategy, t.outcome, t.run_id, r.measured_at
        QUALIFY row_number() OVER (PARTITION BY t.strategy ORDER BY r.measured_at DESC NULLS LAST, t.run_id DESC) = 1
        ORDER BY t.strategy""", [gpus, seq_len]).df()


def mistral_peak_table(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Per strategy: the modeled whole peak (GB) without and with full checkpointing, whether each fits, and the measured peak.

    Measured runs train without checkpointing (the worker has no checkpointing switch), so
    their peak stands beside the ``none`` column; a strategy never run shows none.
    """
    modeled, measured = seed_case_modeled(con), seed_case_measured(con)
    if modeled.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    runs = {r["strategy"]: r for r in measured.to_dict("records")}
    rows = []
    for strategy, group in modeled.groupby("strategy", sort=False):
        by_mode = {r["checkpointing"]: r for r in group.to_dict("records")}
        run = runs.get(strategy, {})
        none, full = by_mode.get("none", {}), by_mode.get("full", {})
        peak = run.get("measured_peak_bytes")
        rows.append({"strategy": strategy,
                     "peak_none_gb": none.get("peak_bytes", float("nan")) / 1e9, "fits_none": _yes_no(none.get("fits")),
                     "peak_full_gb": full.get("peak_bytes", float("nan")) / 1e9, "fits_full": _yes_no(full.get("fits")),
                     "capacity_gb": (none or full)["capacity_bytes"] / 1e9,
                     "measured_peak_gb": peak / 1e9 if peak is not None and pd.notna(peak) else None,
                     "measured_method": run.get("measured_method"), "measured_outcome": run.get("outcome")})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _yes_no(fits: object) -> str | None:
    if fits is None or (isinstance(fits, float) and pd.isna(fits)) or fits is pd.NA:
        return None
    return "yes" if bool(fits) else "no"
