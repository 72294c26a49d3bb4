"""The cost model's ledger of its own error: stored predictions beside the measurements of the same jobs.

``shardscope accuracy --db results.duckdb`` reads a results database (torch-free) and pairs

- each **measured collective row** (``collectives`` of runs with source ``measured``) with the
  **stored prediction** of the same op, world size, message size and transport
  (``collective_predictions``, made by ``shardscope predict plan`` before the runs; when several
  prediction runs match, the one made for the measured run's own topology is preferred), and
- each **measured training run** with outcome ok (``training_runs.median_step_time_s``) with the
  stored step prediction of the same strategy, model and GPU count (``strategy_predictions``).

Per op (collectives, on bus bandwidth) and per strategy (training, on step time) it reports the
ratio modeled/measured (median), the median and the worst |ratio - 1|, and the same overall.
For training it also says whether the model ranks the strategies as measured, counting only the
pairs whose measured step times differ by more than :data:`RANKING_NOISE` (closer pairs are
within the noise of a few timed steps, and no ranking is claimed for them).

On CPU processes (gloo) the stored predictions use placeholder constants, so the ledger also
checks the model **after calibration on one sweep**: the alpha-beta fit of
:func:`shardscope.costmodel.calibrate.calibrate` on the measured all_reduce sweep (the first op
when there is none) is applied to every other measured sweep of the same kind of job, and their
busbw errors are reported per op (``calibrated_on`` names the sweep; its own fit error is its row).

The pairing queries and their summaries live in :mod:`shardscope.results.ledger` (the report reads
them from there); this module adds the calibrated CPU check, which fits the collective model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from shardscope.results.ledger import (  # noqa: F401  (ranking_agreement, RANKING_NOISE: part of this module's API)
    RANKING_NOISE,
    ErrorSummary,
    Ledger,
    ranking_agreement,
    stored_ledger,
    summarize,
)

_CPU_ROWS = """
    SELECT c.op, c.world_size, c.size_bytes, c.time_s, c.busbw_gbps, r.run_id
    FROM collectives c JOIN runs r ON r.run_id = c.run_id
    WHERE r.source = 'measured' AND (r.device_type = 'cpu' OR r.backend = 'gloo') AND c.time_s > 0
    ORDER BY c.op, c.world_size, r.run_id, c.size_bytes"""


def calibrated_check(rows: Sequence[Mapping[str, Any]]) -> tuple[list[ErrorSummary], str | None]:
    """Errors of measured CPU sweeps predicted after calibrating the gloo model on one of them (module docstring)."""
    groups, calibrated_on, _ = _calibrated(rows)
    return groups, calibrated_on


def calibrated_sweep_check(con: Any) -> tuple[list[ErrorSummary], str | None, str | None]:
    """:func:`calibrated_check` of a database's measured CPU sweeps, with the run id of the sweep it was fitted on."""
    tables = {name for (name,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if not {"collectives", "runs"} <= tables:
        return [], None, None
    cur = con.execute(_CPU_ROWS)
    names = [d[0] for d in cur.description]
    return _calibrated([dict(zip(names, row, strict=True)) for row in cur.fetchall()])


def _calibrated(rows: Sequence[Mapping[str, Any]]) -> tuple[list[ErrorSummary], str | None, str | None]:
    from shardscope.contracts.factors import busbw_factor
    from shardscope.costmodel.calibrate import calibrate
    from shardscope.costmodel.collectives import Job, predict_collective
    from shardscope.costmodel.machine import build_machine
    from shardscope.errors import UserError

    sweeps: dict[tuple[str, int, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        sweeps.setdefault((str(row["op"]), int(row["world_size"]), str(row["run_id"])), []).append(row)
    usable = {key: group for key, group in sweeps.items() if key[1] >= 2 and len({r["size_bytes"] for r in group}) >= 3}
    if len(usable) < 2:
        return [], None, None
    machine = build_machine({"gpus": [], "links": [], "fabric": "cpu"})

    def model_algbw(op: str, n: int) -> float:
        return predict_collective(op, 1 << 40, Job(machine, (), cpu_ranks=n)).algbw_gbps

    key = min(usable, key=lambda k: (k[0] != "all_reduce", k[0], k[1], k[2]))
    try:
        fit = calibrate(usable[key], model_algbw)[key[0]]
    except (UserError, KeyError):
        return [], None, None
    pairs: dict[str, list[tuple[float, float]]] = {}
    for (op, n, run), group in usable.items():
        label = f"{op} (fitted)" if (op, n, run) == key else op
        for row in group:
            size = float(row["size_bytes"])
            time_s = fit.alpha_s + size / (fit.efficiency * model_algbw(op, n) * 1e9)
            modeled = size / time_s / 1e9 * busbw_factor(op, n)
            if float(row["busbw_gbps"]) > 0:
                pairs.setdefault(label, []).append((float(row["busbw_gbps"]), modeled))
    held_out = [p for label, ps in pairs.items() if not label.endswith("(fitted)") for p in ps]
    out = [summarize(label, ps) for label, ps in sorted(pairs.items())]
    if held_out:
        out.append(summarize("held out", held_out))
    return out, (f"{key[0]} on {key[1]} ranks (run {key[2]}): alpha {fit.alpha_s * 1e6:.1f} us, "
                 f"{fit.efficiency:.3f} of the placeholder bandwidth"), key[2]


def ledger(con: Any) -> Ledger:
    """The :class:`Ledger` of a results database opened read-only: the stored pairs and the calibrated CPU check."""
    calibrated, calibrated_on, _ = calibrated_sweep_check(con)
    return replace(stored_ledger(con), calibrated=calibrated, calibrated_on=calibrated_on)


def format_ledger(book: Ledger) -> str:
    """The ledger as text: one line per op / strategy, then the ranking agreement and notes."""
    lines = []
    for title, groups, what in (("collectives (bus bandwidth)", book.collectives, "op"),
                                ("training (step time)", book.training, "strategy")):
        if not groups:
            continue
        lines.append(f"{title}: modeled / measured")
        lines.append(f"  {what:<16} {'pairs':>6} {'median ratio':>13} {'median |err|':>13} {'worst |err|':>12}")
        for g in groups:
            lines.append(f"  {g.group:<16} {g.pairs:>6} {g.median_ratio:>13.2f} {g.median_error:>12.1%} "
                         f"{g.worst_error:>11.1%} (ratio {g.worst_ratio:.2f})")
    if book.calibrated:
        lines.append(f"cpu collectives after calibration on one sweep ({book.calibrated_on}): modeled / measured")
        lines.append(f"  {'op':<20} {'pairs':>6} {'median ratio':>13} {'median |err|':>13} {'worst |err|':>12}")
        for g in book.calibrated:
            lines.append(f"  {g.group:<20} {g.pairs:>6} {g.median_ratio:>13.2f} {g.median_error:>12.1%} "
                         f"{g.worst_error:>11.1%} (ratio {g.worst_ratio:.2f})")
    if book.ranking:
        r = book.ranking
        lines.append(f"strategy ranking: {r['agree']} of {r['pairs_ranked']} pairs ordered as measured "
                     f"({r['within_noise']} pairs within {r['noise']:.0%} of each other not ranked)")
        lines += [f"  disagrees: {d}" for d in r["disagree"]]
    lines += [f"note: {n}" for n in book.notes]
    return "\n".join(lines)
