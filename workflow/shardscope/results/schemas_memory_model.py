"""pandera schema of the ZeRO paper's memory model for named cases (``memory_model_cases``), all ``method: modeled``.

The predictions stage writes them once (:func:`shardscope.costmodel.memory_model_cases.memory_model_case_rows`,
the predictions document's ``memory_model`` rows): the seed article's Mistral-7B model states per
strategy on 1 and 8 GPUs, without and with an fp32 master copy. The report's memory table and its
sentence about DDP on one GPU only query them.
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from shardscope.contracts.names import STRATEGIES, TRAINING_DTYPES
from shardscope.results.tablebase import _Table

#: The named cases the predictions stage models with the ZeRO paper's bytes per parameter.
MEMORY_MODEL_CASES = ("seed_mistral",)


class MemoryModelCasesSchema(_Table):
    """Per (prediction run, case, strategy, GPUs, master copy): the ZeRO paper's model states per GPU and whether
    they fit the GPU's memory (model states only: activations and buffers come on top)."""

    run_id: Series[str]
    memory_case: Series[str] = pa.Field(isin=list(MEMORY_MODEL_CASES))
    strategy: Series[str] = pa.Field(isin=STRATEGIES)
    model: Series[str] = pa.Field(str_length={"min_value": 1})
    n_params: Series[int] = pa.Field(gt=0)
    gpus: Series[int] = pa.Field(ge=1)
    dtype: Series[str] = pa.Field(isin=TRAINING_DTYPES)
    master_weights: Series[bool]
    param_bytes: Series[int] = pa.Field(ge=0)
    grad_bytes: Series[int] = pa.Field(ge=0)
    optim_bytes: Series[int] = pa.Field(ge=0)
    total_bytes: Series[int] = pa.Field(gt=0)
    assumption: Series[str] = pa.Field(str_length={"min_value": 1})
    gpu_memory_bytes: Series[int] = pa.Field(gt=0)
    fits: Series[bool]
    method: Series[str] = pa.Field(isin=["modeled"])

    class Config:
        strict = True
        coerce = True
        unique = ["run_id", "memory_case", "strategy", "gpus", "master_weights"]

    @pa.dataframe_check(error="total_bytes must equal param_bytes + grad_bytes + optim_bytes")
    def total_is_the_sum_of_the_states(cls, df: pd.DataFrame) -> Series[bool]:
        """The model states are parameters, gradients and optimizer state, nothing else."""
        return df["total_bytes"] == df["param_bytes"] + df["grad_bytes"] + df["optim_bytes"]

    @pa.dataframe_check(error="fits must be total_bytes <= gpu_memory_bytes")
    def fits_matches_memory(cls, df: pd.DataFrame) -> Series[bool]:
        """Whether the states fit is their total against the GPU's memory."""
        return df["fits"] == (df["total_bytes"] <= df["gpu_memory_bytes"])
