"""How a sweep's verdict (the ``verdicts`` table) is written in legends, annotations and tables.

One wording everywhere: a judged sweep reads ``plateau 6.42 GB/s, 27% of expected (low)``; a
sweep the links could not be modeled for reads ``unknown: <short reason>``; a series that no
verdict judged reads ``not judged``. The text is derived only from the verdict's own columns.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

#: Longest short reason before it is cut with an ellipsis.
SHORT_REASON_CHARS = 48
NOT_JUDGED = "not judged"
_CLAUSE_END = re.compile(r"[:;(]")


def _missing(value: Any) -> bool:
    """True for None, NaN and pandas' NA (what a LEFT JOIN gives a series without a verdict)."""
    return value is None or bool(pd.isna(value))


def short_reason(reason: str | None) -> str:
    """The first clause of a verdict's reason (up to ``:``, ``;`` or ``(``), cut to :data:`SHORT_REASON_CHARS`."""
    if _missing(reason) or not str(reason).strip():
        return "no reason recorded"
    first = _CLAUSE_END.split(str(reason), maxsplit=1)[0].strip() or str(reason).strip()
    return first if len(first) <= SHORT_REASON_CHARS else first[: SHORT_REASON_CHARS - 1].rstrip() + "…"


def verdict_text(verdict: str | None, plateau_gbps: float | None, percent: float | None, reason: str | None) -> str:
    """The verdict in words: plateau and share of the expected busbw, or why it is unknown."""
    if _missing(verdict):
        return NOT_JUDGED
    if verdict == "unknown" or _missing(plateau_gbps) or _missing(percent):
        return f"{verdict}: {short_reason(reason)}"
    return f"plateau {plateau_gbps:.2f} GB/s, {percent:.0f}% of expected ({verdict})"
