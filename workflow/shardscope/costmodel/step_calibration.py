"""The step model's compute rate and overlap calibrated from the user's own measured training runs.

The uncalibrated step model assumes :data:`~shardscope.costmodel.step.DEFAULT_MFU` and
:data:`~shardscope.costmodel.step.DEFAULT_OVERLAP`, constants no measurement checked. Where a
results database holds measured training runs of several strategies of one job (same model,
world size, dtype, micro-batch and sequence length) and measured collective sweeps at that
world size, :func:`calibrate_steps` fits, per such job,

- the **compute rate** (FLOP/s actually reached: ``peak × MFU``; MFU itself where the GPU's peak
  is known, on CPU processes there is none and the rate is reported alone), and
- the **overlap** (share of a collective's time hidden behind compute of its phase), and
- the **host overhead per collective call** (``call_overhead_s``: framework dispatch and buffer
  copies around each call, FSDP2's and DeepSpeed's hooks, which hide behind nothing; what the
  sweep's alpha, timed on bare collectives, does not see), and
- the **host seconds per Python call** (``host_call_s``), times the Python function calls each run
  recorded in one untimed step (``training_runs.host_calls_per_step``,
  :mod:`shardscope.training.host_calls`): the frameworks' host work that scales with their hooks
  (ZeRO-3 hooks every submodule, FSDP2 every unit, ZeRO-1/2 every parameter's gradient) and
  hides behind nothing; 0 where the runs recorded no count (older databases),

by least squares over the strategies (non-negative least squares on the relative errors per overlap of a grid,
the overlap with the smallest squared log error kept: :func:`_fit`), with each
strategy's collectives those its run recorded (``training_comm``; the modeled volumes in the
run's reduce dtype where none were recorded) and each call timed by an alpha-beta fit of the
measured sweep of that op and world size (:func:`shardscope.costmodel.calibrate.calibrate`
against a nominal 1 GB/s, so its efficiency is the measured bandwidth; an op without a sweep
is timed as an all-reduce of its size, which moves at least as much). Four parameters over the strategies: the fit is checked in-sample (each strategy's modeled step against its measured
one) and held out (each strategy predicted from a fit on the others), and the model's
strategy ranking against the measured one (:func:`shardscope.costmodel.ledger.ranking_agreement`).

:func:`store_calibrations` keeps them in the database itself (tables ``step_calibrations``, one row per
run a calibration was fitted on, and ``collective_calibration_checks``; :mod:`shardscope.results.calibrations`);
:func:`latest_calibration` reads the newest one for a job.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from shardscope.contracts.strategies import WORKER_ADAMW, WORKER_DDP_BUCKET_VIEW
from shardscope.costmodel.step import RecordedCollective, StepAssumptions, predict_step

#: Overlap values tried by the fit (0, 0.1, ..., 1).
OVERLAP_GRID = tuple(i / 10 for i in range(11))
#: Fewest strategies of one job a calibration needs (up to four parameters are fitted).
MIN_STRATEGIES = 4
#: Nominal bandwidth the collective fits are made against (GB/s): their efficiency is then GB/s.
_NOMINAL_GBPS = 1.0

_TRAINING = """
    SELECT t.run_id, t.strategy, t.model, t.world_size, coalesce(t.dtype, 'float32') AS dtype, t.micro_batch, t.seq_len,
           t.median_step_time_s AS measured, coalesce(t.reduce_dtype, t.dtype, 'float32') AS reduce_dtype, r.host,
           {intervals}, {host_calls}
    FROM training_runs t JOIN runs r ON r.run_id = t.run_id
    WHERE r.source = 'measured' AND t.outcome = 'ok' AND t.median_step_time_s > 0
      AND t.micro_batch IS NOT NULL AND t.seq_len IS NOT NULL
    ORDER BY t.model, t.world_size, t.strategy, r.measured_at"""
_RECORDED = "SELECT run_id, op, sum(calls) AS calls, sum(size_bytes) AS size_bytes FROM training_comm GROUP BY run_id, op"
_SWEEPS = """
    SELECT c.op, c.world_size, c.size_bytes, c.time_s, r.host
    FROM collectives c JOIN runs r ON r.run_id = c.run_id
    WHERE r.source = 'measured' AND coalesce(r.transport, 'default') = 'default' AND c.time_s > 0"""
@dataclass(frozen=True)
class StepSample:
    """One measured training run, with what the step model needs to predict it."""

    run_id: str
    strategy: str
    model: str
    world_size: int
    dtype: str
    micro_batch: int
    seq_len: int
    measured_s: float
    reduce_dtype: str
    host: str | None = None
    recorded: tuple[RecordedCollective, ...] = ()
    ci95_s: tuple[float, float] | None = None
    """The run's own 95% confidence interval of the median step time (over its repeats), where it recorded one."""
    host_calls: int | None = None
    """Python function calls of one step on rank 0, where the run recorded them (``host_calls_per_step``)."""


@dataclass(frozen=True)
class StepCalibration:
    """Compute rate and overlap fitted on one job's strategies, and how well the step model then fits them."""

    host: str | None
    model: str
    world_size: int
    dtype: str
    micro_batch: int
    seq_len: int
    effective_flops: float
    """FLOP/s reached (peak × MFU)."""
    overlap: float
    call_overhead_s: float
    """Host seconds per collective call that hide behind nothing."""
    host_call_s: float
    """Host seconds per recorded Python function call of a step (0 where no run recorded a count)."""
    mfu: float | None
    """effective_flops / the GPU's peak; None where no peak is known (CPU processes)."""
    run_ids: tuple[str, ...]
    strategies: list[dict[str, Any]] = field(default_factory=list)
    """Per strategy: measured, modeled (in-sample) and held-out step times, the bytes' source."""
    ranking: dict[str, Any] = field(default_factory=dict)

    @property
    def worst_error(self) -> float:
        """Largest in-sample |modeled / measured - 1|."""
        return max(abs(s["modeled_s"] / s["measured_s"] - 1) for s in self.strategies)

    @property
    def median_error(self) -> float:
        """Median in-sample |modeled / measured - 1|."""
        errors = sorted(abs(s["modeled_s"] / s["measured_s"] - 1) for s in self.strategies)
        mid = len(errors) // 2
        return errors[mid] if len(errors) % 2 else (errors[mid - 1] + errors[mid]) / 2

    @property
    def held_out_worst_error(self) -> float:
        """Largest |held-out modeled / measured - 1|."""
        return max(abs(s["held_out_s"] / s["measured_s"] - 1) for s in self.strategies)

    def assumptions(self, base: StepAssumptions | None = None, peak_flops: float | None = None) -> StepAssumptions:
        """Step assumptions with this calibration's MFU (for ``peak_flops``, else its own) and overlap."""
        from dataclasses import replace

        peak = peak_flops or (self.effective_flops / self.mfu if self.mfu else None)
        mfu = min(1.0, self.effective_flops / peak) if peak else (base or StepAssumptions()).mfu
        return replace(base or StepAssumptions(), mfu=mfu, overlap=self.overlap, call_overhead_s=self.call_overhead_s,
                       host_call_s=self.host_call_s)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types, with the summary errors."""
        return {**asdict(self), "median_error": self.median_error, "worst_error": self.worst_error,
                "held_out_worst_error": self.held_out_worst_error}


def _rows(con: Any, sql: str) -> list[dict[str, Any]]:
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def load_samples(con: Any) -> list[StepSample]:
    """Measured ok training runs of preset models, with their recorded collectives (empty where none were recorded)."""
    from shardscope.contracts.models import PRESETS

    tables = {name for (name,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if not {"training_runs", "runs"} <= tables:
        return []
    recorded: dict[str, list[RecordedCollective]] = {}
    if "training_comm" in tables:
        for row in _rows(con, _RECORDED):
            if int(row["calls"]) > 0 and int(row["size_bytes"]) > 0:
                recorded.setdefault(str(row["run_id"]), []).append(
                    RecordedCollective(str(row["op"]), int(row["calls"]), int(row["size_bytes"])))
    return [StepSample(str(r["run_id"]), str(r["strategy"]), str(r["model"]), int(r["world_size"]), str(r["dtype"]),
                       int(r["micro_batch"]), int(r["seq_len"]), float(r["measured"]), str(r["reduce_dtype"]), r["host"],
                       tuple(recorded.get(str(r["run_id"]), ())), _interval(r.get("ci_low"), r.get("ci_high")),
                       int(r["host_calls"]) if r.get("host_calls") is not None and r["host_calls"] >= 0 else None)
            for r in _rows(con, _TRAINING.format(intervals=_interval_columns(con), host_calls=_host_calls_column(con)))
            if str(r["model"]) in PRESETS]


def _interval_columns(con: Any) -> str:
    """The SELECT terms of a run's step-time confidence interval (NULL in a database without those columns)."""
    present = {c for (c,) in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'training_runs'")
               .fetchall()}
    if {"ci95_low_step_time_s", "ci95_high_step_time_s"} <= present:
        return "t.ci95_low_step_time_s AS ci_low, t.ci95_high_step_time_s AS ci_high"
    return "NULL AS ci_low, NULL AS ci_high"


def _host_calls_column(con: Any) -> str:
    """The SELECT term of a run's recorded Python calls per step (NULL in a database without that column)."""
    present = con.execute("SELECT count(*) FROM information_schema.columns WHERE table_name = 'training_runs' "
                          "AND column_name = 'host_calls_per_step'").fetchone()[0]
    return "t.host_calls_per_step AS host_calls" if present else "NULL AS host_calls"


def _interval(low: Any, high: Any) -> tuple[float, float] | None:
    """(low, high) where both bounds are positive finite numbers, else None."""
    try:
        lo, hi = float(low), float(high)
    except (TypeError, ValueError):
        return None
    return (lo, hi) if 0 < lo <= hi and math.isfinite(hi) else None


def collective_timers(con: Any) -> dict[tuple[str | None, int], Callable[[str, int], float]]:
    """Per (host, world size): time of one call of (op, size) from alpha-beta fits of the measured sweeps."""
    from shardscope.costmodel.calibrate import calibrate
    from shardscope.errors import UserError

    groups: dict[tuple[str | None, int], list[dict[str, Any]]] = {}
    for row in _rows(con, _SWEEPS):
        groups.setdefault((row["host"], int(row["world_size"])), []).append(row)
    timers = {}
    for key, rows in groups.items():
        try:
            fits = calibrate(rows, lambda op, n: _NOMINAL_GBPS)
        except UserError:
            continue
        fallback = fits.get("all_reduce") or next(iter(fits.values()))

        def timer(op: str, size: int, fits: Mapping[str, Any] = fits, fallback: Any = fallback) -> float:
            return (fits.get(op) or fallback).time_s(size, _NOMINAL_GBPS)

        timers[key] = timer
    return timers


def _assumptions(sample: StepSample) -> StepAssumptions:
    return StepAssumptions(micro_batch=sample.micro_batch, seq_len=sample.seq_len, mfu=1.0,
                           comm_bytes=2 if sample.dtype == "bfloat16" else 4,
                           reduce_bytes=2 if sample.reduce_dtype == "bfloat16" else 4, dtype=sample.dtype,
                           ddp_bucket_view=WORKER_DDP_BUCKET_VIEW, adamw=WORKER_ADAMW)


def _workload(sample: StepSample, timer: Callable[[str, int], float]) -> tuple[float, dict[str, float], int, int]:
    """(FLOPs of one GPU's step, seconds of communication per phase, collective calls, recorded Python calls) of a sample."""
    from shardscope.contracts.models import PRESETS
    from shardscope.costmodel.step import messages_for, phase_comm_times, recorded_messages

    cfg, a = PRESETS[sample.model], _assumptions(sample)
    flops = cfg.flops_per_token(sample.seq_len) * sample.micro_batch * sample.seq_len
    host = sample.host_calls or 0
    if sample.world_size < 2:
        return flops, {}, 0, host
    messages = (recorded_messages(sample.strategy, cfg, a, sample.recorded) if sample.recorded
                else messages_for(sample.strategy, cfg, a))
    return flops, phase_comm_times(messages, timer), sum(m.count for m in messages), host


def _modeled(sample: StepSample, rate: float, overlap: float, timer: Callable[[str, int], float],
             call_overhead_s: float = 0.0, host_call_s: float = 0.0) -> float:
    """The step model's time of ``sample`` at compute ``rate`` (FLOP/s), ``overlap``, per-collective-call and
    per-Python-call host seconds (:func:`predict_step`)."""
    from dataclasses import replace

    from shardscope.contracts.models import PRESETS

    a = replace(_assumptions(sample), overlap=overlap, call_overhead_s=call_overhead_s, host_call_s=host_call_s)
    return predict_step(sample.strategy, sample.model, PRESETS[sample.model], sample.world_size, rate, timer, None, a,
                        recorded=sample.recorded or None, host_calls=sample.host_calls).step_time_s


#: Share of the compute a phase's collectives can hide behind (forward 1/3, backward 2/3, nothing after the step),
#: as :func:`shardscope.costmodel.step.exposed_comm_s` models it.
_WINDOWS = {"forward": 1.0 / 3.0, "backward": 2.0 / 3.0, "after_backward": 0.0, "after_step": 0.0}


def _fit(samples: Sequence[StepSample], timer: Callable[[str, int], float]) -> tuple[float, float, float, float]:
    """(FLOP/s, overlap, per-collective-call seconds, per-Python-call seconds) minimising the squared log errors
    over a grid of overlaps.

    For one overlap the step model is piecewise linear in (1/rate, per-call seconds, per-Python-call
    seconds): a phase's collectives hide ``overlap`` of their time unless its compute window is
    shorter, then the window. So each overlap is fitted by non-negative least squares on the
    relative errors (:func:`shardscope.costmodel.least_squares.nnls`), the clipped phases re-decided
    from the fitted rate until they settle; the overlap whose fit has the smallest squared log error
    wins. A run without a recorded Python-call count contributes 0 to that column (and where none
    has one, its coefficient is 0). Pure Python and a few milliseconds (the pipeline's
    step_calibration rule runs it after every collect). A rate of 0 means no overlap of the grid gave a positive one:
    :func:`calibrate_steps` then stores no calibration for the job and says why.
    """
    from shardscope.costmodel.least_squares import nnls
    from shardscope.costmodel.step import exposed_comm_s

    work = [(_workload(s, timer), s.measured_s) for s in samples]
    best = (math.inf, 0.0, 0.0, 0.0, 0.0)
    for overlap in OVERLAP_GRID:
        clipped = [dict.fromkeys(phases, False) for (_, phases, _, _), _ in work]
        inv_rate, per_call, per_host = 0.0, 0.0, 0.0
        for _ in range(8):
            rows, targets = [], []
            for ((flops, phases, calls, host), measured), clip in zip(work, clipped):
                slope, fixed = flops, 0.0
                for phase, t in phases.items():
                    if clip[phase] or _WINDOWS[phase] == 0.0:
                        slope -= _WINDOWS[phase] * flops
                        fixed += t
                    else:
                        fixed += (1.0 - overlap) * t
                rows.append([slope / measured, calls / measured, host / measured])
                targets.append((measured - fixed) / measured)
            try:
                (inv_rate, per_call, per_host), _ = nnls(rows, targets, required=[0])
            except ValueError:
                break
            settled = [{p: overlap * t > _WINDOWS[p] * flops * inv_rate for p, t in phases.items()}
                       for (flops, phases, _, _), _ in work]
            if settled == clipped:
                break
            clipped = settled
        if inv_rate <= 0:
            continue
        loss = 0.0
        for (flops, phases, calls, host), measured in work:
            compute = flops * inv_rate
            modeled = compute + exposed_comm_s(compute, phases, overlap) + calls * per_call + host * per_host
            loss += math.log(modeled / measured) ** 2
        if loss < best[0]:
            best = (loss, 1.0 / inv_rate, overlap, per_call, per_host)
    return best[1], best[2], best[3], best[4]


def calibrate_steps(con: Any, peak_flops: float | None = None,
                    host_calls: bool = True) -> tuple[list[StepCalibration], list[str]]:
    """One :class:`StepCalibration` per job with enough strategies and a measured sweep; and why others have none.

    ``host_calls=False`` ignores the runs' recorded Python calls (no host term: the fit as it was
    before runs recorded them), to show what the term changes.
    """
    from dataclasses import replace

    from shardscope.costmodel.ledger import ranking_agreement

    timers = collective_timers(con)
    jobs: dict[tuple[Any, ...], dict[str, StepSample]] = {}
    for s in load_samples(con):
        s = s if host_calls else replace(s, host_calls=None)
        jobs.setdefault((s.host, s.model, s.world_size, s.dtype, s.micro_batch, s.seq_len), {})[s.strategy] = s  # newest wins
    out, notes = [], []
    for key, by_strategy in sorted(jobs.items(), key=lambda kv: str(kv[0])):
        host, model, n, dtype, micro, seq = key
        samples = list(by_strategy.values())
        timer = timers.get((host, n))
        if n > 1 and timer is None:
            notes.append(f"{model} on {n} ranks ({host}): no measured collective sweep at that world size to time its collectives")
            continue
        if len(samples) < MIN_STRATEGIES:
            notes.append(f"{model} on {n} ranks ({host}): {len(samples)} strategies measured, a calibration needs {MIN_STRATEGIES}")
            continue
        timer = timer or (lambda op, size: 0.0)
        rate, overlap, per_call, per_host = _fit(samples, timer)
        held_out = {s.strategy: _fit([o for o in samples if o is not s], timer) for s in samples}
        unfitted = (["all runs"] if rate <= 0 else []) + [f"without {name}" for name, fit in held_out.items() if fit[0] <= 0]
        if unfitted:  # the step model cannot be calibrated on these runs: say so rather than store a broken fit
            notes.append(f"{model} on {n} ranks ({host}): no positive compute rate fits the runs "
                         f"({', '.join(unfitted)}); not calibrated")
            continue
        rows = []
        for s in samples:
            held = held_out[s.strategy]
            rows.append({"strategy": s.strategy, "run_id": s.run_id, "measured_s": s.measured_s,
                         "modeled_s": _modeled(s, rate, overlap, timer, per_call, per_host),
                         "held_out_s": _modeled(s, held[0], held[1], timer, held[2], held[3]),
                         "host_calls": s.host_calls,
                         "wire_bytes": "recorded" if s.recorded else f"modeled ({s.reduce_dtype} gradients)",
                         "measured_ci95_s": list(s.ci95_s) if s.ci95_s else None})
        ranking = ranking_agreement([{"model": model, "world_size": n, "strategy": r["strategy"], "measured": r["measured_s"],
                                      "modeled": r["modeled_s"], "ci95": r["measured_ci95_s"]} for r in rows])
        out.append(StepCalibration(host, model, n, dtype, micro, seq, rate, overlap, per_call, per_host,
                                   rate / peak_flops if peak_flops else None,
                                   tuple(r["run_id"] for r in rows), rows, ranking))
    return out, notes


def calibration_rows(calibrations: Sequence[StepCalibration], created_at: str) -> list[dict[str, Any]]:
    """The ``step_calibrations`` rows of ``calibrations``: one per measured run each was fitted on.

    A calibration's id is a digest of its fitted values and per-run results, so storing the same fit
    again replaces its rows instead of adding a copy.
    """
    import hashlib

    rows = []
    for c in calibrations:
        detail = c.to_dict()
        cid = hashlib.sha256(json.dumps(detail, sort_keys=True, default=str).encode()).hexdigest()[:16]
        r = c.ranking
        for s in c.strategies:
            rows.append({"calibration_id": cid, "created_at": created_at, "run_id": s["run_id"], "strategy": s["strategy"],
                         "host": c.host, "model": c.model, "world_size": c.world_size, "dtype": c.dtype,
                         "micro_batch": c.micro_batch, "seq_len": c.seq_len, "effective_flops_per_s": c.effective_flops,
                         "overlap": c.overlap, "call_overhead_s": c.call_overhead_s, "host_call_s": c.host_call_s,
                         "host_calls_per_step": s.get("host_calls"), "mfu": c.mfu,
                         "measured_s": s["measured_s"], "modeled_s": s["modeled_s"], "held_out_s": s["held_out_s"],
                         "measured_ci95_low_s": (s.get("measured_ci95_s") or (None, None))[0],
                         "measured_ci95_high_s": (s.get("measured_ci95_s") or (None, None))[1],
                         "wire_source": s["wire_bytes"], "ranking_agree": r["agree"], "ranking_pairs": r["pairs_ranked"],
                         "ranking_within_noise": r["within_noise"], "ranking_noise": r["noise"],
                         "ranking_disagree": "\n".join(r["disagree"]) or None})
    return rows


def check_rows(groups: Sequence[Any], calibrated_on: str | None, fitted_run: str | None,
               created_at: str) -> list[dict[str, Any]]:
    """The ``collective_calibration_checks`` rows of the ledger's calibrated CPU check (:func:`costmodel.ledger.calibrated_check`)."""
    import hashlib

    if not groups or not calibrated_on or not fitted_run:
        return []
    detail = json.dumps([calibrated_on, [asdict(g) for g in groups]], sort_keys=True, default=str)
    cid = hashlib.sha256(detail.encode()).hexdigest()[:16]
    return [{"calibration_id": cid, "created_at": created_at, "run_id": fitted_run, "calibrated_on": calibrated_on,
             "op_group": g.group, "pairs": g.pairs, "median_ratio": g.median_ratio, "median_error": g.median_error,
             "worst_error": g.worst_error, "worst_ratio": g.worst_ratio} for g in groups]


def store_calibrations(db: str | os.PathLike[str], calibrations: Sequence[StepCalibration],
                       created_at: str | None = None, with_collective_check: bool = True) -> dict[str, int]:
    """Store ``calibrations`` in ``db`` (tables ``step_calibrations`` and ``collective_calibration_checks``); rows per table.

    With ``with_collective_check`` the ledger's check of the collective model after calibration on
    one measured CPU sweep is stored beside them, so the report shows it without fitting anything.
    """
    from shardscope.costmodel.ledger import calibrated_sweep_check
    from shardscope.results.calibrations import store_calibration_rows
    from shardscope.results.store import connect_readonly

    stamp = created_at or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    checks: list[dict[str, Any]] = []
    if with_collective_check:
        with connect_readonly(db) as con:
            groups, calibrated_on, fitted_run = calibrated_sweep_check(con)
        checks = check_rows(groups, calibrated_on, fitted_run, stamp)
    return store_calibration_rows(db, calibration_rows(calibrations, stamp), checks)


def latest_calibration(db: str | os.PathLike[str], model: str | None = None,
                       world_size: int | None = None) -> dict[str, Any] | None:
    """The newest step calibration stored in ``db`` (of ``model`` on ``world_size`` ranks when given, else the newest), or None."""
    from shardscope.results.calibrations import stored_step_calibration

    return stored_step_calibration(db, model, world_size)


def format_calibrations(calibrations: Sequence[StepCalibration], notes: Sequence[str]) -> str:
    """The calibrations as text: the fitted values, then per strategy measured / modeled / held out."""
    lines = []
    for c in calibrations:
        mfu = f"MFU {c.mfu:.3f}" if c.mfu is not None else "no peak known: MFU not defined"
        lines.append(f"{c.model} on {c.world_size} ranks ({c.host}, {c.dtype}, micro-batch {c.micro_batch}, seq {c.seq_len}): "
                     f"compute {c.effective_flops / 1e9:.2f} GFLOP/s ({mfu}), overlap {c.overlap:.2f}, "
                     f"{c.call_overhead_s * 1e3:.2f} ms per collective call, "
                     f"{c.host_call_s * 1e6:.2f} us per recorded Python call, "
                     f"from {len(c.run_ids)} measured runs")
        lines.append(f"  {'strategy':<14} {'measured s':>11} {'95% CI of measured':>19} {'modeled s':>10} {'error':>7} "
                     f"{'held out s':>11} {'error':>7} {'Py calls':>8}  wire bytes")
        for s in c.strategies:
            ci = s.get("measured_ci95_s")
            shown = f"{ci[0]:.3f}-{ci[1]:.3f} ({(ci[1] - ci[0]) / 2 / s['measured_s']:.0%})" if ci else "-"
            lines.append(f"  {s['strategy']:<14} {s['measured_s']:>11.4f} {shown:>19} {s['modeled_s']:>10.4f} "
                         f"{s['modeled_s'] / s['measured_s'] - 1:>+7.1%} {s['held_out_s']:>11.4f} "
                         f"{s['held_out_s'] / s['measured_s'] - 1:>+7.1%} {s.get('host_calls') or '-':>8}  {s['wire_bytes']}")
        r = c.ranking
        lines.append(f"  median |error| {c.median_error:.1%}, worst {c.worst_error:.1%} (held out: worst {c.held_out_worst_error:.1%}); "
                     f"ranking: {r['agree']} of {r['pairs_ranked']} pairs ordered as measured "
                     f"({r['within_noise']} within {r['noise']:.0%} or within both runs' 95% CIs: not ranked)")
        lines += [f"  disagrees: {d}" for d in r["disagree"]]
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines) if lines else "no measured training runs to calibrate the step model on"
