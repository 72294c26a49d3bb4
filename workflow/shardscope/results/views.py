"""The read side's shared definitions: SQL that the database's views and the figures' and report's queries
select from, so that a number they all show (speed relative to DDP) has one definition."""

from __future__ import annotations


def strategy_vs_ddp_sql(runs: str = "runs", columns: str = "", joins: str = "") -> str:
    """Every training run with its step time, tokens/s and bytes held relative to DDP: the latest DDP run
    (by ``measured_at``, then run id) on the same host, model, world size, placement and transport (the
    fabric condition), when that run
    finished ``ok`` (otherwise, or with no DDP run, the ratios are NULL).

    The one definition of "speed relative to DDP": the ``strategy_summary`` view and the figures'
    ``strategy_speed`` both select from it. ``runs`` names the relation of runs (the ``runs`` table,
    or the figures' ``all_runs`` view), ``columns`` adds columns of ``tr`` (training_runs), ``r``
    (runs) or ``joins``' tables to each row. Rows carry ``measured_at`` and ``ddp_tokens_per_s`` (the
    baseline's tokens/s) for queries that pick the latest run or scale an interval.
    """
    extra = f",\n                   {columns}" if columns else ""
    return f"""
        WITH t AS (
            SELECT r.host, tr.model, tr.world_size, tr.placement, coalesce(r.transport, 'default') AS transport, tr.strategy, tr.outcome, tr.median_step_time_s,
                   tr.tokens_per_s, tr.peak_memory_bytes, r.measured_at, tr.run_id,
                   (SELECT max(m.param_bytes + m.grad_bytes + m.optim_bytes) FROM training_memory m
                    WHERE m.run_id = tr.run_id) AS held_bytes{extra}
            FROM training_runs tr JOIN {runs} r USING (run_id) {joins}),
        ddp AS (
            SELECT * FROM t WHERE strategy = 'ddp'
            QUALIFY row_number() OVER (PARTITION BY host, model, world_size, placement, transport
                                       ORDER BY measured_at DESC NULLS LAST, run_id DESC) = 1)
        SELECT t.*, t.median_step_time_s / ddp.median_step_time_s AS step_time_vs_ddp,
               t.tokens_per_s / ddp.tokens_per_s AS tokens_per_s_vs_ddp,
               t.held_bytes / ddp.held_bytes AS held_bytes_vs_ddp, ddp.tokens_per_s AS ddp_tokens_per_s
        FROM t LEFT JOIN ddp ON t.host IS NOT DISTINCT FROM ddp.host AND t.model = ddp.model
             AND t.world_size = ddp.world_size AND t.placement = ddp.placement
             AND t.transport = ddp.transport AND ddp.outcome = 'ok'"""
