"""The read side: the SQL behind every figure and report table; what is plotted is exactly what these return.

Figures and the report import these queries (the report's own are in
:mod:`shardscope.results.report_queries`); they query, they never model.

Collective queries read the ``all_runs``/``all_collectives``/``all_verdicts``/
``all_collective_predictions`` views of :func:`shardscope.results.sources.open_results` (the
user's runs plus reference runs, each with its verdict, and the cost model's busbw); training
queries read the results database's own tables and views.
"""

from __future__ import annotations

import re

import duckdb
import pandas as pd

from shardscope.contracts.names import BEST_MICROBATCH_SUFFIX
from shardscope.results.links import nominal_link
from shardscope.results.verdict_text import verdict_text
from shardscope.results.schemas_predictions import MEMORY_MODELS  # noqa: F401  (figure 3's two models, for the captions)
from shardscope.results.views import strategy_vs_ddp_sql

#: A run's fabric: what the run recorded, else "cpu" for CPU runs, else "unknown".
FABRIC_SQL = "coalesce(r.fabric, CASE WHEN r.device_type = 'cpu' THEN 'cpu' END, 'unknown')"
#: Who measured a series and where: reference runs by their label, ours by host, placement, transport.
_WHO_SQL = """CASE WHEN r.source = 'reference' THEN coalesce(r.label, r.job_id) || ' (reference)'
                   ELSE coalesce(r.host, r.label, r.source_file)
                        || CASE WHEN r.source = 'nccl-tests' THEN ' (nccl-tests log)' ELSE '' END END"""
_WHERE_SQL = "coalesce(r.placement, '-') || ' · ' || coalesce(r.transport, '-')"
#: A figure-1 series (collectives ``c`` joined to runs ``r``): who, and for ours ranks, placement, transport
#: (an imported log whose rank count is unknown says so instead of turning the whole label NULL).
SERIES_SQL = (f"{_WHO_SQL} || CASE WHEN r.source = 'reference' THEN '' "
              f"ELSE ' · ' || coalesce(c.world_size::VARCHAR || ' ranks', 'ranks unknown') || ' · ' || {_WHERE_SQL} END")
#: A run's GPU model (the first device it ran on: ``NVIDIA H100 80GB HBM3``; a CPU's name on CPU runs).
GPU_MODEL_SQL = "coalesce(nullif(split_part(r.devices, ', ', 1), ''), r.device_type, 'unknown')"
_DEVICE_MEMORY = re.compile(r"(\d+(?:\.\d+)?)\s*GB", re.IGNORECASE)


#: The verdict of each judged run (``verdicts.judged_run_id``). A run judged by more than one
#: verdicts document (say, against two topologies) gets a known verdict before an unknown one, then
#: the lowest verdicts run id: verdict documents carry no time, so this keeps the choice the same
#: on every regeneration.
VERDICT_OF_SQL = """
    SELECT judged_run_id AS run_id, verdict, plateau_busbw_gbps AS verdict_plateau_busbw_gbps,
           percent_of_expected AS verdict_percent_of_expected, reason AS verdict_reason,
           plateau_ci95_low_gbps AS verdict_ci95_low_gbps, plateau_ci95_high_gbps AS verdict_ci95_high_gbps,
           size_to_90pct_bytes AS verdict_size_to_90pct_bytes, latency_floor_us AS verdict_latency_floor_us,
           expected_busbw_gbps AS verdict_expected_busbw_gbps, bottleneck AS verdict_bottleneck,
           hints_json AS verdict_hints_json
    FROM all_verdicts WHERE judged_run_id IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY judged_run_id ORDER BY verdict = 'unknown', run_id, source_file) = 1"""
#: The latest modeled busbw per topology, op, world size and transport, without the cost model's
#: gloo placeholders (fabric ``cpu``: no physical link is modeled for CPU processes).
PREDICTIONS_SQL = """
    SELECT p.*, pr.measured_at AS predicted_at
    FROM all_collective_predictions p JOIN all_runs pr USING (run_id)
    WHERE p.fabric <> 'cpu'
    QUALIFY dense_rank() OVER (PARTITION BY p.topology_hash, p.op, p.world_size, p.transport
                               ORDER BY pr.measured_at DESC NULLS LAST, p.run_id DESC) = 1"""
_VERDICT_COLUMNS = ("verdict", "verdict_plateau_busbw_gbps", "verdict_percent_of_expected", "verdict_reason")


def with_verdict_text(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a ``verdict_text`` column written from its verdict columns (NULL verdict: not judged)."""
    text = [verdict_text(v, p, pct, r) for v, p, pct, r in zip(*(df[c] for c in _VERDICT_COLUMNS))]
    return df.assign(verdict_text=pd.Series(text, index=df.index, dtype="object"))


def busbw_vs_size(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Bus bandwidth per message size, per op, for the latest run of each series: ours, reference runs, and modeled.

    A series is one machine, world size, placement and transport (runs accumulate across
    invocations; older runs stay in the database). One placement mode per run: out-of-place
    where the run has it (as nccl-tests users quote it), else in-place (our all_reduce workers
    time it in place). Measured rows (``method`` measured) carry their run's verdict; modeled
    rows (``method`` modeled, ``source`` modeled) are the cost model's busbw for the same
    topology, op, world size and transport as a measured series, where one was predicted and is
    not a gloo placeholder. ``nominal_link_gbps`` is the link's nominal per-direction bandwidth
    where a reference run names its link. ``host``, ``gpu_model`` and ``placement`` name each measured
    series' machine and its kind (a fleet's figure draws the machines of a kind as one band).
    """
    df = con.execute(f"""
        WITH rows AS (
            SELECT c.op, c.size_bytes, c.busbw_gbps, c.algbw_gbps, c.time_s, c.world_size, c.in_place,
                   r.source, {FABRIC_SQL} AS fabric, r.label, r.run_id, r.measured_at, r.topology_hash,
                   coalesce(r.transport, 'default') AS transport,
                   {SERIES_SQL} AS series, r.host, {GPU_MODEL_SQL} AS gpu_model, r.placement
            FROM all_collectives c JOIN all_runs r USING (run_id)
            QUALIFY c.in_place = bool_and(c.in_place) OVER (PARTITION BY c.run_id)),
        latest AS (
            SELECT DISTINCT op, series, run_id, measured_at FROM rows
            QUALIFY row_number() OVER (PARTITION BY op, series ORDER BY measured_at DESC NULLS LAST, run_id DESC) = 1),
        measured AS (
            SELECT rows.* EXCLUDE (measured_at), 'measured' AS method FROM rows JOIN latest USING (op, series, run_id)),
        verdict_of AS ({VERDICT_OF_SQL}),
        predicted AS ({PREDICTIONS_SQL}),
        measured_series AS (
            SELECT DISTINCT op, series, fabric, label, world_size, transport, topology_hash
            FROM measured WHERE source <> 'reference' AND topology_hash IS NOT NULL),
        modeled AS (
            SELECT p.op, p.size_bytes, p.busbw_gbps, p.algbw_gbps, p.time_s, p.world_size, NULL::BOOLEAN AS in_place,
                   'modeled' AS source, s.fabric, s.label, p.run_id, s.topology_hash, p.transport, s.series,
                   'modeled' AS method, p.algorithm AS modeled_algorithm, p.bottleneck AS modeled_bottleneck
            FROM measured_series s JOIN predicted p ON p.topology_hash = s.topology_hash AND p.op = s.op
                 AND p.world_size = s.world_size AND p.transport = s.transport)
        SELECT m.* EXCLUDE (topology_hash), v.verdict, v.verdict_plateau_busbw_gbps, v.verdict_percent_of_expected,
               v.verdict_reason, NULL::VARCHAR AS modeled_algorithm, NULL::VARCHAR AS modeled_bottleneck
        FROM measured m LEFT JOIN verdict_of v USING (run_id)
        UNION ALL BY NAME
        SELECT * EXCLUDE (topology_hash) FROM modeled
        ORDER BY op, method, source, series, size_bytes""").df()
    df = with_verdict_text(df)
    df.loc[df["method"] == "modeled", "verdict_text"] = None
    from shardscope.results.reference_manifest import load_manifest  # the bundled reference logs' manifest (their links)

    links = {run.label: run.link for run in load_manifest()}
    link = [nominal_link(links.get(label)) if source == "reference" and isinstance(label, str) else None
            for label, source in zip(df["label"], df["source"])]
    return df.assign(nominal_link=[x.name if x else None for x in link],
                     nominal_link_gbps=[x.per_direction_gbps if x else None for x in link])


def cpu_series_without_model(df: pd.DataFrame) -> list[str]:
    """Measured series of ``busbw_vs_size`` that ran as CPU processes (fabric cpu): no link model exists for them."""
    ours = df[(df["method"] == "measured") & (df["source"] != "reference") & (df["fabric"] == "cpu")]
    return sorted(ours["series"].unique())


#: What a modeled series of figure 2 says instead of a verdict.
MODELED_TEXT = "modeled by the cost model, not measured"


def allreduce_peak_vs_gpus(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Peak all-reduce bus bandwidth per number of ranks, per fabric and series (the latest run of each, as figure 1),
    with the run's verdict (``verdicts``, by ``judged_run_id``); and, source ``modeled``, the cost model's peak on
    each labelled modeled fabric (the reference database's ``modeled`` predictions, one node, default transport).
    ``host``, ``gpu_model``, ``placement`` and ``transport`` as in :func:`busbw_vs_size`."""
    df = con.execute(f"""
        WITH per_run AS (
            SELECT r.run_id, r.measured_at, r.source, {FABRIC_SQL} AS fabric,
                   {_WHO_SQL} || CASE WHEN r.source = 'reference' THEN '' ELSE ' · ' || {_WHERE_SQL} END AS series,
                   c.world_size, max(c.busbw_gbps) AS peak_busbw_gbps, arg_max(c.size_bytes, c.busbw_gbps) AS peak_at_size_bytes,
                   r.host, {GPU_MODEL_SQL} AS gpu_model, r.placement, coalesce(r.transport, 'default') AS transport
            FROM (SELECT * FROM all_collectives
                  QUALIFY in_place = bool_and(in_place) OVER (PARTITION BY run_id)) c JOIN all_runs r USING (run_id)
            WHERE c.op = 'all_reduce'
            GROUP BY ALL),
        latest AS (
            SELECT * FROM per_run
            QUALIFY row_number() OVER (PARTITION BY series, world_size ORDER BY measured_at DESC NULLS LAST, run_id DESC) = 1),
        verdict_of AS ({VERDICT_OF_SQL}),
        modeled AS (
            SELECT 'modeled' AS source, r.fabric, r.label AS series, p.world_size, max(p.busbw_gbps) AS peak_busbw_gbps,
                   arg_max(p.size_bytes, p.busbw_gbps) AS peak_at_size_bytes
            FROM all_collective_predictions p JOIN all_runs r USING (run_id)
            WHERE r.kind = 'predictions' AND r.label IS NOT NULL AND p.op = 'all_reduce'
                  AND p.transport = 'default' AND p.nodes = 1
            GROUP BY ALL)
        SELECT l.source, l.fabric, l.series, l.world_size, l.peak_busbw_gbps, l.peak_at_size_bytes,
               v.verdict, v.verdict_plateau_busbw_gbps, v.verdict_percent_of_expected, v.verdict_reason,
               l.host, l.gpu_model, l.placement, l.transport
        FROM latest l LEFT JOIN verdict_of v USING (run_id)
        UNION ALL BY NAME
        SELECT * FROM modeled
        ORDER BY source, fabric, series, world_size""").df()
    df = with_verdict_text(df)
    df.loc[df["source"] == "modeled", "verdict_text"] = MODELED_TEXT
    return df


#: Figure 3's fabric of a run: the bytes a rank holds do not depend on the links, so the runs over every emulated preset
#: are one group ("emulated"), apart from the host's own runs (issue 32: one panel per preset, each title alike).
MEMORY_FABRIC_SQL = f"CASE WHEN {FABRIC_SQL} LIKE 'emulated:%' THEN 'emulated' ELSE {FABRIC_SQL} END"


def measured_memory(con: duckdb.DuckDBPyConnection, keep_run_id: bool = False) -> pd.DataFrame:
    """Per-rank bytes held by each strategy (the largest rank) in its latest finished run (``run_id`` on request),
    at the configured micro-batch (the runs at each strategy's own best micro-batch are figure 4's)."""
    return con.execute(f"""
        WITH per_run AS (
            SELECT t.run_id, r.measured_at, r.host, {MEMORY_FABRIC_SQL} AS fabric, {GPU_MODEL_SQL} AS gpu_model,
                   t.model, t.param_count, t.world_size,
                   t.dtype, t.strategy, max(m.param_bytes) AS param_bytes, max(m.grad_bytes) AS grad_bytes,
                   max(m.optim_bytes) AS optim_bytes, max(m.param_bytes + m.grad_bytes + m.optim_bytes) AS held_bytes,
                   max(m.peak_memory_bytes) AS peak_memory_bytes, any_value(t.peak_memory_method) AS peak_memory_method,
                   max(m.activation_bytes) AS activation_bytes, max(m.buffer_bytes) AS buffer_bytes,
                   max(m.tracked_peak_bytes) AS tracked_peak_bytes, any_value(t.micro_batch) AS micro_batch,
                   any_value(t.seq_len) AS seq_len,
                   any_value(r.device_type) AS device_type, any_value(r.devices) AS devices,
                   max(r.gpu_memory_bytes) AS gpu_memory_bytes
            FROM training_runs t JOIN training_memory m USING (run_id) JOIN all_runs r USING (run_id)
            WHERE t.outcome IN ('ok', 'over_budget')
              AND t.placement NOT LIKE '%{BEST_MICROBATCH_SUFFIX}'  -- figure 3 compares strategies at one micro-batch
            GROUP BY ALL)
        SELECT * FROM per_run
        QUALIFY row_number() OVER (PARTITION BY host, fabric, model, world_size, dtype, strategy
                                   ORDER BY measured_at DESC, run_id) = 1
        ORDER BY host, fabric, model, world_size, strategy""").df().drop(columns=["measured_at"] if keep_run_id else ["run_id", "measured_at"])


def device_capacity_bytes(device_type: str | None, devices: str | None, probed_bytes: float | None = None) -> float | None:
    """A GPU's memory: as the topology probe recorded it, else read from its name
    ('NVIDIA H100 80GB HBM3' -> 80e9 bytes); None for CPUs and unknown names."""
    if probed_bytes is not None and pd.notna(probed_bytes):
        return float(probed_bytes)
    if device_type != "cuda" or not devices:
        return None
    match = _DEVICE_MEMORY.search(devices)
    return float(match[1]) * 1e9 if match else None


def has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether the database (not an attached one) has table ``name``: one an older layout lacks reads as no rows."""
    return bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
                            "AND schema_name = 'main' AND table_name = ?", [name]).fetchone()[0])


def modeled_memory_terms(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The stored modeled terms of every training run's whole peak (``memory_peak_predictions`` through the view
    ``modeled_run_peaks``: the latest prediction of each run), one row per model; ``run_id`` is the measured run's.

    A database collected before the table existed has none (``shardscope collect`` adds it): no modeled rows; one
    collected before the view existed (opened read-only, not upgraded) has the rows collect stored under the run's id.
    """
    columns = ["run_id", "memory_model", "param_bytes", "grad_bytes", "optim_bytes", "activation_bytes", "buffer_bytes",
               "overhead_bytes", "peak_bytes", "peak_phase"]
    if not has_table(con, "memory_peak_predictions"):
        return pd.DataFrame(columns=columns)
    has_view = con.execute("SELECT count(*) FROM duckdb_views() WHERE database_name = current_database() "
                           "AND schema_name = 'main' AND view_name = 'modeled_run_peaks'").fetchone()[0]
    source = "modeled_run_peaks" if has_view else "(SELECT run_id AS measured_run_id, * FROM memory_peak_predictions)"
    return con.execute(f"""
        SELECT measured_run_id AS run_id, memory_model, param_bytes, grad_bytes, optim_bytes, activation_bytes, buffer_bytes,
               overhead_bytes, peak_bytes, peak_phase
        FROM {source} ORDER BY run_id, memory_model""").df()


def memory_measured_and_modeled(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Measured bytes held beside two models for the same model, world size and dtype.

    The modeled rows are the terms the predictions stage stored for the same run
    (``memory_peak_predictions``, :func:`modeled_memory_terms`): nothing is computed here.

    ``memory_model`` names the model of a modeled row: ``ZeRO paper`` (the paper's bytes per parameter,
    :func:`~shardscope.costmodel.memory_model.predict_memory`) or ``implementation`` (what this
    code's strategies keep, :func:`~shardscope.costmodel.modeled.implementation_memory`: DeepSpeed
    keeps an fp32 master partition even in fp32, so its optimizer state is 12/N bytes per
    parameter, not 8/N). ``rest_bytes`` is the measured peak minus what the training state
    holds (activations, buffers, the runtime itself), never below 0 (a peak method that misses
    part of the state cannot make the rest negative); ``capacity_bytes`` the GPU's memory where
    the topology or the GPU's name gives it.
    """
    measured = measured_memory(con, keep_run_id=True)
    modeled = {(r["run_id"], r["memory_model"]): r for r in modeled_memory_terms(con).to_dict("records")}
    rows = []
    for rec in measured.to_dict("records"):
        run_id = rec.pop("run_id")
        capacity = device_capacity_bytes(rec.pop("device_type"), rec.pop("devices"), rec.pop("gpu_memory_bytes"))
        peak = rec["peak_memory_bytes"]
        rest = max(peak - rec["held_bytes"], 0) if pd.notna(peak) else None
        rows.append({**rec, "method": "measured", "memory_model": None, "rest_bytes": rest, "capacity_bytes": capacity})
        for name in MEMORY_MODELS:
            terms = modeled.get((run_id, name))
            if terms is None:
                continue
            states = {k: int(terms[k]) for k in ("param_bytes", "grad_bytes", "optim_bytes")}
            rows.append({**rec, **states, "activation_bytes": terms["activation_bytes"], "buffer_bytes": terms["buffer_bytes"],
                         "tracked_peak_bytes": terms["peak_bytes"], "method": "modeled", "memory_model": name,
                         "held_bytes": sum(states.values()), "peak_memory_bytes": None, "peak_memory_method": None,
                         "rest_bytes": None, "capacity_bytes": capacity})
    columns = [c for c in measured.columns if c not in ("run_id", "device_type", "devices", "gpu_memory_bytes")]
    return pd.DataFrame(rows, columns=[*columns, "method", "memory_model", "rest_bytes", "capacity_bytes"])


#: training_runs columns added with repeats and accumulation (issue 17); NULL where a database predates them.
_CI_COLUMNS = ("repeats", "ci95_low_tokens_per_s", "ci95_high_tokens_per_s", "grad_accum")


def _ci_select(con: duckdb.DuckDBPyConnection) -> str:
    present = {c for (c,) in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() AND schema_name = 'main' "
        "AND table_name = 'training_runs'").fetchall()}
    return ", ".join(f"tr.{c}" if c in present else f"NULL::DOUBLE AS {c}" for c in _CI_COLUMNS)


def strategy_speed(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Each strategy's latest run, with step time, tokens/s and bytes held relative to DDP as
    :func:`shardscope.results.views.strategy_vs_ddp_sql` defines it (the latest DDP run on the same host,
    model, world size, placement and transport, if it finished; else NULL ratios), and the 95% interval of its
    tokens/s over repeats (absolute, and relative to DDP's median; NULL for one repeat). ``condition`` is the
    placement without the best-micro-batch mark, ``at_best_microbatch`` whether the run is its strategy's at its own
    best micro-batch (figure 4 compares those per condition)."""
    rows = strategy_vs_ddp_sql("all_runs", f"{FABRIC_SQL} AS fabric, {GPU_MODEL_SQL} AS gpu_model, tr.micro_batch, "
                                           f"{_ci_select(con)}")
    return con.execute(f"""
        SELECT host, fabric, gpu_model, model, world_size, placement, transport, strategy, outcome, micro_batch, grad_accum,
               median_step_time_s, tokens_per_s, step_time_vs_ddp, tokens_per_s_vs_ddp,
               held_bytes, held_bytes_vs_ddp, peak_memory_bytes,
               repeats, ci95_low_tokens_per_s, ci95_high_tokens_per_s,
               ci95_low_tokens_per_s / ddp_tokens_per_s AS ci95_low_vs_ddp,
               ci95_high_tokens_per_s / ddp_tokens_per_s AS ci95_high_vs_ddp,
               -- figure 4's fabric condition (placement without the best-micro-batch mark) and whether the run is
               -- its strategy's run at its own best micro-batch (issue 17)
               regexp_replace(placement, '{BEST_MICROBATCH_SUFFIX}$', '') AS condition,
               placement LIKE '%{BEST_MICROBATCH_SUFFIX}' AS at_best_microbatch
        FROM ({rows})
        QUALIFY row_number() OVER (PARTITION BY host, model, world_size, placement, transport, strategy
                                   ORDER BY measured_at DESC NULLS LAST, run_id DESC) = 1
        ORDER BY host, model, world_size, placement, transport, strategy""").df()


#: How far below the median of its kind a machine may be before its verdict is ``slow`` (and above: ``fast``).
PEER_TOLERANCE = 0.10


def machine_ranking(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Each machine against the others of its kind (fabric and GPU model): "which of my nodes is slow?".

    Two measures per machine, each its latest run: the all-reduce peak bus bandwidth at the
    largest world size it measured (default transport), and DDP's tokens/s per model and world
    size. ``vs_kind_median`` is the machine's value over the median of the machines of its kind
    with the same measure; ``verdict`` is ``slow`` below 1 - :data:`PEER_TOLERANCE`, ``fast``
    above 1 + it, else ``ok``, and ``no peers`` for the only machine of its kind; ``rank`` 1 is
    the slowest of its kind and measure.
    """
    df = con.execute(f"""
        WITH ours AS (
            SELECT r.*, {FABRIC_SQL} AS kind_fabric, {GPU_MODEL_SQL} AS gpu_model FROM all_runs r
            WHERE r.source = 'measured' AND r.host IS NOT NULL),
        per_run AS (
            SELECT r.host, r.kind_fabric AS fabric, r.gpu_model, c.world_size, max(c.busbw_gbps) AS value,
                   r.run_id, r.measured_at
            FROM all_collectives c JOIN ours r USING (run_id)
            WHERE c.op = 'all_reduce' AND coalesce(r.transport, 'default') = 'default'
            GROUP BY ALL),
        coll AS (
            SELECT host, fabric, gpu_model, 'all_reduce peak busbw' AS measure, world_size || ' ranks' AS setting,
                   value, 'GB/s' AS unit, run_id, measured_at
            FROM per_run
            QUALIFY world_size = max(world_size) OVER (PARTITION BY host, fabric, gpu_model)
                AND row_number() OVER (PARTITION BY host, fabric, gpu_model, world_size
                                       ORDER BY measured_at DESC NULLS LAST, run_id DESC) = 1),
        train AS (
            SELECT r.host, r.kind_fabric AS fabric, r.gpu_model, 'DDP tokens/s' AS measure,
                   t.model || ' on ' || t.world_size || ' ranks' AS setting, t.tokens_per_s AS value, 'tokens/s' AS unit,
                   r.run_id, r.measured_at
            FROM training_runs t JOIN ours r USING (run_id)
            WHERE t.strategy = 'ddp' AND t.outcome = 'ok' AND t.tokens_per_s IS NOT NULL
            QUALIFY row_number() OVER (PARTITION BY host, fabric, gpu_model, setting ORDER BY measured_at DESC NULLS LAST, run_id DESC) = 1),
        both_ AS (SELECT * EXCLUDE (run_id, measured_at) FROM coll UNION ALL SELECT * EXCLUDE (run_id, measured_at) FROM train)
        SELECT fabric, gpu_model, measure, setting, host, value, unit,
               count(*) OVER kind AS machines_of_kind, median(value) OVER kind AS kind_median,
               value / median(value) OVER kind AS vs_kind_median,
               rank() OVER (PARTITION BY fabric, gpu_model, measure, setting ORDER BY value, host) AS rank
        FROM both_
        WINDOW kind AS (PARTITION BY fabric, gpu_model, measure, setting)
        ORDER BY fabric, gpu_model, measure, setting, rank, host""").df()
    ratio = df["vs_kind_median"]
    df["verdict"] = ["no peers" if n < 2 else "slow" if r < 1 - PEER_TOLERANCE else "fast" if r > 1 + PEER_TOLERANCE
                     else "ok" for n, r in zip(df["machines_of_kind"], ratio)]
    return df


def reference_runs(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The reference runs loaded (label, fabric, op, ranks, devices, source file), for the report."""
    return con.execute("""
        SELECT r.label, r.fabric, any_value(c.op) AS op, r.world_size, r.devices, r.job_id
        FROM all_runs r JOIN all_collectives c USING (run_id)
        WHERE r.source = 'reference'
        GROUP BY ALL ORDER BY r.label, op""").df()
