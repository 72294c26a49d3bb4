"""What every table schema shares: the finite-number check, the nccl-tests bandwidth relations, and the column
types of times and JSON text.

Measured collectives (:class:`~shardscope.results.schemas.CollectivesSchema`) and modeled ones
(:class:`~shardscope.results.schemas_predictions.CollectivePredictionsSchema`) derive their
bandwidths the same way, so both check them with the functions here.

A column of :class:`ZonedTime` holds a point in time (DuckDB ``TIMESTAMP WITH TIME ZONE``), of
:class:`JsonText` a JSON document (DuckDB ``JSON``): the pandera dtype is the one place that says
so; the DDL, the document shapes and the upgrade of older databases read it from there.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
from typing import Any

import numpy as np
import pandas as pd
import pandera.errors
import pandera.pandas as pa
from pandera import dtypes
from pandera.engines import pandas_engine
from pandera.typing import Series

from shardscope.contracts.factors import OPS, busbw_factor

#: Relative tolerance of derived-bandwidth checks; imported nccl-tests values are rounded when printed.
BANDWIDTH_RTOL = 0.02


def valid(series: pd.Series) -> pd.Series:
    """Where a column holds a positive finite number (what its own checks demand of a size or time)."""
    values = pd.to_numeric(series, errors="coerce").astype("float64")
    return pd.Series(np.isfinite(values) & (values > 0), index=series.index)


def algbw_matches(df: pd.DataFrame, rtol: float = BANDWIDTH_RTOL) -> pd.Series:
    """``algbw_gbps == size_bytes / time_s / 1e9`` where size and time are valid numbers.

    Rows whose inputs are invalid pass here: their own column checks report them once.
    """
    expected = df["size_bytes"] / df["time_s"] / 1e9
    close = np.isclose(df["algbw_gbps"], expected, rtol=rtol, atol=0.02 if rtol >= BANDWIDTH_RTOL else 1e-12)
    return pd.Series(close, index=df.index) | ~(valid(df["time_s"]) & valid(df["size_bytes"]))


def busbw_matches(df: pd.DataFrame, rtol: float = BANDWIDTH_RTOL) -> pd.Series:
    """``busbw_gbps == algbw_gbps * busbw_factor(op, world_size)`` where op and world size are known.

    A null world size (an imported log that did not tell its rank count) passes: its busbw is as printed.
    """
    ranks = pd.to_numeric(df["world_size"], errors="coerce").astype("float64")
    known = df["op"].isin(OPS) & (ranks >= 1)
    factor = [busbw_factor(op, int(n)) if ok else np.nan for op, n, ok in zip(df["op"], df["world_size"], known)]
    expected = df["algbw_gbps"] * np.asarray(factor)
    close = np.isclose(df["busbw_gbps"], expected, rtol=rtol, atol=0.02 if rtol >= BANDWIDTH_RTOL else 1e-12)
    return pd.Series(close, index=df.index) | ~known


class _Table(pa.DataFrameModel):
    """Checks shared by every table: a number with a unit in its name is finite (no inf)."""

    @pa.check(r".*(_s|_us|_bytes|_gbps)$", regex=True, name="finite", error="must be a finite number")
    def finite(cls, series: pd.Series) -> Series[bool]:
        """NaN is caught by ``nullable=False``; this catches ``Infinity`` in JSON.

        A column of plain numpy numbers (most columns, once coerced) is checked in numpy
        alone: this check runs on some 70 columns, and each pandas step costs more than the
        arithmetic on a few rows.
        """
        if series.dtype.kind in "fiu":
            return pd.Series(~np.isinf(series.to_numpy(dtype="float64")), index=series.index)
        return series.isna() | np.isfinite(pd.to_numeric(series, errors="coerce").astype("float64"))


def _failures(data: pd.Series, bad: np.ndarray, problem: str) -> pandera.errors.ParserError:
    """The error pandera reports as a failed coercion: the rows (index) and values that are not of the type."""
    cases = pd.DataFrame({"index": data.index[bad], "failure_case": data[bad].to_numpy(dtype=object)})
    return pandera.errors.ParserError(problem, failure_cases=cases)


def _instant(value: Any) -> Any:
    """``value`` as a UTC pd.Timestamp; None for a missing value; False for one that is not a time with its zone."""
    if not isinstance(value, str) and pd.isna(value):  # None, NaN, NaT, pd.NA
        return None
    if isinstance(value, str):
        try:
            value = _dt.datetime.fromisoformat(value)
        except ValueError:
            return False
    if isinstance(value, _dt.datetime) and value.utcoffset() is not None:
        return pd.Timestamp(value).tz_convert("UTC")
    return False


@dtypes.immutable(init=True)
class ZonedTime(pandas_engine.DateTime):
    """A point in time, to the microsecond, in UTC (DuckDB ``TIMESTAMP WITH TIME ZONE``).

    Documents carry ISO 8601 text with its offset (``2026-11-29T00:00:00+00:00``); coercion parses it strictly:
    a time without a zone says nothing about when it was (pandas would assume UTC), and is refused like a value
    that is no time at all (pandera reports them as a failed coercion, :attr:`problem` says why).
    """

    unit: str = "us"
    tz: _dt.tzinfo | None = dataclasses.field(default=_dt.UTC)
    sql = "TIMESTAMP WITH TIME ZONE"
    problem = "must be an ISO 8601 time with its time zone, such as 2026-11-29T00:00:00+00:00"

    def coerce(self, data_container: Any) -> Any:
        """The series as datetime64[us, UTC]: parsed from ISO text, or converted from times of another zone."""
        if isinstance(data_container.dtype, pd.DatetimeTZDtype):
            return data_container.dt.tz_convert("UTC").astype(self.type)
        parsed = [_instant(value) for value in data_container]
        bad = np.fromiter((p is False for p in parsed), dtype=bool, count=len(parsed))
        if bad.any():
            raise _failures(data_container, bad, self.problem)
        return pd.Series([pd.NaT if p is None else p for p in parsed], index=data_container.index,
                         dtype=self.type, name=data_container.name)

    def try_coerce(self, data_container: Any) -> Any:
        """:meth:`coerce`, whose failures already name each row (pandera's generic path would not say why)."""
        return self.coerce(data_container)


def iso_text(value: Any) -> Any:
    """A time read from the database as the ISO 8601 text documents carry (``2026-11-29T00:00:00+00:00``, in UTC).

    What reports print, so that they read as before times were typed; text (a read-only look at an older
    database) and missing values are returned as they are.
    """
    if isinstance(value, _dt.datetime) and not pd.isna(value):
        return value.astimezone(_dt.UTC).isoformat()
    return value


def iso_text_sql(column: str) -> str:
    """SQL of :func:`iso_text`: ``column`` (a time) as ISO 8601 text in UTC, fractional seconds only where it has them.

    Needs a session in UTC (every connection of :mod:`shardscope.results.store` is): DuckDB formats in its zone.
    """
    seconds = "'%Y-%m-%dT%H:%M:%S'"
    return (f"strftime({column}, CASE WHEN microsecond({column}) % 1000000 = 0 THEN {seconds} "
            f"ELSE {seconds[:-1]}.%f' END) || '+00:00'")


def _no_constant(name: str) -> Any:
    """Refuse ``NaN``, ``Infinity`` and ``-Infinity``: Python's json reads them, JSON does not have them."""
    raise ValueError(f"{name} is not JSON")


def _json_value(text: Any) -> bool:
    """Whether ``text`` is a missing value or strict JSON text."""
    if not isinstance(text, str) and pd.isna(text):
        return True
    try:
        json.loads(text, parse_constant=_no_constant)
    except (TypeError, ValueError):
        return False
    return True


@dtypes.immutable(init=True)
class JsonText(pandas_engine.STRING):
    """A JSON document kept as its text (DuckDB ``JSON``): any text that parses as strict JSON, unchanged."""

    sql = "JSON"
    problem = "must be JSON text"

    def try_coerce(self, data_container: Any) -> Any:
        """The series as strings, each one JSON text (the rows that are not are reported as a failed coercion)."""
        coerced = super().try_coerce(data_container)
        bad = ~np.fromiter((_json_value(v) for v in coerced), dtype=bool, count=len(coerced))
        if bad.any():
            raise _failures(data_container, bad, self.problem)
        return coerced
