"""The pipeline config as frozen dataclasses, built once from the validated YAML with its defaults filled in.

One source of truth each: a key's default is the schema's ``default:`` (``workflow/schemas/config.schema.yaml``,
filled in by :func:`shardscope.config.with_defaults`), never a value here; a field's docstring is its key's
``description:`` there, word for word (``tests/test_config_settings.py`` holds the two equal and every field a key
of the schema, and the other way round). A model entry stays what it was written as: a preset name (or the path
of a Hugging Face ``config.json``), or a mapping of dimensions (:data:`Model`); so do the emulated fabric
definitions, which :mod:`shardscope.emulated.presets` reads and checks. A sweep is the job specs' own
:class:`~shardscope.contracts.jobs.Sweep` (its docstrings are the schema's descriptions of its keys).

:func:`planner_settings` is what :func:`shardscope.plan.planner.make_plan` reads: the keys the planner needs
(:class:`PlannerSettings`); :func:`settings` the whole config (:class:`Settings`).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, Union

from shardscope.contracts.jobs import SpecError, Sweep
from shardscope.errors import UserError

#: A model entry: a preset name or a ``config.json`` path, or a mapping of dimensions
#: (read by :func:`shardscope.contracts.models.resolve_model`).
Model = Union[str, Mapping[str, Any]]


@dataclass(frozen=True)
class Sizing:
    """How the jobs of one machine kind are sized (config ``cpu`` or ``gpu``)."""

    ranks: int | None
    """ranks per job on a machine without GPUs (at least 2, required in cpu); null: not given (gpu)"""
    sweep: Sweep
    """message sizes of the collective sweeps: min_bytes to max_bytes by factor, warmup and iters each"""
    model: Model
    """the model trained: a preset, the path of a Hugging Face config.json, or explicit dimensions"""
    dtype: str
    """training precision: float32, or bfloat16 (mixed precision, fp32 master weights)"""
    micro_batch: int
    """sequences per rank per step"""
    seq_len: int
    """tokens per sequence"""
    warmup: int
    """untimed steps before timing (at least 1: optimizer state exists only after a step)"""
    steps: int
    """timed steps per repeat"""
    repeats: int
    """timed windows of steps per job: the step time is the median of their medians, with a 95% CI"""


@dataclass(frozen=True)
class Topology:
    """Where the topology comes from (config ``topology``)."""

    file: str | None
    """a saved `nvidia-smi topo -m` / `rocm-smi --showtopo` output to use instead of probing; null: probe"""


@dataclass(frozen=True)
class Collectives:
    """The collective benchmarks (config ``collectives``)."""

    ops: tuple[str, ...]
    """collectives to time"""
    dtype: str
    """element type of the buffers"""
    transports: tuple[str, ...]
    """transports compared: default (NCCL's choice), pcie (NVLink switched off; only where NVLink exists)"""
    check: bool
    """verify each op's result once before timing it"""
    timeout_s: float
    """seconds a collective may wait on a peer before the job fails (a hung rank)"""
    job_timeout_s: float
    """wall-clock limit of one collective job in seconds"""


@dataclass(frozen=True)
class Conditions:
    """The fabric conditions besides the default one, each with the strategies trained under it."""

    pcie: tuple[str, ...]
    """strategies trained with NVLink switched off (nodes with NVLink); empty: not planned"""
    one_island: tuple[str, ...]
    """strategies trained inside one NVLink island (nodes of NVL pairs or quads); empty: not planned"""
    cross_island: tuple[str, ...]
    """strategies trained at one island's size over two islands; empty: not planned"""
    one_numa: tuple[str, ...]
    """strategies trained inside one NUMA node (PCIe-only nodes); empty: not planned"""
    cross_numa: tuple[str, ...]
    """strategies trained at one NUMA node's size over NUMA nodes; empty: not planned"""


@dataclass(frozen=True)
class MemoryBound:
    """The memory-bound model scale of a GPU plan (config ``training.memory_bound``)."""

    model: Model
    """the memory-bound model (scaled down where even ZeRO-3 cannot hold it)"""
    seq_len: int
    """tokens per sequence of the memory-bound jobs"""
    micro_batch: int
    """sequences per rank per step of the memory-bound jobs"""
    strategies: tuple[str, ...]
    """strategies trained at the memory-bound scale"""


@dataclass(frozen=True)
class Search:
    """The micro-batch search written out (config ``training.search: {limit: ...}``)."""

    limit: int
    """the largest micro-batch tried"""
    strategies: tuple[str, ...] | None
    """strategies searched; null: training.strategies"""
    global_batch: int | None
    """a positive integer up to 16777216 (sequences per optimizer step over all ranks) or null"""
    activation_checkpointing: str | None
    """none, full, selective_op or selective_layer: the trials and best runs recompute blocks in backward as that mode
    says (full: every block; selective_op and selective_layer: torchtitan's); null: each job's"""


@dataclass(frozen=True)
class Training:
    """The training benchmarks (config ``training``)."""

    strategies: tuple[str, ...]
    """strategies trained under the default condition"""
    world_sizes: Literal["max"] | tuple[int, ...]
    """'max' or a list of positive integers"""
    conditions: Conditions
    """fabric condition -> strategies trained under it; see config/README.md"""
    memory_bound: MemoryBound | None
    """the memory-bound model scale of a GPU plan; see config/README.md"""
    search: Search | Literal["auto"] | None
    """the micro-batch search: auto (GPU nodes: every strategy from the memory model's micro-batch), null, or
    {limit: ...}; see config/README.md"""
    memory_budget_gib: float | None
    """a per-GPU memory budget in GiB: runs whose peak exceeds it get outcome over_budget; null: none"""
    activation_checkpointing: str
    """none; full: every transformer block recomputed in backward; selective_op: torchtitan's op-level selective
    checkpointing (each block keeps its attention output and every other matmul's); selective_layer: every second
    block recomputed"""
    optimizer: str
    """adamw (fp32 master and moments), or adamw_bf16_states (ZeRO-1/2/3 in bf16 only)"""
    hsdp: str | bool
    """auto: GPU nodes whose ranks span NVLink islands also train hsdp; off (or false): never added"""
    hpz: str | bool
    """auto: where hsdp is added, zero3_hpz is trained too; off (or false): never added"""
    reduce_dtype: str
    """gradient-reduction dtype of every strategy: auto (the training dtype), float32, bfloat16"""
    buckets: str
    """default: each framework's bucket sizes; equal: DDP's 25 MiB for DeepSpeed too"""
    timeout_s: float
    """seconds one collective of a training job may wait on a peer (a positive number up to 86400)"""
    job_timeout_s: Literal["auto"] | float
    """'auto' (3x the job's modeled or measured time, at least 1200 s) or a positive number of seconds up to 604800"""


@dataclass(frozen=True)
class Cluster:
    """Jobs across Slurm nodes (config ``cluster``)."""

    nodes: int
    """above 1: also run each op and strategy across this many Slurm nodes (placement multi_node)"""
    gpus_per_node: int | None
    """a rank count per node up to 1024, or null (every GPU of a node; 1 process on CPU nodes)"""


@dataclass(frozen=True)
class EmulatedTraining:
    """The ``cpu`` sizing keys replaced for training over emulated fabrics."""

    micro_batch: int | None
    """sequences per rank per step over emulated fabrics; null: cpu's"""
    seq_len: int | None
    """tokens per sequence over emulated fabrics; null: cpu's"""


@dataclass(frozen=True)
class Emulated:
    """The emulated fabrics (config ``emulated``)."""

    enabled: bool | Literal["auto"]
    """true: run the emulated fabrics; false: do not; auto: run them on a machine without GPUs (where root, ip and
    tc allow), not on a GPU node"""
    presets: tuple[str, ...]
    """fabric presets to run, each over every placement it defines"""
    strategies: tuple[str, ...] | None
    """strategies trained over every emulated preset and placement that stands for a condition; null:
    training.conditions'"""
    training: EmulatedTraining
    """cpu sizing keys replaced for training over emulated fabrics (a heavier step, the same model)"""
    ops: tuple[str, ...]
    """collectives timed over each preset and placement"""
    sweep: Sweep
    """message sizes of the emulated collectives (capped links are slow: keep it short)"""
    prefix: str
    """namespace names start with this; `shardscope fabric cleanup` removes only these"""
    subnet: str
    """private addresses of the emulated hosts, never routed out of their namespaces"""
    timeout_s: float
    """a job still running after this many seconds is stopped"""
    fabrics: Mapping[str, Mapping[str, Any]]
    """fabric presets by name, added to or replacing the built-in ones"""


@dataclass(frozen=True)
class PlannerSettings:
    """The keys of the config the planner reads (the plan rule passes only these, so that an edit elsewhere, a
    figure option or the database path, re-plans nothing)."""

    world_sizes: Literal["auto"] | tuple[int, ...]
    """'auto' or a list of positive integers"""
    collectives: Collectives
    """the collective benchmarks"""
    training: Training
    """the training benchmarks"""
    cluster: Cluster
    """jobs across Slurm nodes; see config/README.md"""
    cpu: Sizing
    """sizing on a machine without GPUs"""
    gpu: Sizing
    """sizing on a GPU node"""
    emulated: Emulated
    """emulated fabrics (network namespaces, veth links, tc); see config/README.md"""


@dataclass(frozen=True)
class Settings(PlannerSettings):
    """The whole pipeline config."""

    results: str
    """folder for every output of the pipeline"""
    db: str
    """the results database (kept across runs; runs accumulate)"""
    topology: Topology
    """where the topology comes from"""


#: The top-level config keys the planner reads: the fields of :class:`PlannerSettings`.
PLANNER_KEYS = tuple(f.name for f in fields(PlannerSettings))


def planner_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``config`` that :func:`shardscope.plan.planner.make_plan` reads: :data:`PLANNER_KEYS`, and of a
    disabled ``emulated`` section only ``enabled`` (its presets and timeouts plan nothing then)."""
    subset = {key: config[key] for key in PLANNER_KEYS if key in config}
    emulated = subset.get("emulated")
    if isinstance(emulated, dict) and emulated.get("enabled") not in (True, "auto"):
        subset["emulated"] = {"enabled": False}
    return subset


def from_dict(cls: type[Any], data: Any, path: str = "") -> Any:
    """``cls`` (a settings dataclass) built from the mapping ``data``, nested sections built as theirs, lists as
    tuples, every other value as it is: ``data`` is the validated config with its defaults filled in, so no value
    is made up here. A key ``cls`` lacks raises :class:`KeyError` naming it (``training.strategies``); a section
    that is not a mapping, or a key the section does not have, a :class:`UserError` naming it (what a config that
    skipped the schema gets from the planner)."""
    names = [f.name for f in fields(cls)]
    if not isinstance(data, Mapping):
        raise UserError(f"config key {path or '(top level)'}: {data!r} is not valid; expected a mapping of "
                        f"{', '.join(names)}")
    unknown = [key for key in data if key not in names]
    if unknown:
        raise UserError(f"config key {path or '(top level)'}: unknown key {unknown[0]!r}; expected some of "
                        f"{', '.join(names)}")
    hints = typing.get_type_hints(cls)
    values = {}
    for name in names:
        where = f"{path}.{name}" if path else name
        if name not in data:
            raise KeyError(where)
        values[name] = _value(hints[name], data[name], where)
    try:
        return cls(**values)
    except SpecError as exc:  # a sweep no job can run (min_bytes above max_bytes), which the schema lets through
        raise UserError(f"config key {path}: {exc}") from None


def _value(hint: Any, value: Any, where: str) -> Any:
    """``value`` of the field typed ``hint``: a section (a dataclass, alone or in a union with other values) built
    from a mapping, a list where the type is a tuple made one, anything else as it is."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (Union, types.UnionType) else (hint,)
    for option in options:
        if is_dataclass(option) and (isinstance(value, Mapping) or len(options) == 1):
            return from_dict(option, value, where)
        if typing.get_origin(option) is tuple and isinstance(value, list):
            return tuple(value)
    return value


def planner_settings(config: Mapping[str, Any] | PlannerSettings) -> PlannerSettings:
    """What the planner reads of ``config`` (the whole config, or the planner's part of it as the plan rule passes
    it): :func:`planner_config` of it with the schema's defaults filled in, as :class:`PlannerSettings`. Settings
    already built are returned as they are."""
    from shardscope.config import with_defaults

    if isinstance(config, PlannerSettings):
        return config
    return from_dict(PlannerSettings, with_defaults(planner_config(config)))


def section_settings(cls: type[Any], key: str, section: Mapping[str, Any] | Any) -> Any:
    """The config section at dotted ``key`` (``training.memory_bound``) given alone as a mapping, with the schema's
    defaults filled in, as ``cls``; settings already built are returned as they are."""
    from shardscope.config import with_defaults

    if isinstance(section, cls):
        return section
    *parents, last = key.split(".")
    skeleton: dict[str, Any] = {last: section}
    for parent in reversed(parents):
        skeleton = {parent: skeleton}
    filled: Any = with_defaults(skeleton)
    for part in key.split("."):
        filled = filled[part]
    return from_dict(cls, filled, key)


def settings(config: Mapping[str, Any], schema_path: str | Path | None = None) -> Settings:
    """The whole pipeline config (validated already, as the Snakefile does) with the defaults of the schema at
    ``schema_path`` (default: the package's, :data:`shardscope.config.SCHEMA_PATH`) filled in, as :class:`Settings`."""
    from shardscope.config import SCHEMA_PATH, with_defaults

    return from_dict(Settings, with_defaults(config, schema_path or SCHEMA_PATH))
