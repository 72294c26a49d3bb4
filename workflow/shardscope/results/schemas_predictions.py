"""pandera schemas of the cost model's predictions (``kind: predictions`` documents), all ``method: modeled``.

The rows come from :mod:`shardscope.costmodel.documents`: collectives predicted with the
nccl-tests definitions of algbw and busbw (so they overlay measured rows), and one step per
strategy with its modeled time and memory. ``topology_hash`` is the key of the
``topologies`` table: predictions join the machine they were made for.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from shardscope.contracts.names import CHECKPOINTING_MODES, OPS
from shardscope.results.tablebase import _Table, algbw_matches, busbw_matches
from shardscope.contracts.names import FABRICS
from shardscope.contracts.names import STRATEGIES
from shardscope.contracts.names import MEMORY_MODELS

#: Modeled values are computed, not printed and re-read: their relations hold to rounding error.
MODELED_RTOL = 1e-6
#: What the model's weakest cut is made of (``cpu``: gloo placeholders, no physical link).
BOTTLENECKS = ("nvlink", "pcie", "net", "cpu")
#: NCCL's algorithms (``calibrated:`` when fitted to measured rows; ``pairwise``: all-to-all) and gloo for CPU processes.
ALGORITHM_PATTERN = r"^(calibrated:)?(ring|tree|nvls|nvls_tree|pairwise|gloo)$"
PROTOCOLS = ("LL", "LL128", "Simple", "tcp")
TRANSPORTS = ("default", "pcie")
_HASH = {"min_value": 64, "max_value": 64}


class CollectivePredictionsSchema(_Table):
    """Per (prediction run, op, world size, message size, transport): the modeled time and nccl-tests bandwidths."""

    run_id: Series[str]
    op: Series[str] = pa.Field(isin=OPS)
    world_size: Series[int] = pa.Field(ge=2)
    nodes: Series[int] = pa.Field(ge=1)
    size_bytes: Series[int] = pa.Field(gt=0)
    time_s: Series[float] = pa.Field(gt=0)
    algbw_gbps: Series[float] = pa.Field(ge=0)
    busbw_gbps: Series[float] = pa.Field(ge=0)
    algorithm: Series[str] = pa.Field(str_matches=ALGORITHM_PATTERN)
    protocol: Series[str] = pa.Field(isin=PROTOCOLS)
    bottleneck: Series[str] = pa.Field(isin=BOTTLENECKS)
    placement: Series[str] = pa.Field(str_length={"min_value": 1})  # GPU indices "0,1,2,3", or "cpu"
    transport: Series[str] = pa.Field(isin=TRANSPORTS)
    fabric: Series[str] = pa.Field(isin=FABRICS)
    topology_hash: Series[str] = pa.Field(str_length=_HASH)
    method: Series[str] = pa.Field(isin=["modeled"])

    class Config:
        strict = True
        coerce = True
        unique = ["run_id", "op", "world_size", "size_bytes", "transport"]

    @pa.dataframe_check(error="algbw_gbps must equal size_bytes / time_s / 1e9")
    def algbw_matches_time(cls, df: pd.DataFrame) -> Series[bool]:
        """Modeled algorithm bandwidth is bytes over the modeled seconds, as for measured rows."""
        return algbw_matches(df, MODELED_RTOL)

    @pa.dataframe_check(error="busbw_gbps must equal algbw_gbps times the op's nccl-tests factor for world_size")
    def busbw_matches_factor(cls, df: pd.DataFrame) -> Series[bool]:
        """Modeled bus bandwidth uses the same factors as measured rows, so the two overlay."""
        return busbw_matches(df, MODELED_RTOL)

    @pa.dataframe_check(error="world_size must be a whole number of ranks per node (a multiple of nodes)")
    def ranks_fill_whole_nodes(cls, df: pd.DataFrame) -> Series[bool]:
        """A multi-node job uses the same GPUs on every node."""
        ok = (df["nodes"] >= 1) & (df["world_size"] >= 1)
        return ~ok | (df["world_size"] % df["nodes"].where(ok, 1) == 0)


class StrategyPredictionsSchema(_Table):
    """Per (prediction run, strategy, model, GPUs): the modeled step time, its parts, and memory against the GPU's."""

    run_id: Series[str]
    strategy: Series[str] = pa.Field(isin=STRATEGIES)
    model: Series[str] = pa.Field(str_length={"min_value": 1})
    param_count: Series[int] = pa.Field(gt=0)
    gpus: Series[int] = pa.Field(ge=1)
    placement: Series[str] = pa.Field(str_length={"min_value": 1})
    step_time_s: Series[float] = pa.Field(gt=0)
    compute_time_s: Series[float] = pa.Field(gt=0)
    comm_time_s: Series[float] = pa.Field(ge=0)
    exposed_comm_time_s: Series[float] = pa.Field(ge=0)
    memory_total_bytes: Series[int] = pa.Field(gt=0)
    memory_available_bytes: Series[pd.Int64Dtype] = pa.Field(gt=0, nullable=True)
    fits: Series[pd.BooleanDtype] = pa.Field(nullable=True)
    tokens_per_step: Series[int] = pa.Field(ge=1)
    fabric: Series[str] = pa.Field(isin=FABRICS)
    topology_hash: Series[str] = pa.Field(str_length=_HASH)
    method: Series[str] = pa.Field(isin=["modeled"])

    class Config:
        strict = True
        coerce = True
        unique = ["run_id", "strategy", "model", "gpus"]

    @pa.dataframe_check(error="step_time_s must equal compute_time_s + exposed_comm_time_s")
    def step_is_compute_plus_exposed(cls, df: pd.DataFrame) -> Series[bool]:
        """The step model's definition: communication hidden behind compute costs nothing."""
        expected = df["compute_time_s"].astype("float64") + df["exposed_comm_time_s"].astype("float64")
        return pd.Series(np.isclose(df["step_time_s"].astype("float64"), expected, rtol=MODELED_RTOL, atol=0), index=df.index)

    @pa.dataframe_check(error="exposed_comm_time_s must not exceed comm_time_s")
    def exposed_within_comm(cls, df: pd.DataFrame) -> Series[bool]:
        """Only part of the communication can be exposed, never more than all of it."""
        return df["exposed_comm_time_s"] <= df["comm_time_s"] * (1 + MODELED_RTOL) + 1e-12

    @pa.dataframe_check(error="fits must be memory_total_bytes <= memory_available_bytes, and null when the memory is unknown")
    def fits_matches_memory(cls, df: pd.DataFrame) -> Series[bool]:
        """Whether a strategy fits is the comparison of its modeled bytes with the usable GPU memory."""
        known = df["memory_available_bytes"].notna()
        fits = df["fits"].astype("boolean")
        agree = (fits == (df["memory_total_bytes"] <= df["memory_available_bytes"])).fillna(False).astype(bool)
        return (known & agree) | (~known & fits.isna())


#: Phases in which the modeled peak can happen (:func:`shardscope.costmodel.memory_peak.predict_peak`).
PEAK_PHASES = ("forward", "backward", "backward_blocks", "backward_end", "step")


class _WholePeakTerms(_Table):
    """The columns every stored whole peak shares: its shape and each modeled term (their sum is the peak)."""

    strategy: Series[str] = pa.Field(isin=STRATEGIES)
    gpus: Series[int] = pa.Field(ge=1)
    dtype: Series[str] = pa.Field(isin=["float32", "bfloat16"])
    micro_batch: Series[int] = pa.Field(ge=1)
    seq_len: Series[int] = pa.Field(ge=1)
    checkpointing: Series[str] = pa.Field(isin=list(CHECKPOINTING_MODES))
    device: Series[str] = pa.Field(isin=["cpu", "gpu"])
    param_bytes: Series[int] = pa.Field(ge=0)
    grad_bytes: Series[int] = pa.Field(ge=0)
    optim_bytes: Series[int] = pa.Field(ge=0)
    activation_bytes: Series[int] = pa.Field(ge=0)
    buffer_bytes: Series[int] = pa.Field(ge=0)
    overhead_bytes: Series[int] = pa.Field(ge=0)
    peak_bytes: Series[int] = pa.Field(gt=0)
    peak_phase: Series[str] = pa.Field(isin=PEAK_PHASES)
    method: Series[str] = pa.Field(isin=["modeled"])

    @pa.dataframe_check(error="peak_bytes must equal the sum of the states, activations, buffers and overhead")
    def peak_is_the_sum_of_its_terms(cls, df: pd.DataFrame) -> Series[bool]:
        """The modeled peak is its terms added up, nothing else."""
        parts = ("param_bytes", "grad_bytes", "optim_bytes", "activation_bytes", "buffer_bytes", "overhead_bytes")
        return df["peak_bytes"] == sum(df[c] for c in parts)


class MemoryPeakPredictionsSchema(_WholePeakTerms):
    """Per (training run, model of the states): every modeled term of the whole per-GPU peak (issue 18).

    Written by the predictions stage (``shardscope predict runs``,
    :func:`shardscope.costmodel.memory_check.memory_terms_rows`) for the run's strategy, model, GPUs, dtype,
    micro-batch, sequence length and settings; figure 3 and the report only query it (the view
    ``modeled_run_peaks``). ``peak_bytes`` is the sum of the terms; the overhead is 0 until calibrated on
    measured runs. ``run_id`` is the prediction's run, ``measured_run_id`` the training run it models (null in
    rows collect computed before the predictions stage did: their ``run_id`` is the training run's).
    """

    run_id: Series[str]
    measured_run_id: Series[str] = pa.Field(nullable=True)
    memory_model: Series[str] = pa.Field(isin=MEMORY_MODELS)
    model: Series[str] = pa.Field(nullable=True)
    attention: Series[str] = pa.Field(isin=["sdpa", "eager"])

    class Config:
        strict = True
        coerce = True
        unique = ["run_id", "measured_run_id", "memory_model"]


#: The named cases the predictions stage models (:mod:`shardscope.costmodel.memory_cases`).
MEMORY_CASES = ("planned", "seed_mistral")


class MemoryCasePredictionsSchema(_WholePeakTerms):
    """Per (prediction run, case, strategy, model, GPUs, checkpointing): the modeled whole peak and whether it fits.

    Written by the predictions stage: the plan's training jobs (``planned``) and the seed
    article's Mistral-7B on 8 x 80 GB at seq 4096 (``seed_mistral``), which the report's table reads.
    """

    run_id: Series[str]
    memory_case: Series[str] = pa.Field(isin=MEMORY_CASES)
    model: Series[str] = pa.Field(str_length={"min_value": 1})
    capacity_bytes: Series[pd.Int64Dtype] = pa.Field(gt=0, nullable=True)
    fits: Series[pd.BooleanDtype] = pa.Field(nullable=True)

    class Config:
        strict = True
        coerce = True
        unique = ["run_id", "memory_case", "strategy", "model", "gpus", "checkpointing"]

    @pa.dataframe_check(error="fits must be peak_bytes <= capacity_bytes, and null when the capacity is unknown")
    def fits_matches_capacity(cls, df: pd.DataFrame) -> Series[bool]:
        """"Fits" is the whole peak against the GPU's memory, nothing less."""
        known = df["capacity_bytes"].notna()
        agree = (df["fits"].astype("boolean") == (df["peak_bytes"] <= df["capacity_bytes"])).fillna(False).astype(bool)
        return (known & agree) | (~known & df["fits"].isna())
