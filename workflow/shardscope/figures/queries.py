"""The SQL behind every figure and report table: what is plotted is exactly what these return."""

from __future__ import annotations

import duckdb
import pandas as pd

from shardscope.training.memory_model import predict_memory


def busbw_vs_size(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Bus bandwidth per message size, per op and per measured or imported series."""
    return con.execute("""
        SELECT c.op, c.size_bytes, c.busbw_gbps, c.world_size, r.source, coalesce(r.host, r.source_file) AS host,
               coalesce(r.placement, '-') AS placement, coalesce(r.transport, '-') AS transport,
               coalesce(r.host, r.source_file) || ' · ' || c.world_size || ' ranks · ' || coalesce(r.placement, '-')
                   || ' · ' || coalesce(r.transport, '-') || CASE WHEN c.in_place THEN ' (in place)' ELSE '' END AS series
        FROM collectives c JOIN runs r USING (run_id)
        ORDER BY c.op, series, c.size_bytes""").df()


def allreduce_peak_vs_gpus(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Peak all-reduce bus bandwidth per world size, per host (or imported file) and placement."""
    return con.execute("""
        SELECT coalesce(host, source_file) AS host, source, placement, transport, world_size,
               max(peak_busbw_gbps) AS peak_busbw_gbps
        FROM collective_peaks WHERE op = 'all_reduce'
        GROUP BY ALL ORDER BY host, placement, transport, world_size""").df()


def measured_memory(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Per-rank bytes held by each strategy (the largest rank), for runs that finished."""
    return con.execute("""
        SELECT r.host, t.model, t.param_count, t.world_size, t.dtype, t.strategy,
               max(m.param_bytes) AS param_bytes, max(m.grad_bytes) AS grad_bytes, max(m.optim_bytes) AS optim_bytes,
               max(m.peak_memory_bytes) AS peak_memory_bytes
        FROM training_runs t JOIN training_memory m USING (run_id) JOIN runs r USING (run_id)
        WHERE t.outcome IN ('ok', 'over_budget')
        GROUP BY ALL ORDER BY r.host, t.model, t.world_size, t.strategy""").df()


def memory_measured_and_modeled(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Measured bytes held beside the ZeRO-paper prediction for the same model, world size and dtype."""
    measured = measured_memory(con)
    rows = []
    for rec in measured.to_dict("records"):
        rows.append({**rec, "method": "measured"})
        if pd.notna(rec["param_count"]):
            model = predict_memory(int(rec["param_count"]), rec["strategy"], int(rec["world_size"]), rec["dtype"] or "float32")
            rows.append({**rec, "method": "modeled", "param_bytes": model["param_bytes"], "grad_bytes": model["grad_bytes"],
                         "optim_bytes": model["optim_bytes"], "peak_memory_bytes": None})
    return pd.DataFrame(rows, columns=[*measured.columns, "method"])


def strategy_speed(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Median step time and tokens/s of each strategy, normalised to DDP on the same host and GPUs."""
    return con.execute("""
        SELECT host, model, world_size, placement, strategy, outcome, median_step_time_s, tokens_per_s,
               step_time_vs_ddp, tokens_per_s_vs_ddp, held_bytes, held_bytes_vs_ddp, peak_memory_bytes
        FROM strategy_summary ORDER BY host, model, world_size, placement, strategy""").df()
