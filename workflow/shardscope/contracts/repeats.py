"""Repeats of a timed training window: their median and a 95% confidence interval, and when two runs tie.

A job times ``repeats`` windows of ``steps`` steps each (after one warmup). Each window's
median step time is one repeat. The job's step time is the median of the repeats; its 95%
interval is Student's t on the logarithms of the repeats (a geometric-mean interval: always
positive, and symmetric for ratios such as speed relative to DDP). With one repeat there is
no interval (null). Two runs whose intervals overlap are *within noise* of each other: the
report calls them a tie instead of naming a winner. Torch-free.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

#: Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (beyond: the normal 1.960).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t95(dof: int) -> float:
    """The two-sided 95% quantile of Student's t with ``dof`` degrees of freedom."""
    if dof < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {dof}")
    return _T95[dof - 1] if dof <= len(_T95) else 1.960


def ci95(values: list[float]) -> tuple[float, float] | None:
    """95% interval of the geometric mean of positive ``values`` (t on their logs); None for fewer than 2."""
    if len(values) < 2:
        return None
    logs = [math.log(v) for v in values]
    half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    centre = statistics.fmean(logs)
    return math.exp(centre - half), math.exp(centre + half)


def summarize_repeats(step_times: list[float], repeats: int, tokens_per_step: int) -> dict[str, Any]:
    """Median and 95% interval of step time and tokens/s over ``repeats`` equal windows of ``step_times``."""
    if repeats < 1 or len(step_times) % repeats or not step_times:
        raise ValueError(f"{len(step_times)} step times do not split into {repeats} equal repeats")
    per = len(step_times) // repeats
    medians = [statistics.median(step_times[i * per:(i + 1) * per]) for i in range(repeats)]
    median_s = statistics.median(medians)
    interval = ci95(medians)
    return {
        "repeats": repeats,
        "repeat_step_time_s": medians,
        "median_step_time_s": median_s,
        "ci95_low_step_time_s": interval[0] if interval else None,
        "ci95_high_step_time_s": interval[1] if interval else None,
        "ci95_low_tokens_per_s": tokens_per_step / interval[1] if interval else None,
        "ci95_high_tokens_per_s": tokens_per_step / interval[0] if interval else None,
        "ci_method": "95% Student t interval of the geometric mean of the repeats' median step times" if interval else None,
    }


def within_noise(a_low: float | None, a_high: float | None, b_low: float | None, b_high: float | None) -> bool:
    """Whether two 95% intervals overlap (False when either run has no interval: it cannot be judged a tie)."""
    if None in (a_low, a_high, b_low, b_high) or any(isinstance(v, float) and math.isnan(v) for v in (a_low, a_high, b_low, b_high)):
        return False
    return bool(a_low <= b_high and b_low <= a_high)
