"""The SQL behind every figure and report table: what is plotted is exactly what these return.

Collective queries read the ``all_runs``/``all_collectives`` views of
:func:`shardscope.figures.sources.open_results` (the user's runs plus reference runs);
training queries read the results database's own tables and views.
"""

from __future__ import annotations

import re

import duckdb
import pandas as pd

from shardscope.figures.links import nominal_link
from shardscope.figures.reference import load_manifest
from shardscope.training.memory_model import predict_memory

#: A run's fabric: what the run recorded, else "cpu" for CPU runs, else "unknown".
FABRIC_SQL = "coalesce(r.fabric, CASE WHEN r.device_type = 'cpu' THEN 'cpu' END, 'unknown')"
#: Who measured a series and where: reference runs by their label, ours by host, placement, transport.
_WHO_SQL = """CASE WHEN r.source = 'reference' THEN coalesce(r.label, r.job_id) || ' (reference)'
                   ELSE coalesce(r.host, r.label, r.source_file)
                        || CASE WHEN r.source = 'nccl-tests' THEN ' (nccl-tests log)' ELSE '' END END"""
_WHERE_SQL = "coalesce(r.placement, '-') || ' · ' || coalesce(r.transport, '-')"
_DEVICE_MEMORY = re.compile(r"(\d+(?:\.\d+)?)\s*GB", re.IGNORECASE)


def busbw_vs_size(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Bus bandwidth per message size, per op, for the latest run of each series: ours and reference runs.

    A series is one machine, world size, placement and transport (runs accumulate across
    invocations; older runs stay in the database). One placement mode per run: out-of-place
    where the run has it (as nccl-tests users quote it), else in-place (our all_reduce workers
    time it in place). ``nominal_link_gbps`` is the link's nominal per-direction bandwidth
    where a reference run names its link.
    """
    df = con.execute(f"""
        WITH rows AS (
            SELECT c.op, c.size_bytes, c.busbw_gbps, c.algbw_gbps, c.time_s, c.world_size, c.in_place,
                   r.source, {FABRIC_SQL} AS fabric, r.label, r.run_id, r.measured_at,
                   {_WHO_SQL} || CASE WHEN r.source = 'reference' THEN '' ELSE ' · ' || c.world_size || ' ranks · '
                                     || {_WHERE_SQL} END AS series
            FROM all_collectives c JOIN all_runs r USING (run_id)
            QUALIFY c.in_place = bool_and(c.in_place) OVER (PARTITION BY c.run_id)),
        latest AS (
            SELECT DISTINCT op, series, run_id, measured_at FROM rows
            QUALIFY row_number() OVER (PARTITION BY op, series ORDER BY measured_at DESC NULLS LAST, run_id DESC) = 1)
        SELECT rows.* EXCLUDE (measured_at) FROM rows JOIN latest USING (op, series, run_id)
        ORDER BY op, source, series, size_bytes""").df()
    links = {run.label: run.link for run in load_manifest()}
    link = [nominal_link(links.get(label)) if source == "reference" and isinstance(label, str) else None
            for label, source in zip(df["label"], df["source"])]
    return df.assign(nominal_link=[x.name if x else None for x in link],
                     nominal_link_gbps=[x.per_direction_gbps if x else None for x in link])


def allreduce_peak_vs_gpus(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Peak all-reduce bus bandwidth per number of ranks, per fabric and series (the latest run of each, as figure 1)."""
    return con.execute(f"""
        WITH per_run AS (
            SELECT r.run_id, r.measured_at, r.source, {FABRIC_SQL} AS fabric,
                   {_WHO_SQL} || CASE WHEN r.source = 'reference' THEN '' ELSE ' · ' || {_WHERE_SQL} END AS series,
                   c.world_size, max(c.busbw_gbps) AS peak_busbw_gbps, arg_max(c.size_bytes, c.busbw_gbps) AS peak_at_size_bytes
            FROM (SELECT * FROM all_collectives
                  QUALIFY in_place = bool_and(in_place) OVER (PARTITION BY run_id)) c JOIN all_runs r USING (run_id)
            WHERE c.op = 'all_reduce'
            GROUP BY ALL)
        SELECT source, fabric, series, world_size, peak_busbw_gbps, peak_at_size_bytes FROM per_run
        QUALIFY row_number() OVER (PARTITION BY series, world_size ORDER BY measured_at DESC NULLS LAST, run_id DESC) = 1
        ORDER BY source, fabric, series, world_size""").df()


def measured_memory(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Per-rank bytes held by each strategy (the largest rank) in its latest finished run."""
    return con.execute(f"""
        WITH per_run AS (
            SELECT t.run_id, r.measured_at, r.host, {FABRIC_SQL} AS fabric, t.model, t.param_count, t.world_size,
                   t.dtype, t.strategy, max(m.param_bytes) AS param_bytes, max(m.grad_bytes) AS grad_bytes,
                   max(m.optim_bytes) AS optim_bytes, max(m.param_bytes + m.grad_bytes + m.optim_bytes) AS held_bytes,
                   max(m.peak_memory_bytes) AS peak_memory_bytes, any_value(t.peak_memory_method) AS peak_memory_method,
                   any_value(r.device_type) AS device_type, any_value(r.devices) AS devices,
                   max(r.gpu_memory_bytes) AS gpu_memory_bytes
            FROM training_runs t JOIN training_memory m USING (run_id) JOIN all_runs r USING (run_id)
            WHERE t.outcome IN ('ok', 'over_budget')
            GROUP BY ALL)
        SELECT * FROM per_run
        QUALIFY row_number() OVER (PARTITION BY host, model, world_size, dtype, strategy
                                   ORDER BY measured_at DESC, run_id) = 1
        ORDER BY host, model, world_size, strategy""").df().drop(columns=["run_id", "measured_at"])


def device_capacity_bytes(device_type: str | None, devices: str | None, probed_bytes: float | None = None) -> float | None:
    """A GPU's memory: as the topology probe recorded it, else read from its name
    ('NVIDIA H100 80GB HBM3' -> 80e9 bytes); None for CPUs and unknown names."""
    if probed_bytes is not None and pd.notna(probed_bytes):
        return float(probed_bytes)
    if device_type != "cuda" or not devices:
        return None
    match = _DEVICE_MEMORY.search(devices)
    return float(match[1]) * 1e9 if match else None


def memory_measured_and_modeled(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Measured bytes held beside the ZeRO-paper prediction for the same model, world size and dtype.

    ``rest_bytes`` is the measured peak minus what the training state holds (activations,
    buffers, the runtime itself), never below 0 (a peak method that misses part of the state
    cannot make the rest negative); ``capacity_bytes`` the GPU's memory where the topology or
    the GPU's name gives it.
    """
    measured = measured_memory(con)
    rows = []
    for rec in measured.to_dict("records"):
        capacity = device_capacity_bytes(rec.pop("device_type"), rec.pop("devices"), rec.pop("gpu_memory_bytes"))
        peak = rec["peak_memory_bytes"]
        rest = max(peak - rec["held_bytes"], 0) if pd.notna(peak) else None
        rows.append({**rec, "method": "measured", "rest_bytes": rest, "capacity_bytes": capacity})
        if pd.notna(rec["param_count"]):
            model = predict_memory(int(rec["param_count"]), rec["strategy"], int(rec["world_size"]), rec["dtype"] or "float32")
            rows.append({**rec, "method": "modeled", "param_bytes": model["param_bytes"], "grad_bytes": model["grad_bytes"],
                         "optim_bytes": model["optim_bytes"], "held_bytes": model["total_bytes"], "peak_memory_bytes": None,
                         "peak_memory_method": None, "rest_bytes": None, "capacity_bytes": capacity})
    columns = [c for c in measured.columns if c not in ("device_type", "devices", "gpu_memory_bytes")]
    return pd.DataFrame(rows, columns=[*columns, "method", "rest_bytes", "capacity_bytes"])


def strategy_speed(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Each strategy's latest run, with step time, tokens/s and bytes held relative to the latest DDP run
    that finished on the same host, model, world size and placement (no baseline: NULL ratios)."""
    return con.execute(f"""
        WITH t AS (
            SELECT r.host, {FABRIC_SQL} AS fabric, tr.model, tr.world_size, tr.placement, tr.strategy, tr.outcome,
                   tr.median_step_time_s, tr.tokens_per_s, tr.peak_memory_bytes, tr.run_id,
                   (SELECT max(m.param_bytes + m.grad_bytes + m.optim_bytes) FROM training_memory m
                    WHERE m.run_id = tr.run_id) AS held_bytes
            FROM training_runs tr JOIN all_runs r USING (run_id)
            QUALIFY row_number() OVER (PARTITION BY r.host, tr.model, tr.world_size, tr.placement, tr.strategy
                                       ORDER BY r.measured_at DESC NULLS LAST, tr.run_id DESC) = 1),
        ddp AS (SELECT * FROM t WHERE strategy = 'ddp' AND outcome = 'ok')
        SELECT t.host, t.fabric, t.model, t.world_size, t.placement, t.strategy, t.outcome,
               t.median_step_time_s, t.tokens_per_s,
               t.median_step_time_s / ddp.median_step_time_s AS step_time_vs_ddp,
               t.tokens_per_s / ddp.tokens_per_s AS tokens_per_s_vs_ddp,
               t.held_bytes, t.held_bytes / ddp.held_bytes AS held_bytes_vs_ddp, t.peak_memory_bytes
        FROM t LEFT JOIN ddp ON t.host IS NOT DISTINCT FROM ddp.host AND t.model = ddp.model
             AND t.world_size = ddp.world_size AND t.placement = ddp.placement
        ORDER BY t.host, t.model, t.world_size, t.placement, t.strategy""").df()


def collective_peaks(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Peak bus bandwidth of the latest run of every job (ours and reference), for the report's table.

    The same runs and placement mode as figure 1 (out-of-place where the run has it), so the
    table and the figure quote the same peak.
    """
    return con.execute(f"""
        WITH per_run AS (
            SELECT r.run_id, r.measured_at, r.source, {_WHO_SQL} AS who, {FABRIC_SQL} AS fabric,
                   coalesce(r.placement, '-') AS placement, coalesce(r.transport, '-') AS transport, c.op, c.world_size,
                   max(c.busbw_gbps) AS peak_busbw_gbps, arg_max(c.size_bytes, c.busbw_gbps) AS peak_at_size_bytes
            FROM (SELECT * FROM all_collectives
                  QUALIFY in_place = bool_and(in_place) OVER (PARTITION BY run_id)) c JOIN all_runs r USING (run_id)
            GROUP BY ALL)
        SELECT source, who, fabric, op, world_size, placement, transport, peak_busbw_gbps, peak_at_size_bytes FROM per_run
        QUALIFY row_number() OVER (PARTITION BY source, who, op, world_size, placement, transport
                                   ORDER BY measured_at DESC NULLS LAST, run_id DESC) = 1
        ORDER BY source, who, op, world_size""").df()


def reference_runs(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The reference runs loaded (label, fabric, op, ranks, devices, source file), for the report."""
    return con.execute("""
        SELECT r.label, r.fabric, any_value(c.op) AS op, r.world_size, r.devices, r.job_id
        FROM all_runs r JOIN all_collectives c USING (run_id)
        WHERE r.source = 'reference'
        GROUP BY ALL ORDER BY r.label, op""").df()
