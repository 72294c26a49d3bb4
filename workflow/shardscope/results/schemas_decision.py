"""pandera schema of the decision map's cells (``decision_map_cells``), all ``method: modeled``.

The predictions stage writes them once (:func:`shardscope.costmodel.decision_map.decision_map_rows`,
the predictions document's ``decision_map`` rows); figure 5, its caption and the report's table
only query them (:func:`shardscope.results.queries.decision_map`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from shardscope.contracts.names import FABRICS, STRATEGIES
from shardscope.results.tablebase import _Table


class DecisionMapCellsSchema(_Table):
    """Per (prediction run, fabric panel, GPU count, GPU memory, model): the strategy the decision rule picks, and why.

    ``strategy`` is the recommendation (``none`` when nothing fits), ``pick`` its label with the
    tie (``fsdp (tie with zero2 within 1.0%)``), ``ranking`` the fitting strategies fastest first;
    ``per_gpu_bytes`` the whole modeled peak (on the device basis: the reserved peak, the CUDA context and NCCL's
    buffers) of the strategy shown (the smallest peak when nothing
    fits) and ``ddp_per_gpu_bytes`` DDP's; ``tie_margin`` the model's tie margin and ``rule`` where
    the rule is written. Modeled on the panel's published machine, never measured.
    """

    run_id: Series[str]
    panel: Series[str] = pa.Field(isin=[f for f in FABRICS if f not in ("cpu", "single")])
    title: Series[str] = pa.Field(str_length={"min_value": 1})
    order_source: Series[str] = pa.Field(isin=["cost model"])
    ranking: Series[str] = pa.Field(str_length={"min_value": 1})
    gpus: Series[int] = pa.Field(ge=1)
    gpu_memory_gb: Series[float] = pa.Field(gt=0)
    model: Series[str] = pa.Field(str_length={"min_value": 1})
    n_params: Series[int] = pa.Field(gt=0)
    preset: Series[str] = pa.Field(nullable=True)
    strategy: Series[str] = pa.Field(isin=[*STRATEGIES, "none"])
    pick: Series[str] = pa.Field(str_length={"min_value": 1})
    tied: Series[str] = pa.Field(nullable=True)
    tie_spread: Series[float] = pa.Field(ge=0, nullable=True)
    tie_margin: Series[float] = pa.Field(ge=0, lt=1)
    rule: Series[str] = pa.Field(str_length={"min_value": 1})
    per_gpu_bytes: Series[int] = pa.Field(gt=0)
    ddp_per_gpu_bytes: Series[int] = pa.Field(gt=0)
    usable_fraction: Series[float] = pa.Field(gt=0, le=1)
    micro_batch: Series[int] = pa.Field(ge=1)
    seq_len: Series[int] = pa.Field(ge=1)
    method: Series[str] = pa.Field(isin=["modeled"])

    class Config:
        strict = True
        coerce = True
        unique = ["run_id", "panel", "gpus", "gpu_memory_gb", "model"]

    @pa.dataframe_check(error="a cell's strategy fits (per_gpu_bytes within usable_fraction of the GPU memory) "
                              "unless it is 'none', and then even the smallest peak does not")
    def pick_fits_the_memory(cls, df: pd.DataFrame) -> Series[bool]:
        """The rule's first step: the recommended strategy's whole peak fits; 'none' means no strategy's does."""
        usable = np.floor(np.floor(df["gpu_memory_gb"].astype("float64") * 1e9) * df["usable_fraction"].astype("float64"))
        fits = df["per_gpu_bytes"].astype("float64") <= usable
        return (df["strategy"] == "none") ^ fits

    @pa.dataframe_check(error="pick must be 'none' exactly when strategy is 'none', and start with the strategy otherwise")
    def pick_names_the_strategy(cls, df: pd.DataFrame) -> Series[bool]:
        """The label and the recommendation say the same thing."""
        return pd.Series([p == "none" if s == "none" else str(p).split(" ")[0] == s
                          for s, p in zip(df["strategy"], df["pick"])], index=df.index)
