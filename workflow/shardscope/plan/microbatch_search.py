"""The micro-batch search rule: which micro-batches a search tries, in which order, and which one it reports.

Doubling from the smallest candidate, then bisection between the largest that fitted and the smallest
that did not. The trial is injected: the planner counts a search's most trials with a rule
(:func:`shardscope.plan.summary.max_trials`), the runner (:mod:`shardscope.training.search`) runs real
training jobs. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

#: Trial outcomes that mean "does not fit" (the search goes lower); ``ok`` fits; anything else stops it.
NOT_FITTING = ("oom", "over_budget")
METHOD = ("doubling from the smallest micro-batch (on a GPU node: from the memory model's largest that fits, then the "
          "next one up), then bisection, over the divisors of the per-rank batch up to the limit; each trial with the "
          "gradient accumulation to the global batch; a trial fits when its outcome is ok")


def search_largest(trial: Callable[[int], str], candidates: int | Sequence[int],
                   start: int | None = None) -> dict[str, Any]:
    """Doubling, then bisection, over ``candidates``: the largest micro-batch whose trial is ``ok``.

    ``candidates`` are the micro-batches that may be tried, ascending (an int ``n`` means 1..n).
    Doubling goes from the smallest to the smallest candidate of at least twice the last one (the
    largest candidate at the end); once a trial does not fit, bisection halves the candidates between
    the largest that fitted and the smallest that did not. ``start`` (one of the candidates: the memory
    model's largest that fits) is tried first instead: if it fits, the next candidate up is tried, then
    doubling goes on from there; if it does not, bisection runs below it. So a right model costs two
    trials (its micro-batch fits, the next one does not). ``trial(m)`` runs (or reads back)
    micro-batch ``m`` and returns its outcome. Returns the outcomes in the order tried, ``best``
    (None when even the smallest does not fit, or a trial failed first) and ``reason`` (one sentence).
    """
    if isinstance(candidates, int) and not isinstance(candidates, bool):
        if candidates < 1:
            raise ValueError(f"search limit must be a positive integer, got {candidates!r}")
        candidates = range(1, candidates + 1)
    values = list(candidates)
    if not values or any(isinstance(m, bool) or not isinstance(m, int) or m < 1 for m in values) or values != sorted(set(values)):
        raise ValueError(f"search candidates must be ascending positive integers, got {values!r}")
    tried: dict[int, str] = {}

    def run(i: int) -> str:
        if values[i] not in tried:
            tried[values[i]] = trial(values[i])
        return tried[values[i]]

    if start is not None and start not in values:
        raise ValueError(f"search start must be one of the candidates {values!r}, got {start!r}")
    fits, too_big, i = -1, None, values.index(start) if start is not None else 0
    step_up = start is not None  # after the start fits: the next candidate, then doubling
    while True:
        outcome = run(i)
        if outcome == "ok":
            fits = i
            if i == len(values) - 1:
                break
            if step_up:
                i, step_up = i + 1, False
                continue
            i = next((j for j in range(i + 1, len(values)) if values[j] >= 2 * values[i]), len(values) - 1)
        elif outcome in NOT_FITTING:
            too_big = i
            break
        else:
            return _result(tried, values[fits] if fits >= 0 else None,
                           f"micro-batch {values[i]} ended with outcome {outcome!r}; the search stopped there")
    while too_big is not None and too_big - fits > 1:
        mid = (fits + too_big) // 2
        outcome = run(mid)
        if outcome == "ok":
            fits = mid
        elif outcome in NOT_FITTING:
            too_big = mid
        else:
            return _result(tried, values[fits] if fits >= 0 else None,
                           f"micro-batch {values[mid]} ended with outcome {outcome!r}; the search stopped there")
    if fits < 0:
        return _result(tried, None, f"even micro-batch {values[0]} does not fit (outcome {tried[values[0]]!r})")
    if too_big is None:
        return _result(tried, values[fits], f"micro-batch {values[fits]} fits, the largest the search may try")
    return _result(tried, values[fits], f"micro-batch {values[fits]} fits and {values[too_big]} does not "
                                        f"({tried[values[too_big]]})")


def _result(tried: dict[int, str], best: int | None, reason: str) -> dict[str, Any]:
    return {"trials": [{"micro_batch": m, "outcome": o} for m, o in tried.items()], "best_micro_batch": best,
            "reason": reason}
