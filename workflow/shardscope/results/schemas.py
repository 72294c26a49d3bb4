"""pandera schemas of every table in the database: what a valid row is.

Each schema checks what would make a number wrong or meaningless: positive, finite times
and sizes, known ops, strategies, outcomes and fabrics, world size at least 1, bus bandwidth
consistent with algorithm bandwidth and the op's nccl-tests factor, unique keys. The
database's DDL (:mod:`shardscope.results.ddl`) and the shapes of the input documents
(:mod:`shardscope.results.shapes`) are generated from these classes, so a column is
declared once, here.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from shardscope.contracts.names import OPS
from shardscope.results.schemas_calibration import CollectiveCalibrationChecksSchema, StepCalibrationsSchema
from shardscope.results.schemas_comm import TrainingCommSchema
from shardscope.results.schemas_decision import DecisionMapCellsSchema
from shardscope.results.schemas_memory_model import MemoryModelCasesSchema
from shardscope.results.schemas_diagnosis import DoctorFindingsSchema, VerdictRowsSchema, VerdictsSchema
from shardscope.results.schemas_search import SearchTrialsSchema
from shardscope.results.schemas_predictions import (CollectivePredictionsSchema, MemoryCasePredictionsSchema, MemoryPeakPredictionsSchema,
                                                 StrategyPredictionsSchema)
from shardscope.results.tablebase import BANDWIDTH_RTOL  # noqa: F401  (part of this module's API)
from shardscope.results.tablebase import JsonText, ZonedTime, _Table, algbw_matches, busbw_matches
from shardscope.results.tablebase import valid as _valid
from shardscope.contracts.names import FABRICS
from shardscope.topology.identity import topology_hash
from shardscope.contracts.names import OUTCOMES, STRATEGIES, TRAINING_DTYPES

#: Result documents that describe one job or one imported log (each has a world size).
JOB_KINDS = ("collectives", "training", "collectives_import", "search")
#: Documents derived on or for a machine: modeled predictions (of planned jobs, and of measured runs), verdicts of
#: measured sweeps, doctor findings.
DERIVED_KINDS = ("predictions", "run_predictions", "verdicts", "doctor")
KINDS = JOB_KINDS + DERIVED_KINDS
#: measured by our workers; nccl-tests and reference logs imported; modeled by the cost model;
#: diagnosed (verdicts of stored sweeps, doctor checks of a node).
SOURCES = ("measured", "nccl-tests", "reference", "modeled", "diagnosed")
ACCELERATORS = ("nvidia", "amd", "none")
#: Relative tolerance of tokens/s against micro_batch * seq_len * world_size / median step time.
THROUGHPUT_RTOL = 1e-6


class RunsSchema(_Table):
    """One row per loaded document: a job result or imported log (where, when and with what it was
    measured), or a derived document (predictions: source modeled; verdicts, doctor: source diagnosed)."""

    run_id: Series[str] = pa.Field(unique=True, str_length={"min_value": 8},
                                   description="id of the loaded document: the key every other table's run_id refers to")
    kind: Series[str] = pa.Field(isin=KINDS)
    source: Series[str] = pa.Field(isin=SOURCES)
    job_id: Series[str] = pa.Field(str_length={"min_value": 1})
    host: Series[str] = pa.Field(nullable=True)
    measured_at: Series[ZonedTime] = pa.Field(nullable=True)
    world_size: Series[pd.Int64Dtype] = pa.Field(ge=1, nullable=True)  # None only for derived kinds (not one job)
    placement: Series[str] = pa.Field(nullable=True)
    transport: Series[str] = pa.Field(nullable=True)
    fabric: Series[str] = pa.Field(nullable=True)
    label: Series[str] = pa.Field(nullable=True)
    backend: Series[str] = pa.Field(nullable=True)
    device_type: Series[str] = pa.Field(nullable=True)
    devices: Series[str] = pa.Field(nullable=True)
    torch_version: Series[str] = pa.Field(nullable=True)
    comm_library: Series[str] = pa.Field(nullable=True)
    nccl_version: Series[str] = pa.Field(nullable=True)
    cuda_version: Series[str] = pa.Field(nullable=True)
    deepspeed_version: Series[str] = pa.Field(nullable=True)
    git_rev: Series[str] = pa.Field(nullable=True)
    config_hash: Series[str] = pa.Field(nullable=True)
    source_file: Series[str]
    env_json: Series[JsonText]
    topology_hash: Series[str] = pa.Field(nullable=True, str_length={"min_value": 64, "max_value": 64})
    origin_db: Series[str] = pa.Field(nullable=True)
    # sha256 of the document as collect compares it (a derived document less its volatile fields);
    # null in databases written before it existed. Tells the same run collected again from a conflict.
    content_digest: Series[str] = pa.Field(nullable=True, str_length={"min_value": 64, "max_value": 64})

    class Config:
        strict = True
        coerce = True

    @pa.dataframe_check(error="a job result (kind collectives, training) needs a world_size")
    def jobs_have_a_world_size(cls, df: pd.DataFrame) -> Series[bool]:
        """Predictions, verdicts and doctor documents span several world sizes or none; jobs have exactly one.

        An imported log may not tell its rank count: its world_size is null, and its rows keep their printed busbw.
        """
        return df["world_size"].notna() | ~df["kind"].isin(JOB_KINDS) | (df["kind"] == "collectives_import")


class CollectivesSchema(_Table):
    """One row per (run, message size): raw bytes and seconds, and the bandwidths derived from them."""

    run_id: Series[str]
    op: Series[str] = pa.Field(isin=OPS)
    world_size: Series[pd.Int64Dtype] = pa.Field(ge=1, nullable=True)  # None: an imported log that did not tell it
    dtype: Series[str]
    size_bytes: Series[int] = pa.Field(gt=0)
    time_s: Series[float] = pa.Field(gt=0)
    time_max_s: Series[float] = pa.Field(gt=0, nullable=True)
    algbw_gbps: Series[float] = pa.Field(ge=0)
    busbw_gbps: Series[float] = pa.Field(ge=0)
    in_place: Series[bool]
    check_ok: Series[pd.BooleanDtype] = pa.Field(nullable=True)
    wrong: Series[int] = pa.Field(ge=0, nullable=True)  # wrong elements summed over ranks (nccl-tests' #wrong)

    class Config:
        strict = True
        coerce = True
        unique = ["run_id", "size_bytes", "in_place"]

    # The relations below are checked only where their inputs are valid numbers: a bad
    # input is reported once, by its own column's check, not again by every relation.

    @pa.dataframe_check(error="algbw_gbps must equal size_bytes / time_s / 1e9")
    def algbw_matches_time(cls, df: pd.DataFrame) -> Series[bool]:
        """Algorithm bandwidth is bytes over seconds, in 1e9 B/s."""
        return algbw_matches(df)

    @pa.dataframe_check(error="busbw_gbps must equal algbw_gbps times the op's nccl-tests factor for world_size")
    def busbw_matches_factor(cls, df: pd.DataFrame) -> Series[bool]:
        """Bus bandwidth is algorithm bandwidth times the op's factor (all_reduce 2(n-1)/n, …).

        Rows whose world size is null (an import whose log did not tell it) keep their printed busbw: not checked.
        """
        return busbw_matches(df)

    @pa.dataframe_check(error="check_ok must be true exactly when wrong is 0")
    def check_matches_wrong(cls, df: pd.DataFrame) -> Series[bool]:
        """The verification verdict and the count of wrong elements tell the same story."""
        known = df["check_ok"].notna() & df["wrong"].notna()
        agree = (df["check_ok"].astype("boolean") == (df["wrong"] == 0)).fillna(False).astype(bool)
        return ~known | agree

    @pa.dataframe_check(error="time_max_s (slowest rank) must not be below time_s (mean over ranks)")
    def slowest_rank_is_not_faster(cls, df: pd.DataFrame) -> Series[bool]:
        """The slowest rank's time bounds the mean from above."""
        return ~_valid(df["time_max_s"]) | ~_valid(df["time_s"]) | (df["time_max_s"] >= df["time_s"] * (1 - 1e-9))


class TrainingRunsSchema(_Table):
    """One row per training job: what was trained how, its outcome and its summary numbers."""

    run_id: Series[str] = pa.Field(unique=True)
    strategy: Series[str] = pa.Field(isin=STRATEGIES)
    model: Series[str] = pa.Field(str_length={"min_value": 1})
    param_count: Series[int] = pa.Field(gt=0, nullable=True)
    world_size: Series[int] = pa.Field(ge=1)
    placement: Series[str]
    dtype: Series[str] = pa.Field(isin=TRAINING_DTYPES, nullable=True)
    micro_batch: Series[int] = pa.Field(ge=1, nullable=True)
    seq_len: Series[int] = pa.Field(ge=1, nullable=True)
    outcome: Series[str] = pa.Field(isin=OUTCOMES)
    error: Series[str] = pa.Field(nullable=True)
    median_step_time_s: Series[float] = pa.Field(gt=0, nullable=True)
    tokens_per_s: Series[float] = pa.Field(gt=0, nullable=True)
    mfu: Series[float] = pa.Field(gt=0, le=1, nullable=True)
    peak_memory_bytes: Series[int] = pa.Field(gt=0, nullable=True)
    peak_memory_method: Series[str] = pa.Field(nullable=True)
    # CUDA's max_memory_reserved beside peak_memory_bytes (max_memory_allocated) on a GPU; null on CPU and in older runs.
    peak_memory_reserved_bytes: Series[pd.Int64Dtype] = pa.Field(gt=0, nullable=True)
    comm_time_share: Series[float] = pa.Field(ge=0, le=1, nullable=True)
    deepspeed_config: Series[JsonText] = pa.Field(nullable=True)
    # Repeats (issue 17): the median above is over `repeats` timed windows; 95% interval (null for 1 repeat).
    repeats: Series[pd.Int64Dtype] = pa.Field(ge=1, nullable=True)
    grad_accum: Series[pd.Int64Dtype] = pa.Field(ge=1, nullable=True)  # micro-batches per optimizer step (null: 1, older runs)
    ci95_low_step_time_s: Series[float] = pa.Field(gt=0, nullable=True)
    ci95_high_step_time_s: Series[float] = pa.Field(gt=0, nullable=True)
    ci95_low_tokens_per_s: Series[float] = pa.Field(gt=0, nullable=True)
    ci95_high_tokens_per_s: Series[float] = pa.Field(gt=0, nullable=True)
    # Fair settings (issue 17): gradient-reduction dtype, overlap, bucket policy; the whole block as JSON.
    reduce_dtype: Series[str] = pa.Field(isin=TRAINING_DTYPES, nullable=True)
    overlap_comm: Series[pd.BooleanDtype] = pa.Field(nullable=True)
    bucket_policy: Series[str] = pa.Field(isin=["framework_default", "equal_bytes"], nullable=True)
    settings_json: Series[JsonText] = pa.Field(nullable=True)
    # Bytes moved per step (measured in one untimed step) beside the ZeRO paper's volume (2Ψ, 3Ψ; modeled).
    comm_volume_bytes: Series[pd.Int64Dtype] = pa.Field(ge=0, nullable=True)
    comm_modeled_volume_bytes: Series[pd.Int64Dtype] = pa.Field(ge=0, nullable=True)
    comm_implementation_volume_bytes: Series[pd.Int64Dtype] = pa.Field(ge=0, nullable=True)  # as the framework implements it
    # Python function calls of one untimed step on rank 0 (the frameworks' host work; training/host_calls.py); null: older runs.
    host_calls_per_step: Series[pd.Int64Dtype] = pa.Field(ge=0, nullable=True)

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

    @pa.dataframe_check(error="tokens_per_s must equal micro_batch * grad_accum * seq_len * world_size / median_step_time_s")
    def throughput_matches_step_time(cls, df: pd.DataFrame) -> Series[bool]:
        """Throughput is derived from the step time; a mismatch means one of them is wrong."""
        accum = df["grad_accum"].astype("float64").fillna(1.0) if "grad_accum" in df else 1.0
        expected = df["micro_batch"] * accum * df["seq_len"] * df["world_size"] / df["median_step_time_s"]
        known = expected.notna() & df["tokens_per_s"].notna()
        close = np.isclose(df["tokens_per_s"].astype("float64"), expected.astype("float64"), rtol=THROUGHPUT_RTOL)
        return ~known | pd.Series(close, index=df.index)


class TrainingStepsSchema(_Table):
    """Per timed step of a training job: the slowest rank's step time."""

    run_id: Series[str]
    step: Series[int] = pa.Field(ge=0)
    step_time_s: Series[float] = pa.Field(gt=0)
    loss: Series[float] = pa.Field(nullable=True)
    repeat: Series[pd.Int64Dtype] = pa.Field(ge=0, nullable=True)  # which timed window (issue 17 repeats)
    # CUDA's max_memory_allocated so far after the step, largest rank; null on CPU and in older runs.
    peak_memory_bytes: Series[pd.Int64Dtype] = pa.Field(gt=0, nullable=True)

    class Config:
        strict = True
        coerce = True
        unique = ["run_id", "step"]


class TrainingMemorySchema(_Table):
    """Per rank of a training job: bytes held in parameters, gradients and optimizer state, and peak."""

    run_id: Series[str]
    rank: Series[int] = pa.Field(ge=0)
    param_bytes: Series[int] = pa.Field(gt=0)
    grad_bytes: Series[int] = pa.Field(ge=0)
    optim_bytes: Series[int] = pa.Field(ge=0)
    peak_memory_bytes: Series[int] = pa.Field(gt=0)
    peak_memory_reserved_bytes: Series[pd.Int64Dtype] = pa.Field(gt=0, nullable=True)  # CUDA's max_memory_reserved
    comm_time_share: Series[float] = pa.Field(ge=0, le=1, nullable=True)  # of a profiled step, where profiled
    # Tensor tracker of one untimed step (shardscope.training.memtrack); null in older documents.
    activation_bytes: Series[int] = pa.Field(ge=0, nullable=True)
    buffer_bytes: Series[int] = pa.Field(ge=0, nullable=True)
    activation_peak_bytes: Series[int] = pa.Field(ge=0, nullable=True)
    tracked_peak_bytes: Series[int] = pa.Field(ge=0, nullable=True)
    tracked_peak_phase: Series[str] = pa.Field(nullable=True)
    # CUDA allocator counters (null on CPU and in older documents).
    reserved_minus_allocated_bytes: Series[int] = pa.Field(nullable=True)
    max_reserved_bytes: Series[int] = pa.Field(ge=0, nullable=True)
    num_alloc_retries: Series[int] = pa.Field(ge=0, nullable=True)
    num_ooms: Series[int] = pa.Field(ge=0, nullable=True)

    class Config:
        strict = True
        coerce = True
        unique = ["run_id", "rank"]


class MemoryPredictionsSchema(_Table):
    """Per training run: the ZeRO paper's per-GPU bytes for its model, strategy, GPUs and dtype (modeled).

    Written by the predictions stage (``shardscope predict runs``, :mod:`shardscope.costmodel.run_predictions`):
    ``run_id`` is the prediction's run, ``measured_run_id`` the training run it models (null in rows that
    collect computed before the predictions stage did: their ``run_id`` is the training run's).
    """

    run_id: Series[str]
    measured_run_id: Series[str] = pa.Field(nullable=True)
    strategy: Series[str] = pa.Field(isin=STRATEGIES)
    model: Series[str]
    n_params: Series[int] = pa.Field(gt=0)
    gpus: Series[int] = pa.Field(ge=1)
    dtype: Series[str] = pa.Field(isin=TRAINING_DTYPES)
    param_bytes: Series[int] = pa.Field(ge=0)
    grad_bytes: Series[int] = pa.Field(ge=0)
    optim_bytes: Series[int] = pa.Field(ge=0)
    total_bytes: Series[int] = pa.Field(gt=0)
    method: Series[str] = pa.Field(isin=["modeled"])

    class Config:
        strict = True
        coerce = True
        unique = ["run_id", "measured_run_id"]

    @pa.dataframe_check(error="total_bytes must equal param_bytes + grad_bytes + optim_bytes (to within rounding)")
    def total_is_the_sum(cls, df: pd.DataFrame) -> Series[bool]:
        """Each part is rounded down on its own, the total once: they differ by at most 2 bytes."""
        slack = df["total_bytes"] - (df["param_bytes"] + df["grad_bytes"] + df["optim_bytes"])
        return (slack >= 0) & (slack <= 2)


def _topology_keys(doc: str) -> tuple[str, ...]:
    """The keys a stored topology document may have: its :func:`topology_hash`, or the older digest of the whole text."""
    try:
        hardware = (topology_hash(json.loads(doc)),)
    except (TypeError, ValueError):
        hardware = ()
    return (*hardware, hashlib.sha256(str(doc).encode()).hexdigest())


class TopologiesSchema(_Table):
    """One row per distinct topology.json: the node's fabric class, keyed by the hash of its document."""

    topology_hash: Series[str] = pa.Field(unique=True, str_length={"min_value": 64, "max_value": 64},
                                          description="key: sha256 of the machine's hardware (the document less the "
                                                      "probe time and file names; topology/identity.py)")
    host: Series[str] = pa.Field(nullable=True)
    fabric: Series[str] = pa.Field(isin=FABRICS)
    accelerator: Series[str] = pa.Field(isin=ACCELERATORS)
    gpu_count: Series[int] = pa.Field(ge=0)
    island_count: Series[int] = pa.Field(ge=0)
    numa_node_count: Series[int] = pa.Field(ge=0)
    source_method: Series[str] = pa.Field(nullable=True)
    source_json: Series[JsonText]
    source_file: Series[str]
    topology_json: Series[JsonText]
    origin_db: Series[str] = pa.Field(nullable=True)

    class Config:
        strict = True
        coerce = True

    @pa.dataframe_check(error="topology_hash must be the topology_hash of topology_json (its hardware, less the probe time "
                              "and file names)")
    def hash_matches_document(cls, df: pd.DataFrame) -> Series[bool]:
        """The key is the digest of the document's hardware, so two probes of one machine are one row.

        A row written before the hash left out the probe time (a database merged from an older
        shardscope) holds the sha256 of the whole document; that key still names it, and is accepted.
        """
        return pd.Series([key in _topology_keys(doc) for key, doc in zip(df["topology_hash"], df["topology_json"])],
                         index=df.index, dtype=bool)

    @pa.dataframe_check(error="fabric cpu needs gpu_count 0, fabric single needs gpu_count 1, any other fabric at least 2 GPUs")
    def fabric_matches_gpu_count(cls, df: pd.DataFrame) -> Series[bool]:
        """The fabric class is defined by the GPU count for zero and one GPU (docs/design.md)."""
        n, fabric = df["gpu_count"], df["fabric"]
        return ((fabric == "cpu") & (n == 0)) | ((fabric == "single") & (n == 1)) | (~fabric.isin(["cpu", "single"]) & (n >= 2))


class GpusSchema(_Table):
    """One row per GPU of a topology: what the probe saw, and the NVLink island it belongs to."""

    topology_hash: Series[str]
    gpu_index: Series[int] = pa.Field(ge=0)
    name: Series[str] = pa.Field(nullable=True)
    memory_bytes: Series[int] = pa.Field(gt=0, nullable=True)
    pci_bus_id: Series[str] = pa.Field(nullable=True)
    numa_node: Series[int] = pa.Field(ge=0, nullable=True)
    cpu_affinity: Series[str] = pa.Field(nullable=True)
    pcie_generation: Series[int] = pa.Field(ge=1, nullable=True)
    pcie_width: Series[int] = pa.Field(ge=1, nullable=True)
    island: Series[int] = pa.Field(ge=0)

    class Config:
        strict = True
        coerce = True
        unique = ["topology_hash", "gpu_index"]


class LinksSchema(_Table):
    """One row per GPU pair of a topology: the matrix code (NV18, PIX, SYS…) and the NVLink count."""

    topology_hash: Series[str]
    gpu_a: Series[int] = pa.Field(ge=0)
    gpu_b: Series[int] = pa.Field(ge=0)
    code: Series[str] = pa.Field(str_length={"min_value": 1})
    nvlinks: Series[int] = pa.Field(ge=0)

    class Config:
        strict = True
        coerce = True
        unique = ["topology_hash", "gpu_a", "gpu_b"]

    @pa.dataframe_check(error="a link's endpoints must be ordered gpu_a < gpu_b")
    def endpoints_ordered(cls, df: pd.DataFrame) -> Series[bool]:
        """Each pair appears once, lower index first (as topology.json writes it)."""
        return df["gpu_a"] < df["gpu_b"]


#: Table name -> schema, in the order tables are created and loaded (parents first).
TABLES: dict[str, type[pa.DataFrameModel]] = {
    "runs": RunsSchema,
    "collectives": CollectivesSchema,
    "training_runs": TrainingRunsSchema,
    "training_steps": TrainingStepsSchema,
    "training_memory": TrainingMemorySchema,
    "training_comm": TrainingCommSchema,
    "memory_predictions": MemoryPredictionsSchema,
    "memory_peak_predictions": MemoryPeakPredictionsSchema,
    "topologies": TopologiesSchema,
    "gpus": GpusSchema,
    "links": LinksSchema,
    "collective_predictions": CollectivePredictionsSchema,
    "strategy_predictions": StrategyPredictionsSchema,
    "memory_case_predictions": MemoryCasePredictionsSchema,
    "verdicts": VerdictsSchema,
    "verdict_rows": VerdictRowsSchema,
    "doctor_findings": DoctorFindingsSchema,
    "step_calibrations": StepCalibrationsSchema,
    "collective_calibration_checks": CollectiveCalibrationChecksSchema,
    "decision_map_cells": DecisionMapCellsSchema,
    "memory_model_cases": MemoryModelCasesSchema,
    "search_trials": SearchTrialsSchema,
}

#: The key column that ties a table's rows to one loaded unit, and the parent table that owns it.
OWNER_KEYS: dict[str, str] = {"run_id": "runs", "topology_hash": "topologies"}
_TOPOLOGY_TABLES = ("topologies", "gpus", "links")


def owner_key(table: str) -> str:
    """The column (``run_id`` or ``topology_hash``) by which ``table``'s rows belong to a run or topology.

    Rows are loaded, skipped and merged by this key: all of a run's rows, or none.
    """
    return "topology_hash" if table in _TOPOLOGY_TABLES else "run_id"


def columns(table: str) -> list[str]:
    """The columns of ``table`` in schema order."""
    return list(TABLES[table].to_schema().columns)


def unique_keys(table: str) -> list[str]:
    """The columns whose combination is unique in ``table`` (a single unique column, or Config.unique)."""
    schema = TABLES[table].to_schema()
    if schema.unique:
        return list(schema.unique)
    return [name for name, col in schema.columns.items() if col.unique]
