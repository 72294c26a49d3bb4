"""pandera schemas of the diagnosis documents: verdicts of measured sweeps and the doctor's findings.

A ``verdicts`` document (``shardscope verdict --out``) judges sweeps; a sweep pools the files
that repeat one job. ``verdicts`` has one row per judged file (``source_file``, and
``judged_run_id`` when that file was collected with the verdicts), so each measured run joins
its verdict directly; the numbers of a row are those of its whole sweep (``sweep_files`` files).
``verdict_rows`` has the same numbers per message size. A ``doctor`` document
(``shardscope doctor --out``) becomes one ``doctor_findings`` row per check.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from shardscope.contracts.names import OPS
from shardscope.contracts.names import FINDING_STATUSES as STATUSES
from shardscope.results.tablebase import JsonText, ZonedTime, _Table

VERDICTS = ("ok", "low", "suspicious", "unknown")
SWEEP_KINDS = ("collectives", "nccl-tests")
REGIONS = ("bandwidth", "latency")
LINKS = ("nvlink", "pcie", "net")
#: Percentages are computed from the stored bandwidths; they agree to rounding error.
PERCENT_RTOL = 1e-6


def _percent_agrees(df: pd.DataFrame, measured: str, expected: str) -> pd.Series:
    """``percent_of_expected == 100 * measured / expected`` wherever all three are present."""
    known = df["percent_of_expected"].notna() & df[measured].notna() & df[expected].notna() & (df[expected] > 0)
    ratio = 100.0 * df[measured].astype("float64") / df[expected].where(known, 1.0).astype("float64")
    close = np.isclose(df["percent_of_expected"].astype("float64"), ratio, rtol=PERCENT_RTOL)
    return ~known | pd.Series(close, index=df.index)


class VerdictsSchema(_Table):
    """Per (verdicts run, judged file): the sweep's summary, what the links should give, and the verdict."""

    run_id: Series[str]
    sweep_index: Series[int] = pa.Field(ge=0)
    source_file: Series[str] = pa.Field(str_length={"min_value": 1})
    judged_run_id: Series[str] = pa.Field(nullable=True)
    sweep_kind: Series[str] = pa.Field(isin=SWEEP_KINDS)
    sweep_files: Series[int] = pa.Field(ge=1)  # result files pooled in this sweep's numbers (repeats of one job)
    op: Series[str] = pa.Field(isin=OPS)
    world_size: Series[int] = pa.Field(ge=1)
    nodes: Series[int] = pa.Field(ge=1)
    hosts: Series[str] = pa.Field(nullable=True)
    placement: Series[str] = pa.Field(nullable=True)
    transport: Series[str]
    plateau_busbw_gbps: Series[float] = pa.Field(ge=0, nullable=True)
    plateau_ci95_low_gbps: Series[float] = pa.Field(ge=0, nullable=True)
    plateau_ci95_high_gbps: Series[float] = pa.Field(ge=0, nullable=True)
    plateau_runs: Series[pd.Int64Dtype] = pa.Field(ge=1, nullable=True)  # runs (file x in/out of place) the interval is over
    max_busbw_gbps: Series[float] = pa.Field(ge=0)
    size_to_90pct_bytes: Series[pd.Int64Dtype] = pa.Field(gt=0, nullable=True)
    latency_floor_us: Series[float] = pa.Field(gt=0)
    latency_floor_is_latency: Series[bool]
    expected_busbw_gbps: Series[float] = pa.Field(gt=0, nullable=True)
    ceiling_busbw_gbps: Series[float] = pa.Field(gt=0, nullable=True)
    bottleneck: Series[str] = pa.Field(isin=LINKS, nullable=True)
    percent_of_expected: Series[float] = pa.Field(ge=0, nullable=True)
    verdict: Series[str] = pa.Field(isin=VERDICTS)
    reason: Series[str] = pa.Field(str_length={"min_value": 1})
    hints_json: Series[JsonText]
    notes_json: Series[JsonText]
    nccl_env_json: Series[JsonText]
    nccl_flags_json: Series[JsonText]
    nccl_log_json: Series[JsonText] = pa.Field(nullable=True)
    topology_hash: Series[str] = pa.Field(nullable=True, str_length={"min_value": 64, "max_value": 64})

    class Config:
        strict = True
        coerce = True
        unique = ["run_id", "source_file"]

    @pa.dataframe_check(error="percent_of_expected must equal 100 * plateau_busbw_gbps / expected_busbw_gbps")
    def percent_matches_plateau(cls, df: pd.DataFrame) -> Series[bool]:
        """The sweep's percentage is its plateau against the model's large-message busbw."""
        return _percent_agrees(df, "plateau_busbw_gbps", "expected_busbw_gbps")

    @pa.dataframe_check(error="a verdict other than unknown needs expected_busbw_gbps and ceiling_busbw_gbps")
    def judged_against_an_expectation(cls, df: pd.DataFrame) -> Series[bool]:
        """ok, low and suspicious compare with the links' bandwidth; without it the verdict is unknown."""
        return (df["verdict"] == "unknown") | (df["expected_busbw_gbps"].notna() & df["ceiling_busbw_gbps"].notna())

    @pa.dataframe_check(error="plateau_ci95_low_gbps must not exceed plateau_ci95_high_gbps")
    def interval_ordered(cls, df: pd.DataFrame) -> Series[bool]:
        """A confidence interval's low end is not above its high end."""
        both = df["plateau_ci95_low_gbps"].notna() & df["plateau_ci95_high_gbps"].notna()
        return ~both | (df["plateau_ci95_low_gbps"] <= df["plateau_ci95_high_gbps"])


class VerdictRowsSchema(_Table):
    """Per (verdicts run, judged file, message size): busbw over the sweep's repeats against the model's."""

    run_id: Series[str]
    source_file: Series[str] = pa.Field(str_length={"min_value": 1})
    size_bytes: Series[int] = pa.Field(gt=0)
    repeats: Series[int] = pa.Field(ge=1, description="measurements of this size pooled (files x in/out of place)")
    measured_busbw_gbps: Series[float] = pa.Field(ge=0)  # median over repeats
    busbw_mean_gbps: Series[float] = pa.Field(ge=0)
    busbw_stdev_gbps: Series[float] = pa.Field(ge=0, nullable=True)
    busbw_ci95_low_gbps: Series[float] = pa.Field(ge=0, nullable=True)
    busbw_ci95_high_gbps: Series[float] = pa.Field(ge=0, nullable=True)
    time_min_us: Series[float] = pa.Field(gt=0)
    expected_busbw_gbps: Series[float] = pa.Field(gt=0, nullable=True)
    percent_of_expected: Series[float] = pa.Field(ge=0, nullable=True)
    region: Series[str] = pa.Field(isin=REGIONS, nullable=True)
    verdict: Series[str] = pa.Field(isin=VERDICTS)

    class Config:
        strict = True
        coerce = True
        unique = ["run_id", "source_file", "size_bytes"]

    @pa.dataframe_check(error="percent_of_expected must equal 100 * measured_busbw_gbps / expected_busbw_gbps")
    def percent_matches_measured(cls, df: pd.DataFrame) -> Series[bool]:
        """A size's percentage is its median busbw against the model's busbw at that size."""
        return _percent_agrees(df, "measured_busbw_gbps", "expected_busbw_gbps")

    @pa.dataframe_check(error="a size without expected_busbw_gbps has verdict unknown, and one with it has a region")
    def unknown_without_expectation(cls, df: pd.DataFrame) -> Series[bool]:
        """Per size, as per sweep: no expectation, no judgement."""
        expected = df["expected_busbw_gbps"].notna()
        return (expected & df["region"].notna()) | (~expected & (df["verdict"] == "unknown") & df["region"].isna())


class DoctorFindingsSchema(_Table):
    """Per (doctor run, check): what the check read on the node, concluded, and which shortfall it explains."""

    run_id: Series[str]
    host: Series[str] = pa.Field(str_length={"min_value": 1})
    checked_at: Series[ZonedTime]
    check_name: Series[str] = pa.Field(str_length={"min_value": 1})  # `check` is an SQL keyword
    status: Series[str] = pa.Field(isin=STATUSES)
    read: Series[str]
    concluded: Series[str] = pa.Field(str_length={"min_value": 1})
    action: Series[str] = pa.Field(nullable=True)
    explains: Series[str] = pa.Field(nullable=True)
    details_json: Series[JsonText]

    class Config:
        strict = True
        coerce = True
        unique = ["run_id", "check_name"]
