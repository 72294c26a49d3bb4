"""The ledger's reading side: stored predictions paired with the measurements of the same jobs, summarized.

The queries and summaries that ``shardscope accuracy`` (:mod:`shardscope.costmodel.ledger`) and the
report's ledger section (:mod:`shardscope.paper.ledger`) share, so both read the same numbers. It
pairs

- each **measured collective row** (``collectives`` of runs with source ``measured``) with the
  **stored prediction** of the same op, world size, message size and transport
  (``collective_predictions``, made by ``shardscope predict plan`` before the runs; when several
  prediction runs match, the one made for the measured run's own topology is preferred), and
- each **measured training run** with outcome ok (``training_runs.median_step_time_s``) with the
  stored step prediction of the same strategy, model and GPU count (``strategy_predictions``),

and reports per op (collectives, on bus bandwidth) and per strategy (training, on step time) the
ratio modeled/measured (median), the median and the worst |ratio - 1|, and the same overall. For
training it also says whether the model ranks the strategies as measured, counting only the pairs
whose measured step times differ by more than :data:`RANKING_NOISE`. Nothing here models: the
predictions were stored by the predictions stage, the calibrations by ``calibrate-step --store``
(:mod:`shardscope.results.calibrations`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

#: Measured step times closer than this (relative) are not ranked: a few timed steps on a shared
#: machine vary by several percent.
RANKING_NOISE = 0.10

_COLLECTIVE_PAIRS = """
    WITH measured AS (
        SELECT c.op, c.world_size, c.size_bytes, c.busbw_gbps, coalesce(r.transport, 'default') AS transport,
               r.topology_hash, r.run_id
        FROM collectives c JOIN {runs} r ON r.run_id = c.run_id
        WHERE r.source = 'measured' AND c.busbw_gbps > 0),
    paired AS (
        SELECT m.op, m.world_size, m.size_bytes, m.transport, m.busbw_gbps AS measured, p.busbw_gbps AS modeled,
               m.run_id, p.algorithm,
               row_number() OVER (PARTITION BY m.run_id, m.size_bytes, m.busbw_gbps
                                  ORDER BY (p.topology_hash = m.topology_hash) DESC NULLS LAST, p.run_id) AS pick
        FROM measured m JOIN collective_predictions p
          ON p.op = m.op AND p.world_size = m.world_size AND p.size_bytes = m.size_bytes AND p.transport = m.transport)
    SELECT op, world_size, size_bytes, transport, measured, modeled, algorithm FROM paired WHERE pick = 1
    ORDER BY op, world_size, size_bytes"""

_TRAINING_PAIRS = """
    WITH paired AS (
        SELECT t.strategy, t.model, t.world_size, t.median_step_time_s AS measured, p.step_time_s AS modeled, t.run_id,
               row_number() OVER (PARTITION BY t.run_id
                                  ORDER BY (p.topology_hash = r.topology_hash) DESC NULLS LAST, p.run_id) AS pick
        FROM training_runs t JOIN {runs} r ON r.run_id = t.run_id
        JOIN strategy_predictions p ON p.strategy = t.strategy AND p.model = t.model AND p.gpus = t.world_size
        WHERE r.source = 'measured' AND t.outcome = 'ok' AND t.median_step_time_s > 0)
    SELECT strategy, model, world_size, measured, modeled FROM paired WHERE pick = 1
    ORDER BY model, world_size, strategy"""


@dataclass(frozen=True)
class ErrorSummary:
    """How far the model is from measurement on one group of pairs (ratio = modeled / measured)."""

    group: str
    pairs: int
    median_ratio: float
    median_error: float
    """Median of |ratio - 1|."""
    worst_error: float
    worst_ratio: float


@dataclass(frozen=True)
class Ledger:
    """The accuracy report: per op, per strategy, overall, and the ranking agreement."""

    collectives: list[ErrorSummary] = field(default_factory=list)
    training: list[ErrorSummary] = field(default_factory=list)
    ranking: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    calibrated: list[ErrorSummary] = field(default_factory=list)
    """CPU collectives predicted after an alpha-beta fit on one sweep (empty without CPU rows)."""
    calibrated_on: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types."""
        return asdict(self)


def summarize(group: str, pairs: Sequence[tuple[float, float]]) -> ErrorSummary:
    """The :class:`ErrorSummary` of (measured, modeled) pairs, all positive."""
    ratios = [modeled / measured for measured, modeled in pairs]
    errors = [abs(r - 1) for r in ratios]
    worst = max(range(len(ratios)), key=lambda i: errors[i])
    return ErrorSummary(group, len(ratios), statistics.median(ratios), statistics.median(errors), errors[worst], ratios[worst])


def grouped(rows: Sequence[Mapping[str, Any]], key: str) -> list[ErrorSummary]:
    """One :class:`ErrorSummary` per value of ``key`` (rows with ``measured`` and ``modeled``), and ``overall`` when several."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        groups.setdefault(str(row[key]), []).append((float(row["measured"]), float(row["modeled"])))
    out = [summarize(name, pairs) for name, pairs in sorted(groups.items())]
    if len(groups) > 1:
        out.append(summarize("overall", [p for pairs in groups.values() for p in pairs]))
    return out


def ranking_agreement(rows: Sequence[Mapping[str, Any]], noise: float = RANKING_NOISE) -> dict[str, Any]:
    """Pairs of strategies (same model and GPU count) whose measured gap exceeds the noise: how many the model orders alike.

    The noise is ``noise`` (relative) and, where both rows carry their run's 95% interval of the
    median step time (``ci95``: (low, high)), those intervals too: a pair whose intervals overlap is
    within the noise of its own measurements, however far apart the medians are.
    """
    by_job: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for row in rows:
        by_job.setdefault((str(row["model"]), int(row["world_size"])), []).append(row)
    agree, disagree, within_noise = 0, [], 0
    for (model, n), group in sorted(by_job.items()):
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                fast, slow = (a, b) if a["measured"] <= b["measured"] else (b, a)
                intervals = fast.get("ci95"), slow.get("ci95")
                overlapping = all(intervals) and intervals[0][1] >= intervals[1][0]
                if slow["measured"] / fast["measured"] - 1 <= noise or overlapping:
                    within_noise += 1
                elif fast["modeled"] < slow["modeled"]:
                    agree += 1
                else:
                    disagree.append(f"{model} on {n}: measured {fast['strategy']} faster than {slow['strategy']}, modeled the reverse")
    return {"pairs_ranked": agree + len(disagree), "agree": agree, "disagree": disagree, "within_noise": within_noise,
            "noise": noise}


#: The relations :func:`stored_ledger` may take its runs from: every stored run, or the ``all_runs`` view that
#: :func:`shardscope.results.sources.open_results` makes (the current plan's runs when it is given a selection).
LEDGER_RUNS = ("runs", "all_runs")


def stored_ledger(con: Any, runs: str = "runs") -> Ledger:
    """The :class:`Ledger` of the stored pairs of a results database opened read-only (no calibrated check), over
    the measured runs of ``runs`` (one of :data:`LEDGER_RUNS`: the report passes ``all_runs``, its run selection)."""
    if runs not in LEDGER_RUNS:
        raise ValueError(f"runs must be one of {', '.join(LEDGER_RUNS)}, got {runs!r}")
    tables = {name for (name,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    notes = []
    collective_rows: list[dict[str, Any]] = []
    training_rows: list[dict[str, Any]] = []
    if {"collectives", "collective_predictions", "runs"} <= tables:
        cur = con.execute(_COLLECTIVE_PAIRS.format(runs=runs))
        names = [d[0] for d in cur.description]
        collective_rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    if {"training_runs", "strategy_predictions", "runs"} <= tables:
        cur = con.execute(_TRAINING_PAIRS.format(runs=runs))
        names = [d[0] for d in cur.description]
        training_rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    if not collective_rows:
        notes.append("no measured collective row has a stored prediction of the same op, world size, size and transport "
                     "(run `shardscope predict plan` and collect its document with the measurements)")
    elif any(str(r["algorithm"]).endswith("gloo") for r in collective_rows):
        notes.append("collectives on the cpu fabric are predicted with the model's gloo placeholders (not calibrated): "
                     "their error says how far those placeholders are from this machine")
    if not training_rows:
        notes.append("no measured training run has a stored step prediction (the step model predicts GPU machines only)")
    ranking = ranking_agreement(training_rows) if training_rows else {}
    return Ledger(grouped(collective_rows, "op"), grouped(training_rows, "strategy"), ranking, notes)
