"""pandera schemas of every table in the database: what a valid row is.

Each schema checks what would make a number wrong or meaningless: positive times and sizes,
known ops, strategies and outcomes, world size at least 1, bus bandwidth consistent with
algorithm bandwidth and the op's nccl-tests factor, unique keys.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from shardscope.collectives.factors import OPS, busbw_factor
from shardscope.training.strategies import STRATEGIES

KINDS = ("collectives", "training", "collectives_import")
SOURCES = ("measured", "nccl-tests", "reference")
OUTCOMES = ("ok", "oom", "over_budget", "failed")
#: Relative tolerance of derived-bandwidth checks; imported nccl-tests values are rounded when printed.
BANDWIDTH_RTOL = 0.02


class RunsSchema(pa.DataFrameModel):
    """One row per job result or imported log: where, when and with what it was measured."""

    run_id: Series[str] = pa.Field(unique=True, str_length={"min_value": 8})
    kind: Series[str] = pa.Field(isin=KINDS)
    source: Series[str] = pa.Field(isin=SOURCES)
    job_id: Series[str]
    host: Series[str] = pa.Field(nullable=True)
    measured_at: Series[str] = pa.Field(nullable=True)
    world_size: Series[int] = pa.Field(ge=1)
    placement: Series[str] = pa.Field(nullable=True)
    transport: Series[str] = pa.Field(nullable=True)
    fabric: Series[str] = pa.Field(nullable=True)
    label: Series[str] = pa.Field(nullable=True)
    backend: Series[str] = pa.Field(nullable=True)
    device_type: Series[str] = pa.Field(nullable=True)
    devices: Series[str] = pa.Field(nullable=True)
    torch_version: Series[str] = pa.Field(nullable=True)
    comm_library: Series[str] = pa.Field(nullable=True)
    deepspeed_version: Series[str] = pa.Field(nullable=True)
    git_rev: Series[str] = pa.Field(nullable=True)
    config_hash: Series[str] = pa.Field(nullable=True)
    source_file: Series[str]
    env_json: Series[str]

    class Config:
        strict = True
        coerce = True


class CollectivesSchema(pa.DataFrameModel):
    """One row per (run, message size): raw bytes and seconds, and the bandwidths derived from them."""

    run_id: Series[str]
    op: Series[str] = pa.Field(isin=OPS)
    world_size: Series[int] = pa.Field(ge=2)
    dtype: Series[str]
    size_bytes: Series[int] = pa.Field(gt=0)
    time_s: Series[float] = pa.Field(gt=0)
    time_max_s: Series[float] = pa.Field(gt=0, nullable=True)
    algbw_gbps: Series[float] = pa.Field(ge=0)
    busbw_gbps: Series[float] = pa.Field(ge=0)
    in_place: Series[bool]
    check_ok: Series[pd.BooleanDtype] = pa.Field(nullable=True)

    class Config:
        strict = True
        coerce = True
        unique = ["run_id", "size_bytes", "in_place"]

    @pa.dataframe_check(error="algbw_gbps must equal size_bytes / time_s / 1e9")
    def algbw_matches_time(cls, df: pd.DataFrame) -> Series[bool]:
        """Algorithm bandwidth is bytes over seconds, in 1e9 B/s."""
        expected = df["size_bytes"] / df["time_s"] / 1e9
        return pd.Series(np.isclose(df["algbw_gbps"], expected, rtol=BANDWIDTH_RTOL, atol=0.02), index=df.index)

    @pa.dataframe_check(error="busbw_gbps must equal algbw_gbps times the op's nccl-tests factor for world_size")
    def busbw_matches_factor(cls, df: pd.DataFrame) -> Series[bool]:
        """Bus bandwidth is algorithm bandwidth times the op's factor (all_reduce 2(n-1)/n, …)."""
        factor = [busbw_factor(op, int(n)) if op in OPS and n >= 1 else np.nan for op, n in zip(df["op"], df["world_size"])]
        expected = df["algbw_gbps"] * np.asarray(factor)
        return pd.Series(np.isclose(df["busbw_gbps"], expected, rtol=BANDWIDTH_RTOL, atol=0.02), index=df.index)


class TrainingRunsSchema(pa.DataFrameModel):
    """One row per training job: what was trained how, its outcome and its summary numbers."""

    run_id: Series[str] = pa.Field(unique=True)
    strategy: Series[str] = pa.Field(isin=STRATEGIES)
    model: Series[str]
    param_count: Series[int] = pa.Field(gt=0, nullable=True)
    world_size: Series[int] = pa.Field(ge=1)
    placement: Series[str]
    dtype: Series[str] = pa.Field(nullable=True)
    micro_batch: Series[int] = pa.Field(ge=1, nullable=True)
    seq_len: Series[int] = pa.Field(ge=1, nullable=True)
    outcome: Series[str] = pa.Field(isin=OUTCOMES)
    error: Series[str] = pa.Field(nullable=True)
    median_step_time_s: Series[float] = pa.Field(gt=0, nullable=True)
    tokens_per_s: Series[float] = pa.Field(gt=0, nullable=True)
    mfu: Series[float] = pa.Field(gt=0, le=1, nullable=True)
    peak_memory_bytes: Series[int] = pa.Field(gt=0, nullable=True)
    peak_memory_method: Series[str] = pa.Field(nullable=True)
    deepspeed_config: Series[str] = pa.Field(nullable=True)

    class Config:
        strict = True
        coerce = True

    @pa.dataframe_check(error="a run with outcome ok must have a step time and tokens/s; a failed one must have an error")
    def outcome_consistent(cls, df: pd.DataFrame) -> Series[bool]:
        """``ok`` rows carry measurements; ``oom``/``failed`` rows carry the error text."""
        ok = df["outcome"] == "ok"
        measured = df["median_step_time_s"].notna() & df["tokens_per_s"].notna()
        explained = df["error"].notna()
        return (ok & measured) | (~ok & explained)


class TrainingStepsSchema(pa.DataFrameModel):
    """Per timed step of a training job: the slowest rank's step time."""

    run_id: Series[str]
    step: Series[int] = pa.Field(ge=0)
    step_time_s: Series[float] = pa.Field(gt=0)
    loss: Series[float] = pa.Field(nullable=True)

    class Config:
        strict = True
        coerce = True
        unique = ["run_id", "step"]


class TrainingMemorySchema(pa.DataFrameModel):
    """Per rank of a training job: bytes held in parameters, gradients and optimizer state, and peak."""

    run_id: Series[str]
    rank: Series[int] = pa.Field(ge=0)
    param_bytes: Series[int] = pa.Field(gt=0)
    grad_bytes: Series[int] = pa.Field(ge=0)
    optim_bytes: Series[int] = pa.Field(ge=0)
    peak_memory_bytes: Series[int] = pa.Field(gt=0)

    class Config:
        strict = True
        coerce = True
        unique = ["run_id", "rank"]


#: Table name -> schema, in the order tables are created and loaded.
TABLES: dict[str, type[pa.DataFrameModel]] = {
    "runs": RunsSchema,
    "collectives": CollectivesSchema,
    "training_runs": TrainingRunsSchema,
    "training_steps": TrainingStepsSchema,
    "training_memory": TrainingMemorySchema,
}
