"""The report's own queries (the figures' queries are in :mod:`shardscope.results.queries`).

Each returns exactly the rows one report table or paragraph shows, from the views of
:func:`shardscope.results.sources.open_results`: every sweep's verdict numbers (the
interconnect table), strategies measured on emulated fabrics, modeled beside measured step
times, the seed's modeled memory, and the doctor's warnings.
"""

from __future__ import annotations

import duckdb
import pandas as pd

from shardscope.results.queries import FABRIC_SQL, SERIES_SQL, VERDICT_OF_SQL, has_table, with_verdict_text

#: The latest strategy predictions per topology (the newest prediction run that predicted strategies).
_STRATEGY_PREDICTIONS_SQL = """
    SELECT p.*, pr.measured_at AS predicted_at
    FROM all_strategy_predictions p JOIN all_runs pr USING (run_id)
    QUALIFY dense_rank() OVER (PARTITION BY p.topology_hash ORDER BY pr.measured_at DESC NULLS LAST, p.run_id DESC) = 1"""
#: The latest finished training run per host, fabric, model, world size, placement and strategy.
_LATEST_TRAINING_SQL = f"""
    SELECT r.host, {FABRIC_SQL} AS fabric, r.topology_hash, r.measured_at, tr.*
    FROM training_runs tr JOIN all_runs r USING (run_id)
    QUALIFY row_number() OVER (PARTITION BY r.host, {FABRIC_SQL}, tr.model, tr.world_size, tr.placement, tr.strategy
                               ORDER BY r.measured_at DESC NULLS LAST, tr.run_id DESC) = 1"""

def interconnect_sweeps(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """One row per sweep of figure 1 (the latest run of each series, ours and reference) with its verdict's
    plateau busbw and 95% interval, size to 90% of the plateau, latency floor, expected busbw and verdict."""
    df = con.execute(f"""
        WITH sweeps AS (
            SELECT DISTINCT r.run_id, r.measured_at, r.source, r.label, {FABRIC_SQL} AS fabric, c.op, c.world_size,
                   coalesce(r.placement, '-') AS placement, coalesce(r.transport, 'default') AS transport,
                   {SERIES_SQL} AS series
            FROM all_collectives c JOIN all_runs r USING (run_id)
            QUALIFY row_number() OVER (PARTITION BY c.op, {SERIES_SQL}
                                       ORDER BY r.measured_at DESC NULLS LAST, r.run_id DESC) = 1),
        verdict_of AS ({VERDICT_OF_SQL})
        SELECT s.* EXCLUDE (measured_at), v.* EXCLUDE (run_id)
        FROM sweeps s LEFT JOIN verdict_of v USING (run_id)
        ORDER BY s.source = 'reference', s.series, s.op""").df()
    return with_verdict_text(df)


def emulated_training(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The latest training run of each strategy, model and world size on each emulated fabric (``emulated:<preset>``)."""
    return con.execute(f"""
        SELECT fabric, replace(fabric, 'emulated:', '') AS preset, model, world_size, placement, strategy, outcome,
               median_step_time_s, tokens_per_s, comm_time_share
        FROM ({_LATEST_TRAINING_SQL}) WHERE fabric LIKE 'emulated:%'
        ORDER BY strategy, model, world_size, preset""").df()


def emulated_slowdown(runs: pd.DataFrame) -> pd.DataFrame:
    """Per strategy, model and world size: the fastest and slowest emulated preset (measured step times) and
    the slowdown between them; presets where the run did not finish are listed, not timed."""
    rows = []
    for (strategy, model, ws), sub in runs.groupby(["strategy", "model", "world_size"], sort=True):
        ok = sub[sub["outcome"] == "ok"].sort_values("median_step_time_s")
        failed = sub[sub["outcome"] != "ok"]
        fast, slow = (ok.iloc[0], ok.iloc[-1]) if len(ok) else (None, None)
        rows.append({
            "strategy": strategy, "model": model, "world_size": ws, "presets": len(sub),
            "fastest_preset": fast["preset"] if fast is not None else None,
            "fastest_step_s": fast["median_step_time_s"] if fast is not None else None,
            "slowest_preset": slow["preset"] if slow is not None else None,
            "slowest_step_s": slow["median_step_time_s"] if slow is not None else None,
            "slowdown": slow["median_step_time_s"] / fast["median_step_time_s"] if len(ok) > 1 else None,
            "not_finished": ", ".join(f"{p} ({o})" for p, o in zip(failed["preset"], failed["outcome"])) or None,
        })
    return pd.DataFrame(rows, columns=["strategy", "model", "world_size", "presets", "fastest_preset", "fastest_step_s",
                                       "slowest_preset", "slowest_step_s", "slowdown", "not_finished"])


def modeled_vs_measured_steps(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The cost model's step time beside the measured one, per strategy, for training runs on a topology that
    strategies were predicted for (same strategy, model and GPU count)."""
    return con.execute(f"""
        SELECT t.host, t.fabric, t.model, t.world_size, t.placement, t.strategy, t.outcome,
               p.step_time_s AS modeled_step_time_s, p.exposed_comm_time_s AS modeled_exposed_comm_s,
               t.median_step_time_s AS measured_step_time_s,
               t.median_step_time_s / p.step_time_s AS measured_over_modeled, p.fits AS modeled_fits
        FROM ({_LATEST_TRAINING_SQL}) t
        JOIN ({_STRATEGY_PREDICTIONS_SQL}) p ON p.topology_hash = t.topology_hash AND p.strategy = t.strategy
             AND p.model = t.model AND p.gpus = t.world_size
        ORDER BY t.host, t.model, t.world_size, t.placement, p.step_time_s""").df()


def seed_memory_model(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The latest stored ZeRO-paper model states of the seed's Mistral-7B (``memory_model_cases``): per strategy,
    GPU count and master copy; none in a database collected before the table existed."""
    columns = ["strategy", "model", "n_params", "gpus", "dtype", "master_weights", "param_bytes", "grad_bytes", "optim_bytes",
               "total_bytes", "assumption", "gpu_memory_bytes", "fits"]
    if not has_table(con, "memory_model_cases"):
        return pd.DataFrame(columns=columns)
    return con.execute(f"""
        SELECT {', '.join(f'c.{c}' for c in columns)}
        FROM memory_model_cases c JOIN runs r USING (run_id)
        WHERE c.memory_case = 'seed_mistral'
        QUALIFY dense_rank() OVER (ORDER BY r.measured_at DESC NULLS LAST, c.run_id DESC) = 1
        ORDER BY c.gpus, c.master_weights, c.strategy""").df()


def doctor_warnings(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The warn and fail findings of the latest doctor run of each host."""
    return con.execute("""
        WITH latest AS (
            SELECT run_id FROM all_doctor_findings
            QUALIFY row_number() OVER (PARTITION BY host ORDER BY checked_at DESC, run_id DESC) = 1)
        SELECT host, checked_at, check_name, status, read, concluded, action
        FROM all_doctor_findings WHERE run_id IN (SELECT run_id FROM latest) AND status IN ('warn', 'fail')
        ORDER BY host, status = 'warn', check_name""").df()
