"""pandera schema of the bytes each collective moved in one training step (``summary.comm_bytes`` of a result).

One row per (training run, op, dtype): calls in the step, their summed nccl-tests size, and
the ZeRO paper's volume (twice the size for an all-reduce, the size otherwise). The run's
total beside the paper's modeled volume lives in ``training_runs`` (``comm_volume_bytes``,
``comm_modeled_volume_bytes``).
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from shardscope.results.tablebase import _Table
from shardscope.contracts.comm_volume import VOLUME_FACTOR


class TrainingCommSchema(_Table):
    """Per training run, collective and dtype: calls, summed size and the ZeRO paper's volume in one untimed step (measured)."""

    run_id: Series[str]
    op: Series[str] = pa.Field(isin=list(VOLUME_FACTOR))
    dtype: Series[str] = pa.Field(str_length={"min_value": 1})
    calls: Series[int] = pa.Field(ge=1)
    size_bytes: Series[int] = pa.Field(ge=0)
    volume_bytes: Series[int] = pa.Field(ge=0)

    class Config:
        strict = True
        coerce = True
        unique = ["run_id", "op", "dtype"]

    @pa.dataframe_check(error="volume_bytes must be 2 x size_bytes for all_reduce and size_bytes for other collectives")
    def volume_follows_the_op(cls, df: pd.DataFrame) -> Series[bool]:
        """The paper's volume is derived from the size; a mismatch means one of them is wrong."""
        factor = df["op"].map(VOLUME_FACTOR)
        return factor.isna() | (df["volume_bytes"] == df["size_bytes"] * factor)
