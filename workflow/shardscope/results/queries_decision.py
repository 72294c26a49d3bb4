"""The read side of the decision map (figure 5): the stored modeled cells, and the measured runs beside them.

The cells are what the predictions stage stored (``decision_map_cells``, modeled once by
:mod:`shardscope.costmodel.decision_map`): nothing is modeled here. Beside them the database's
measured training runs: per GPU fabric the order its strategies measured in (tokens/s relative
to DDP at the largest world size measured there), and per measured setting (machine, model,
world size, placement, transport) the strategy that measured fastest, at the model's size and
the run's GPU memory, drawn on the modeled regions and labelled measured.
"""

from __future__ import annotations

import duckdb
import pandas as pd

from shardscope.results.queries import FABRIC_SQL, device_capacity_bytes, has_table, strategy_speed

#: Columns of the stored cells (``decision_map_cells`` without ``run_id``), in order.
CELL_COLUMNS = ["panel", "title", "order_source", "ranking", "gpus", "gpu_memory_gb", "model", "n_params", "preset", "strategy",
                "pick", "tied", "tie_spread", "tie_margin", "rule", "per_gpu_bytes", "ddp_per_gpu_bytes", "usable_fraction",
                "micro_batch", "seq_len", "method"]
#: Columns a measured point adds (NULL on the modeled cells).
POINT_COLUMNS = ["host", "fabric", "world_size", "placement", "transport", "strategies_measured", "tokens_per_s", "label"]
#: Fabrics whose measured order says nothing about GPUs (CPU processes, one GPU, unknown).
_NOT_GPU = ("cpu", "unknown", "single")


def decision_cells(con: duckdb.DuckDBPyConnection, gpus: int | None = None) -> pd.DataFrame:
    """The stored modeled cells of every panel, each panel from the latest predictions run that modeled it, on
    ``gpus`` GPUs (default: the most GPUs that run modeled the panel for).

    A database collected before the table existed (or without a predictions run) has none.
    """
    if not has_table(con, "decision_map_cells"):
        return pd.DataFrame(columns=CELL_COLUMNS)
    df = con.execute(f"""
        WITH latest AS (
            SELECT c.* FROM decision_map_cells c JOIN runs r USING (run_id)
            WHERE ?::BIGINT IS NULL OR c.gpus = ?::BIGINT
            QUALIFY dense_rank() OVER (PARTITION BY c.panel ORDER BY r.measured_at DESC NULLS LAST, c.run_id DESC) = 1)
        SELECT {', '.join(CELL_COLUMNS)} FROM latest
        QUALIFY gpus = max(gpus) OVER (PARTITION BY panel)
        ORDER BY panel <> 'nvswitch', panel <> 'pcie', panel, n_params, gpu_memory_gb""", [gpus, gpus]).df()
    return df.astype({"preset": "object", "tied": "object"})


def measured_orders(speed: pd.DataFrame) -> pd.DataFrame:
    """Per GPU fabric in ``speed`` (:func:`strategy_speed`): its strategies in measured order, and where.

    Each fabric's largest world size, the mean tokens/s relative to DDP over its hosts and models
    there; ``measured_order`` reads ``zero3 2.00x > ddp 1.00x``, ``measured_where`` ``measured on
    hostA (2 GPUs)``. CPU, single-GPU and unknown fabrics are left out (their order says nothing about GPUs).
    """
    ok = speed[(speed["outcome"] == "ok") & speed["tokens_per_s_vs_ddp"].notna() & ~speed["fabric"].isin(_NOT_GPU)]
    rows = []
    for fabric, sub in ok.groupby("fabric", sort=True):
        top = sub[sub["world_size"] == sub["world_size"].max()]
        mean = top.groupby("strategy")["tokens_per_s_vs_ddp"].mean().sort_values(ascending=False, kind="stable")
        hosts = ", ".join(sorted(top["host"].dropna().unique()))
        rows.append({"panel": str(fabric), "measured_order": " > ".join(f"{s} {v:.2f}x" for s, v in mean.items()),
                     "measured_where": f"measured on {hosts} ({int(top['world_size'].max())} GPUs)"})
    return pd.DataFrame(rows, columns=["panel", "measured_order", "measured_where"])


def measured_points(con: duckdb.DuckDBPyConnection, panels: list[str]) -> pd.DataFrame:
    """Per measured setting (host, model, world size, placement, transport): the strategy that measured fastest.

    Each strategy's latest finished run counts; the point sits at the model's parameter count and
    the run's GPU memory (the topology's, else read from the GPU's name; none for CPU runs or where
    neither tells it: the drawing puts those on the bottom edge), on
    the panel of its fabric, else on the PCIe panel (the cost model's machine for other fabrics).
    """
    df = con.execute(f"""
        WITH latest AS (
            SELECT r.host, {FABRIC_SQL} AS fabric, tr.model, tr.param_count, tr.world_size, tr.placement,
                   coalesce(r.transport, 'default') AS transport, tr.strategy, tr.tokens_per_s,
                   r.gpu_memory_bytes, r.device_type, r.devices
            FROM training_runs tr JOIN all_runs r USING (run_id)
            WHERE tr.outcome = 'ok' AND tr.tokens_per_s IS NOT NULL AND tr.param_count IS NOT NULL
            QUALIFY row_number() OVER (PARTITION BY r.host, tr.model, tr.world_size, tr.placement,
                                       coalesce(r.transport, 'default'), tr.strategy
                                       ORDER BY r.measured_at DESC NULLS LAST, tr.run_id DESC) = 1)
        SELECT host, fabric, model, max(param_count) AS n_params, world_size, placement, transport,
               arg_max(strategy, tokens_per_s) AS strategy, max(tokens_per_s) AS tokens_per_s,
               count(*) AS strategies_measured, max(gpu_memory_bytes) AS gpu_memory_bytes,
               any_value(device_type) AS device_type, any_value(devices) AS devices
        FROM latest GROUP BY host, fabric, model, world_size, placement, transport
        ORDER BY host, model, world_size, placement, transport""").df()
    memory = [device_capacity_bytes(t, d, b) for t, d, b in zip(df["device_type"], df["devices"], df["gpu_memory_bytes"])]
    fallback = "pcie" if "pcie" in panels else (panels[-1] if panels else None)
    df = df.assign(
        gpu_memory_gb=[m / 1e9 if m is not None else None for m in memory],
        panel=[f if f in panels else fallback for f in df["fabric"]], method="measured",
        label=[f"measured: {s} fastest of {n} ({h}, {f}, {w} ranks, {_memory_text(m, t)})"
               for s, n, h, f, w, m, t in zip(df["strategy"], df["strategies_measured"], df["host"], df["fabric"],
                                               df["world_size"], memory, df["device_type"])])
    return df.drop(columns=["gpu_memory_bytes", "device_type", "devices"])


def _memory_text(memory_bytes: float | None, device_type: str | None) -> str:
    if memory_bytes is not None:
        return f"{memory_bytes / 1e9:.0f} GB"
    return "CPU: no GPU memory" if device_type == "cpu" else "GPU memory unknown"


def decision_map(con: duckdb.DuckDBPyConnection, gpus: int | None = None) -> pd.DataFrame:
    """Figure 5's rows: the stored modeled cells (``method`` modeled, :func:`decision_cells`) with their panel's measured order beside
    them (``measured_order``, ``measured_where``; NULL where the fabric was not measured), then the measured
    points (``method`` measured, :func:`measured_points`). Only queries."""
    cells = decision_cells(con, gpus)
    if cells.empty:
        return pd.DataFrame(columns=[*CELL_COLUMNS, "measured_order", "measured_where", *POINT_COLUMNS])
    cells = cells.merge(measured_orders(strategy_speed(con)), on="panel", how="left")
    points = measured_points(con, list(dict.fromkeys(cells["panel"])))
    points = points[points["panel"].notna()]
    frames = [cells] + ([points] if not points.empty else [])
    return pd.concat(frames, ignore_index=True).reindex(columns=[*CELL_COLUMNS, "measured_order", "measured_where",
                                                                 *POINT_COLUMNS])
