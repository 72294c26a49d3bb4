"""Machines of one kind drawn together: figures 1 and 2 draw a fleet's series as one band per kind and setting.

A database merged from many machines holds one series per machine and setting (ranks,
placement, transport); drawn one line each, 64 machines made 208 lines nobody could tell
apart. Series of machines of the same kind (fabric class and GPU model) measured in the same
setting are drawn as one median line with a min-max band instead; a kind with one machine
keeps its own line and name (the band of one machine is its line), so a single machine's
figures are drawn as before. Only the drawing groups: the figures' data (CSV) keeps every
machine's rows, exactly as the query returns them.
"""

from __future__ import annotations

import pandas as pd

#: What makes two machines the same kind: drawn as one band where they measured the same setting.
KIND_COLUMNS = ("fabric", "gpu_model")


def _text(column: str, value: object) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "ranks unknown" if column == "world_size" else "-"
    if column == "world_size":
        return f"{int(value)} ranks"  # type: ignore[call-overload]
    return str(value)


def kind_bands(ours: pd.DataFrame, setting: list[str], shown: list[str] | None = None) -> dict[str, str]:
    """Each series of ``ours`` (our measured rows) that shares its kind and ``setting`` with another series,
    mapped to the name of that band: the values of its kind and setting columns (``shown``: the columns
    named, default all), joined by `` · ``. Series alone in their band are left out (drawn under their own name).

    Frames without the kind columns or a ``host`` (hand-made, or CSVs older than them) have no bands.
    """
    keys = [*KIND_COLUMNS, *setting]
    if ours.empty or any(c not in ours.columns for c in [*keys, "host", "series"]):
        return {}
    series = ours[[*keys, "series"]].drop_duplicates("series")
    key_frame = series[keys].astype(object).where(series[keys].notna(), None)
    names = {}
    shown_keys = shown if shown is not None else keys
    keyed = series.assign(_key=[tuple(row) for row in key_frame.itertuples(index=False)])
    for _, members in keyed.groupby("_key", sort=False):
        if len(members) < 2:
            continue
        first = members.iloc[0]
        name = " · ".join(_text(c, first[c]) for c in shown_keys)
        names.update({s: name for s in members["series"]})
    return names


def band_label(name: str, rows: pd.DataFrame, counted: str) -> str:
    """A band's legend entry: its kind and setting, how many machines (and series) it spans, their verdicts."""
    series, hosts = rows["series"].nunique(), rows["host"].nunique()
    who = f"{hosts} machines" if hosts == series else f"{series} series of {hosts} machines"
    return f"{name}: {who}, median line, min-max band\n    verdicts: {counted}"


def spread(rows: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Per value of ``x``: the median, lowest and highest ``y`` over the band's series (sorted by ``x``)."""
    return rows.groupby(x, sort=True)[y].agg(["median", "min", "max"])
