"""Summary numbers of one message-size sweep, replacing nccl-tests' "Avg bus bandwidth".

nccl-tests' footer averages the busbw of every printed size, so it mostly measures how many
small (latency-bound) sizes the sweep had (NVIDIA/nccl-tests#115: "This has no meaning if you
run with -b 8 -e 1G"). The numbers here say what a sweep shows:

- **plateau busbw**: the median busbw over the *plateau sizes*, the sizes whose busbw is within
  :data:`PLATEAU_TOLERANCE` (5%) of the sweep's maximum. Sizes are compared on their median over
  repeats. The plateau needs at least one size at or above :data:`MIN_PLATEAU_BYTES` (1 MiB);
  a sweep that stops earlier has no plateau (``None``, with the reason).
- **size to 90%**: the smallest size whose busbw reaches 90% of the plateau.
- **latency floor**: the smallest time (us) among the :data:`FLOOR_SIZES` smallest sizes;
  flagged when those sizes exceed :data:`FLOOR_MAX_BYTES` (then it includes transfer time).
- **variation**: a *repeat* is one measurement of the same size in another run — another
  result file of the same job, or the in-place rows beside the out-of-place ones. Per size,
  the mean, sample standard deviation and a 95% Student-t confidence interval of busbw (low end
  clipped at 0); for the sweep, the same over each run's own plateau. With one run there is no
  interval; with two, t = 12.7 makes it wide, as it should be.

Rows are plain dicts with ``size_bytes``, ``time_s`` and ``busbw_gbps`` (derived from size and
time by :mod:`shardscope.contracts.factors`, as everywhere in the project) and ``run``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from shardscope.contracts.factors import OPS, busbw_gbps
from shardscope.errors import UserError

PLATEAU_TOLERANCE = 0.05
"""A size belongs to the plateau when its busbw is at least (1 - this) of the maximum."""
REACH_FRACTION = 0.90
"""``size_to_90pct_bytes`` is the first size reaching this share of the plateau."""
MIN_PLATEAU_BYTES = 1 << 20
"""Below this size no NCCL transport is bandwidth-bound; a sweep must reach it to have a plateau."""
FLOOR_SIZES = 3
"""The latency floor is the minimum time over this many smallest sizes."""
FLOOR_MAX_BYTES = 64 * 1024
"""Above this size the smallest time includes transfer time, so it is not a latency floor."""

# Two-sided 95% Student-t quantiles, t(0.975, df) for df = 1..30; 1.96 beyond.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t95(df: int) -> float:
    """The two-sided 95% Student-t quantile for ``df`` degrees of freedom (1.96 above 30)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    return _T95[df - 1] if df <= len(_T95) else 1.96


@dataclass(frozen=True)
class Spread:
    """Mean, sample standard deviation and 95% confidence interval of repeated values."""

    n: int
    mean: float
    stdev: float | None
    ci95_low: float | None
    ci95_high: float | None

    @property
    def relative_stdev(self) -> float | None:
        """Coefficient of variation (stdev / mean), None without repeats or for a zero mean."""
        return self.stdev / self.mean if self.stdev is not None and self.mean else None


def spread(values: Sequence[float]) -> Spread:
    """The :class:`Spread` of ``values`` (non-negative quantities: the interval's low end is clipped at 0);
    no interval for fewer than two values."""
    if not values:
        raise ValueError("spread of no values")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Spread(1, mean, None, None, None)
    sd = statistics.stdev(values)
    half = t95(len(values) - 1) * sd / math.sqrt(len(values))
    return Spread(len(values), mean, sd, max(mean - half, 0.0), mean + half)


@dataclass(frozen=True)
class SweepSummary:
    """The summary numbers of one sweep (see the module docstring)."""

    op: str
    world_size: int
    runs: list[str]
    sizes: int
    plateau_busbw_gbps: float | None
    plateau_sizes_bytes: list[int]
    max_busbw_gbps: float
    size_to_90pct_bytes: int | None
    latency_floor_us: float
    latency_floor_sizes_bytes: list[int]
    latency_floor_is_latency: bool
    plateau_spread: Spread | None
    per_size: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types; the ``--json`` contract of ``shardscope verdict``."""
        out = asdict(self)
        out["plateau_spread"] = asdict(self.plateau_spread) if self.plateau_spread else None
        return out


def normalise_rows(rows: Iterable[Mapping[str, Any]], op: str, world_size: int, run: str) -> list[dict[str, Any]]:
    """Rows reduced to ``size_bytes``, ``time_s``, ``busbw_gbps`` and ``run`` (see :func:`normalise_rows_noted`)."""
    return normalise_rows_noted(rows, op, world_size, run)[0]


def normalise_rows_noted(rows: Iterable[Mapping[str, Any]], op: str, world_size: int,
                         run: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows reduced to ``size_bytes``, ``time_s``, ``busbw_gbps`` and ``run``, and notes on what was left out.

    busbw is recomputed from size and time so that nccl-tests logs and our own documents are
    compared the same way; rows in place and out of place become two runs (``run:in_place``).
    A row whose size or time is not a positive finite number cannot be summarised and is left
    out, named in one note; a printed busbw that disagrees with size/time by more than 2% is
    flagged in another (the recomputed value is used; nothing is judged on the printed one).
    """
    if op not in OPS:
        raise UserError(f"{run}: unknown collective {op!r}; expected one of {', '.join(OPS)}")
    out = []
    dropped: list[str] = []
    inconsistent: list[str] = []
    for index, row in enumerate(rows):
        try:
            size, time_s = float(row["size_bytes"]), float(row["time_s"])
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{run}: rows[{index}] lacks a numeric size_bytes or time_s; expected collective result rows") from None
        if not (math.isfinite(size) and size > 0 and math.isfinite(time_s) and time_s > 0):
            dropped.append(f"rows[{index}] (size_bytes {row['size_bytes']}, time_s {row['time_s']})")
            continue
        busbw = busbw_gbps(op, world_size, int(size), time_s)
        printed = row.get("busbw_gbps")
        if isinstance(printed, int | float) and not isinstance(printed, bool) and (
                not math.isfinite(printed) or not math.isclose(printed, busbw, rel_tol=0.02, abs_tol=0.02)):
            inconsistent.append(f"rows[{index}] ({printed} vs {busbw:.4g})")
        mode = "in_place" if row.get("in_place") or row.get("placement_mode") == "in_place" else "out_of_place"
        out.append({"size_bytes": int(size), "time_s": time_s, "busbw_gbps": busbw, "run": f"{run}:{mode}"})
    notes = []
    if dropped:
        notes.append(f"{run}: {len(dropped)} row(s) left out, with a size or time that is not a positive finite number: "
                     + _first(dropped))
    if inconsistent:
        notes.append(f"{run}: {len(inconsistent)} row(s) print a busbw that does not match size/time on {world_size} ranks "
                     f"(printed vs recomputed GB/s): {_first(inconsistent)}; the recomputed value is used")
    return out, notes


def _first(items: list[str], most: int = 3) -> str:
    """The first few items of a list for one sentence."""
    shown = ", ".join(items[:most])
    return shown if len(items) <= most else f"{shown} and {len(items) - most} more"


def _by_size(rows: Sequence[Mapping[str, Any]], key: str) -> dict[int, list[float]]:
    groups: dict[int, list[float]] = {}
    for row in rows:
        groups.setdefault(int(row["size_bytes"]), []).append(float(row[key]))
    return dict(sorted(groups.items()))


def _plateau(medians: Mapping[int, float]) -> tuple[float | None, list[int], str | None]:
    """(plateau busbw, its sizes, why there is none) from per-size median busbw."""
    if not medians:
        return None, [], "no rows"
    if max(medians) < MIN_PLATEAU_BYTES:
        return None, [], (f"the sweep ends at {max(medians)} B, below {MIN_PLATEAU_BYTES} B where transfers become "
                          "bandwidth-bound, so it shows no plateau")
    top = max(medians.values())
    if top <= 0:
        return None, [], "every busbw is zero"
    sizes = [s for s, bw in medians.items() if bw >= (1 - PLATEAU_TOLERANCE) * top]
    return statistics.median(medians[s] for s in sizes), sizes, None


def summarize(rows: Sequence[Mapping[str, Any]], op: str, world_size: int) -> SweepSummary:
    """The :class:`SweepSummary` of normalised rows (:func:`normalise_rows`) of one job."""
    if not rows:
        raise UserError(f"{op} on {world_size} ranks: no measured rows to summarise")
    busbw = _by_size(rows, "busbw_gbps")
    times = _by_size(rows, "time_s")
    medians = {s: statistics.median(v) for s, v in busbw.items()}
    plateau, plateau_sizes, why = _plateau(medians)
    notes = [why] if why else []
    reach = None
    if plateau:
        reach = next((s for s, bw in medians.items() if bw >= REACH_FRACTION * plateau), None)
    floor_sizes = list(times)[:FLOOR_SIZES]
    floor_us = min(t for s in floor_sizes for t in times[s]) * 1e6
    is_latency = max(floor_sizes) <= FLOOR_MAX_BYTES
    if not is_latency:
        notes.append(f"the smallest sizes reach {max(floor_sizes)} B, so the floor includes transfer time, not latency alone")
    runs = sorted({str(r["run"]) for r in rows})
    per_run = []
    for run in runs:
        run_medians = {s: statistics.median(v) for s, v in _by_size([r for r in rows if r["run"] == run], "busbw_gbps").items()}
        value = _plateau(run_medians)[0]
        if value is not None:
            per_run.append(value)
    plateau_spread = spread(per_run) if per_run else None
    per_size = []
    for size, values in busbw.items():
        s = spread(values)
        per_size.append({"size_bytes": size, "repeats": s.n, "busbw_median_gbps": medians[size],
                         "busbw_mean_gbps": s.mean, "busbw_stdev_gbps": s.stdev,
                         "busbw_ci95_gbps": [s.ci95_low, s.ci95_high] if s.ci95_low is not None else None,
                         "time_min_us": min(times[size]) * 1e6})
    return SweepSummary(op=op, world_size=world_size, runs=runs, sizes=len(busbw), plateau_busbw_gbps=plateau,
                        plateau_sizes_bytes=plateau_sizes, max_busbw_gbps=max(medians.values()),
                        size_to_90pct_bytes=reach, latency_floor_us=floor_us, latency_floor_sizes_bytes=floor_sizes,
                        latency_floor_is_latency=is_latency, plateau_spread=plateau_spread, per_size=per_size,
                        notes=notes)
