"""pandera schemas of the step model's calibrations, kept in the database (``shardscope calibrate-step --store``).

A calibration fits the step model's compute rate, overlap and per-call overhead to the measured
training runs of one job (:mod:`shardscope.costmodel.step_calibration`). It is stored as one row per
measured run it was fitted on (``step_calibrations``), so its rows belong to those runs: a merge
carries them with the runs, and the run ids say which measurements it came from. The check of the
collective model after an alpha-beta fit on one measured sweep (``shardscope accuracy``'s
"after calibration" table) is stored beside it (``collective_calibration_checks``), one row per op
group, owned by the sweep's run that the fit was made on.
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from shardscope.contracts.names import STRATEGIES
from shardscope.results.tablebase import ZonedTime, _Table


class StepCalibrationsSchema(_Table):
    """One row per (step calibration, measured run it was fitted on): the fitted values and that run's modeled step."""

    calibration_id: Series[str] = pa.Field(str_length={"min_value": 1})
    created_at: Series[ZonedTime]
    run_id: Series[str]
    strategy: Series[str] = pa.Field(isin=list(STRATEGIES))
    host: Series[str] = pa.Field(nullable=True)
    model: Series[str] = pa.Field(str_length={"min_value": 1})
    world_size: Series[int] = pa.Field(ge=1)
    dtype: Series[str] = pa.Field(str_length={"min_value": 1})
    micro_batch: Series[int] = pa.Field(ge=1)
    seq_len: Series[int] = pa.Field(ge=1)
    effective_flops_per_s: Series[float] = pa.Field(gt=0)
    overlap: Series[float] = pa.Field(ge=0, le=1)
    call_overhead_s: Series[float] = pa.Field(ge=0)
    host_call_s: Series[float] = pa.Field(ge=0, nullable=True)  # seconds per recorded Python call; null: older calibrations
    host_calls_per_step: Series[pd.Int64Dtype] = pa.Field(ge=0, nullable=True)  # the run's recorded count; null: none
    mfu: Series[float] = pa.Field(gt=0, le=1, nullable=True)
    measured_s: Series[float] = pa.Field(gt=0)
    measured_ci95_low_s: Series[float] = pa.Field(gt=0, nullable=True)
    measured_ci95_high_s: Series[float] = pa.Field(gt=0, nullable=True)
    modeled_s: Series[float] = pa.Field(gt=0)
    held_out_s: Series[float] = pa.Field(gt=0)
    wire_source: Series[str] = pa.Field(str_length={"min_value": 1})
    ranking_agree: Series[int] = pa.Field(ge=0)
    ranking_pairs: Series[int] = pa.Field(ge=0)
    ranking_within_noise: Series[int] = pa.Field(ge=0)
    ranking_noise: Series[float] = pa.Field(ge=0)
    ranking_disagree: Series[str] = pa.Field(nullable=True)

    class Config:
        strict = True
        coerce = True
        unique = ["calibration_id", "run_id"]

    @pa.dataframe_check(error="ranking_agree cannot exceed ranking_pairs")
    def agreement_within_pairs(cls, df: pd.DataFrame) -> Series[bool]:
        """The ranked pairs the model orders as measured are a subset of the ranked pairs."""
        return df["ranking_agree"] <= df["ranking_pairs"]


class CollectiveCalibrationChecksSchema(_Table):
    """One row per (calibration, op group): measured CPU sweeps against the gloo model fitted on one of them."""

    calibration_id: Series[str] = pa.Field(str_length={"min_value": 1})
    created_at: Series[ZonedTime]
    run_id: Series[str]
    calibrated_on: Series[str] = pa.Field(str_length={"min_value": 1})
    op_group: Series[str] = pa.Field(str_length={"min_value": 1})
    pairs: Series[int] = pa.Field(ge=1)
    median_ratio: Series[float] = pa.Field(gt=0)
    median_error: Series[float] = pa.Field(ge=0)
    worst_error: Series[float] = pa.Field(ge=0)
    worst_ratio: Series[float] = pa.Field(gt=0)

    class Config:
        strict = True
        coerce = True
        unique = ["calibration_id", "op_group"]
