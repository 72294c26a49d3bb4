"""pandera schema of the micro-batch search's trials (``search_trials``), one row per trial, OOMs included.

A search (:mod:`shardscope.training.search`) is one run of kind ``search``: the planned training job
whose largest fitting micro-batch it looked for, at one global batch. Each trial is that job at one
micro-batch with the gradient accumulation to the global batch; its row says whether it fitted
(``ok``), ran out of memory (``oom``, a real one on a GPU) or peaked above the memory budget
(``over_budget``: on CPU the tracked tensor peak against ``training.memory_budget_gib``), with the
peak it reached, the budget and the tokens/s it measured. The run of each strategy at its best
micro-batch is an ordinary training run (``training_runs``, placement ending ``@best_microbatch``).
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from shardscope.contracts.names import CHECKPOINTING_MODES, OUTCOMES, STRATEGIES
from shardscope.results.tablebase import _Table


class SearchTrialsSchema(_Table):
    """One row per trial of a micro-batch search: micro-batch, accumulation, outcome, peak, budget, tokens/s."""

    run_id: Series[str]
    search_job_id: Series[str] = pa.Field(str_length={"min_value": 1})  # the planned job whose micro-batch was searched
    trial_job_id: Series[str] = pa.Field(str_length={"min_value": 1})
    trial_order: Series[int] = pa.Field(ge=0)  # 0 for the first trial run
    strategy: Series[str] = pa.Field(isin=list(STRATEGIES))
    model: Series[str] = pa.Field(str_length={"min_value": 1})
    world_size: Series[int] = pa.Field(ge=1)
    placement: Series[str]
    micro_batch: Series[int] = pa.Field(ge=1)
    grad_accum: Series[int] = pa.Field(ge=1)
    global_batch: Series[int] = pa.Field(ge=1)  # sequences per optimizer step over every rank
    activation_checkpointing: Series[str] = pa.Field(isin=list(CHECKPOINTING_MODES))
    outcome: Series[str] = pa.Field(isin=list(OUTCOMES))
    tracked_peak_bytes: Series[pd.Int64Dtype] = pa.Field(ge=0, nullable=True)  # the tensor tracker's peak, largest rank
    peak_memory_bytes: Series[pd.Int64Dtype] = pa.Field(gt=0, nullable=True)  # CUDA's peak on GPU, the RSS peak on CPU
    memory_budget_bytes: Series[pd.Int64Dtype] = pa.Field(gt=0, nullable=True)
    tokens_per_s: Series[float] = pa.Field(gt=0, nullable=True)
    error: Series[str] = pa.Field(nullable=True)
    is_best: Series[bool]
    result_file: Series[str] = pa.Field(str_length={"min_value": 1})

    class Config:
        strict = True
        coerce = True
        unique = ["run_id", "micro_batch"]

    @pa.dataframe_check(error="global_batch must equal micro_batch * grad_accum * world_size")
    def accumulates_to_the_global_batch(cls, df: pd.DataFrame) -> Series[bool]:
        """Every trial reaches the one global batch the strategies are compared at."""
        return df["micro_batch"] * df["grad_accum"] * df["world_size"] == df["global_batch"]

    @pa.dataframe_check(error="an over_budget trial needs a memory_budget_bytes")
    def over_budget_has_a_budget(cls, df: pd.DataFrame) -> Series[bool]:
        """Exceeding a budget means there was one."""
        return (df["outcome"] != "over_budget") | df["memory_budget_bytes"].notna()

    @pa.dataframe_check(error="the best trial must have outcome ok, and a search has at most one")
    def one_fitting_best(cls, df: pd.DataFrame) -> Series[bool]:
        """The search's best micro-batch is a trial that fitted, and only one trial of a run is it."""
        best = df["is_best"].astype(bool)
        per_run = best.groupby(df["run_id"]).transform("sum")
        return (~best | (df["outcome"] == "ok")) & (per_run <= 1)
