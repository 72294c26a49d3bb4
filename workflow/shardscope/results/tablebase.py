"""What every table schema shares: the finite-number check and the nccl-tests bandwidth relations.

Measured collectives (:class:`~shardscope.results.schemas.CollectivesSchema`) and modeled ones
(:class:`~shardscope.results.schemas_predictions.CollectivePredictionsSchema`) derive their
bandwidths the same way, so both check them with the functions here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa
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
