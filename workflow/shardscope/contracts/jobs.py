"""Typed job specs: what ``plan.json`` lists for every job the pipeline runs, complete.

A spec holds everything its job needs (sweep, sizing, dtype, environment, GPUs, ranks, nodes,
limits), so ``shardscope job run --plan plan.json --id JOB`` needs nothing else, and a job's
spec file (``results/plan/jobs/{id}.json``) changes exactly when what the job measures does.

Each spec is a frozen, keyword-only dataclass; :func:`job_from_dict` reads one back from its
JSON form (``kind`` names the class) and refuses a hand-edited one that lost a field or holds
a wrong value with one sentence naming the job id and the field. Torch-free.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

from shardscope.contracts.models import ModelConfig, resolve_model
from shardscope.contracts.names import (
    BUCKET_POLICIES,
    CHECKPOINTING_MODES,
    COLLECTIVE_DTYPES,
    GROUPED_STRATEGIES,
    OPS,
    REDUCE_DTYPES,
    STRATEGIES,
    TRAINING_DTYPES,
    TRANSPORTS,
    WORKER_OPTIMIZERS,
)


#: Field metadata: leave the field out of the JSON form while it holds its default, so adding such a
#: field changes no earlier job's spec file (and reruns no job).
OMIT_DEFAULT = {"omit_default": True}


class SpecError(ValueError):
    """A job spec field holds a value its job cannot run with (the message names the field)."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"field {field_name!r} {problem}")
        self.field_name = field_name
        self.problem = problem


@dataclass(frozen=True, kw_only=True)
class Sweep:
    """Message sizes and repetitions of a collective sweep (the nccl-tests flags of the same name)."""

    min_bytes: int
    """Smallest message, bytes (``-b``)."""
    max_bytes: int
    """Largest message, bytes (``-e``)."""
    factor: int
    """Each size is the previous one times this (``-f``)."""
    warmup: int
    """Untimed calls per size (``-w``)."""
    iters: int
    """Timed calls per size (``-n``)."""

    def __post_init__(self) -> None:
        if not 1 <= self.min_bytes <= self.max_bytes:
            raise SpecError("sweep.min_bytes", f"is {self.min_bytes}; expected 1 <= min_bytes <= max_bytes ({self.max_bytes})")
        if self.factor < 2:
            raise SpecError("sweep.factor", f"is {self.factor}; expected at least 2")
        if self.warmup < 0 or self.iters < 1:
            raise SpecError("sweep.iters", f"is {self.iters} (warmup {self.warmup}); expected iters >= 1 and warmup >= 0")


@dataclass(frozen=True, kw_only=True)
class Ranks:
    """Where a job's ranks run: the fields every job kind shares."""

    job_id: str
    """The job's name: the stem of its result, log and spec files."""
    world_size: int
    """Ranks in all (``nodes`` x ``nproc_per_node``)."""
    nodes: int = 1
    """Nodes the job spans; above 1 it runs inside a Slurm allocation (srun, one torchrun agent per node)."""
    nproc_per_node: int
    """Ranks on each node (one per GPU on a GPU node)."""
    placement: str
    """Name of the GPU set the ranks use (``one_island``, ``all``, ``local``, ``multi_node``...)."""
    devices: tuple[int, ...] = ()
    """GPU indices (PCI bus order) each node's ranks use; empty on CPU."""
    cuda_visible_devices: str | None = None
    """``devices`` as ``CUDA_VISIBLE_DEVICES`` wants them, or None (CPU, or every GPU)."""
    env: dict[str, str] = field(default_factory=dict)
    """Variables the job sets (GPU numbering, the transport's NCCL knobs)."""

    def __post_init__(self) -> None:
        if not self.job_id or "/" in self.job_id:
            raise SpecError("job_id", f"is {self.job_id!r}; expected a file-name-safe id")
        foreign = sorted(set(self.env) - PLANNED_ENV)
        if foreign:
            raise SpecError(f"env.{foreign[0]}", "is not a variable the planner sets; expected only "
                                                 f"{', '.join(sorted(PLANNED_ENV))} (a plan's env reaches every rank)")
        for name in ("world_size", "nodes", "nproc_per_node"):
            if getattr(self, name) < 1:
                raise SpecError(name, f"is {getattr(self, name)}; expected at least 1")
        if self.nodes * self.nproc_per_node != self.world_size:
            raise SpecError("world_size", f"is {self.world_size}; expected nodes x nproc_per_node = "
                                          f"{self.nodes} x {self.nproc_per_node}")

    def launch_env(self) -> dict[str, str]:
        """The job's environment with its GPUs made visible."""
        env = dict(self.env)
        if self.cuda_visible_devices:
            env["CUDA_VISIBLE_DEVICES"] = self.cuda_visible_devices
        return env


#: The only variables a job's ``env`` may set: those the planner writes (``plan.planner``: GPU numbering, the
#: PCIe transport's NCCL knobs) and the GPU and thread counts a launcher sets. A hand-edited plan that sets
#: anything else (``LD_PRELOAD``, ``PYTHONPATH``, an NCCL plugin) is refused where its specs are read.
PLANNED_ENV = frozenset({"CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", "NCCL_NVLS_ENABLE", "NCCL_P2P_DISABLE",
                         "OMP_NUM_THREADS"})


@dataclass(frozen=True, kw_only=True)
class CollectiveJob(Ranks):
    """One timed collective sweep under torchrun (``python -m shardscope.collectives``)."""

    KIND: ClassVar[str] = "collective"
    op: str
    """The collective (one of :data:`shardscope.contracts.names.OPS`)."""
    transport: str
    """``default`` (NCCL's choice) or ``pcie`` (NVLink switched off through ``env``)."""
    dtype: str
    """Element type of the buffers."""
    sweep: Sweep
    """Message sizes and repetitions."""
    check: bool
    """Verify each op's result once before timing it."""
    timeout_s: float
    """Bound on one collective; a rank that never joins fails the job."""
    wall_s: float
    """Wall-clock bound on the whole job, enforced from outside (the guard)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of("op", self.op, OPS)
        _one_of("transport", self.transport, TRANSPORTS)
        _one_of("dtype", self.dtype, COLLECTIVE_DTYPES)
        for name in ("timeout_s", "wall_s"):
            if not getattr(self, name) > 0:
                raise SpecError(name, f"is {getattr(self, name)}; expected a positive number of seconds")


@dataclass(frozen=True, kw_only=True)
class TrainingJob(Ranks):
    """One training run of a strategy under torchrun (``shardscope train``'s launcher)."""

    KIND: ClassVar[str] = "training"
    strategy: str
    """The data-parallel strategy (one of :data:`shardscope.contracts.names.STRATEGIES`)."""
    model: str
    """Name of the model (the preset, the given ``name``, or ``custom``), as job ids carry it."""
    model_spec: str | dict[str, Any]
    """The model as the config gives it: a preset name or a mapping of dimensions."""
    dtype: str
    """``float32`` or ``bfloat16`` (bf16 compute, fp32 master weights)."""
    micro_batch: int
    """Sequences per rank per step."""
    seq_len: int
    """Tokens per sequence."""
    warmup: int
    """Untimed steps first."""
    steps: int
    """Timed steps."""
    timeout_s: float
    """Bound on one collective (``init_process_group(timeout=...)``): the ranks whose peer stopped or hung fail
    after this long instead of waiting on it (gloo's default is 30 minutes)."""
    wall_s: float
    """Wall-clock bound on the whole job, enforced by its launcher (config ``training.job_timeout_s``)."""
    memory_budget_bytes: int | None = None
    """Peak memory above this makes the outcome ``over_budget``; None for no budget."""
    seed: int = 0
    """Seed of the initial weights (the same under every strategy)."""
    comm_profile: bool = True
    """Profile one extra step and record the share of time in communication."""
    repeats: int = 1
    """Timed windows of ``steps`` steps each (median and 95% interval stored)."""
    reduce_dtype: str = "auto"
    """Gradient-reduction dtype of every strategy: ``auto`` (the training dtype), ``float32`` or ``bfloat16``."""
    buckets: str = "default"
    """``default``: each framework's own bucket sizes; ``equal``: DDP's 25 MiB for DeepSpeed too."""
    transport: str = field(default="default", metadata=OMIT_DEFAULT)
    """``default`` or ``pcie`` (NVLink switched off through ``env``); stored with the result."""
    shard_size: int | None = field(default=None, metadata=OMIT_DEFAULT)
    """``hsdp``: ranks of one shard group; ``zero3_hpz``: ranks of one secondary parameter partition (hpZ's
    ``zero_hpz_partition_size``); consecutive ranks inside one island or node. None: every rank (hsdp), the
    ranks of one node (zero3_hpz). Other strategies: None."""
    grad_accum: int = field(default=1, metadata=OMIT_DEFAULT)
    """Micro-batches per optimizer step (gradient accumulation to one global batch); 1 without accumulation."""
    activation_checkpointing: str = field(default="none", metadata=OMIT_DEFAULT)
    """``none``, or ``full`` (every transformer block recomputed in backward)."""
    optimizer: str = field(default="adamw", metadata=OMIT_DEFAULT)
    """Optimizer-state variant: ``adamw`` (fp32 master and moments) or ``adamw_bf16_states`` (DeepSpeed, bf16)."""
    emulated: dict[str, Any] | None = field(default=None, metadata=OMIT_DEFAULT)
    """On an emulated fabric: ``preset``, ``placement``, ``definition`` (the preset's links), ``prefix``,
    ``subnet``, ``timeout_s``; None on this machine's own fabric."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of("strategy", self.strategy, STRATEGIES)
        _one_of("reduce_dtype", self.reduce_dtype, REDUCE_DTYPES)
        _one_of("buckets", self.buckets, BUCKET_POLICIES)
        _one_of("transport", self.transport, TRANSPORTS)
        _one_of("activation_checkpointing", self.activation_checkpointing, CHECKPOINTING_MODES)
        _one_of("optimizer", self.optimizer, WORKER_OPTIMIZERS)
        if self.shard_size is not None and (self.strategy not in GROUPED_STRATEGIES or self.shard_size < 1
                                            or self.world_size % self.shard_size):
            raise SpecError("shard_size", f"is {self.shard_size}; expected a divisor of world_size {self.world_size} "
                                          f"on an {' or '.join(GROUPED_STRATEGIES)} job, or null")
        if self.emulated is not None and not {"preset", "placement", "definition"} <= set(self.emulated):
            raise SpecError("emulated", f"is {self.emulated!r}; expected preset, placement and definition")
        if self.repeats < 1:
            raise SpecError("repeats", f"is {self.repeats}; expected at least 1")
        _one_of("dtype", self.dtype, TRAINING_DTYPES)
        for name in ("micro_batch", "seq_len", "warmup", "steps", "grad_accum"):
            if getattr(self, name) < 1:
                raise SpecError(name, f"is {getattr(self, name)}; expected at least 1")
        if self.seed < 0:
            raise SpecError("seed", f"is {self.seed}; expected at least 0")
        name, shape = self.resolved_model()
        if self.seq_len > shape.max_seq_len:
            raise SpecError("seq_len", f"is {self.seq_len}; expected at most model {name}'s max_seq_len "
                                       f"{shape.max_seq_len}")
        for name in ("timeout_s", "wall_s"):
            if not getattr(self, name) > 0:
                raise SpecError(name, f"is {getattr(self, name)}; expected a positive number of seconds")
        if self.memory_budget_bytes is not None and self.memory_budget_bytes < 1:
            raise SpecError("memory_budget_bytes", f"is {self.memory_budget_bytes}; expected a positive byte count or null")
        _check_optimizer(self)

    def resolved_model(self) -> tuple[str, ModelConfig]:
        """(name, shape) of ``model_spec``: the preset, the given ``name`` or ``custom``, and its dimensions."""
        try:
            return resolve_model(self.model_spec)
        except ValueError as exc:
            raise SpecError("model_spec", f"is {self.model_spec!r}: {exc}") from None

    @property
    def tokens_per_step(self) -> int:
        """Tokens the whole job trains on per optimizer step (every rank's micro-batches)."""
        return self.micro_batch * self.grad_accum * self.seq_len * self.world_size


def _check_optimizer(job: TrainingJob) -> None:
    """The optimizer-state variant runs under the job's strategy and dtype (DeepSpeed's bf16 states: ZeRO-1/2/3, bf16)."""
    from shardscope.contracts.optimizers import check_optimizer

    try:
        check_optimizer(job.optimizer, job.strategy, job.dtype)
    except ValueError as exc:
        raise SpecError("optimizer", str(exc).replace("--optimizer ", "").replace("--dtype ", "dtype ")) from None


@dataclass(frozen=True, kw_only=True)
class PeerJob(Ranks):
    """nccl-tests' ``all_reduce_perf`` on the same GPUs as our all_reduce jobs (one process, ``-g N``)."""

    KIND: ClassVar[str] = "nccl_tests"
    binary: str
    """Path of ``all_reduce_perf`` found by the planner on this machine."""
    dtype: str
    """Element type of the buffers (our name; ``-d`` gets nccl-tests' own)."""
    sweep: Sweep
    """Message sizes and repetitions, the same as our collective jobs'."""
    check: bool
    """nccl-tests' data check (``-c 1``)."""
    wall_s: float
    """Wall-clock bound on the whole job (the guard)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of("dtype", self.dtype, COLLECTIVE_DTYPES)
        if not self.binary:
            raise SpecError("binary", "is empty; expected the path of all_reduce_perf")


#: Every job kind, by the ``kind`` its JSON form carries.
JOB_KINDS: dict[str, type[Ranks]] = {cls.KIND: cls for cls in (CollectiveJob, TrainingJob, PeerJob)}
JobSpec = Union[CollectiveJob, TrainingJob, PeerJob]


def job_to_dict(job: JobSpec) -> dict[str, Any]:
    """The JSON form of ``job``: its fields, ``kind`` first, tuples as lists."""
    data = dataclasses.asdict(job)
    data["devices"] = list(job.devices)
    for spec_field in dataclasses.fields(job):
        if spec_field.metadata.get("omit_default") and data[spec_field.name] == spec_field.default:
            del data[spec_field.name]
    return {"kind": job.KIND, **data}


def job_from_dict(data: Any) -> JobSpec:
    """The spec of one ``plan.json`` job entry, every field checked.

    Raises :class:`SpecError` naming the field (``kind``, a missing or unknown field, a value
    of the wrong type or out of range); the caller adds the file and the job id.
    """
    if not isinstance(data, dict):
        raise SpecError("kind", f"cannot be read from a {type(data).__name__}; expected a JSON object")
    cls = JOB_KINDS.get(data.get("kind"))  # type: ignore[arg-type]
    if cls is None:
        raise SpecError("kind", f"is {data.get('kind')!r}; expected one of {', '.join(JOB_KINDS)}")
    return typing.cast(JobSpec, _build(cls, {k: v for k, v in data.items() if k != "kind"}, prefix=""))


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    """``cls(**data)`` with every field present (or defaulted), no unknown one, and of its declared type."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise SpecError(prefix + unknown[0], f"is not a field of a {cls.__name__}; expected only {', '.join(fields)}")
    values = {}
    for name, spec_field in fields.items():
        if name not in data:
            if spec_field.default is dataclasses.MISSING and spec_field.default_factory is dataclasses.MISSING:
                raise SpecError(prefix + name, "is missing")
            continue
        values[name] = _coerce(hints[name], data[name], prefix + name)
    return cls(**values)


def _coerce(hint: Any, value: Any, where: str) -> Any:
    """``value`` checked against the annotation ``hint`` (lists become tuples where declared)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise SpecError(where, f"is {value!r}; expected a JSON object")
        return _build(hint, value, prefix=where + ".")
    if origin is Union or type(hint).__name__ == "UnionType":
        if value is None and type(None) in args:
            return None
        for option in (a for a in args if a is not type(None)):
            try:
                return _coerce(option, value, where)
            except SpecError:
                continue
        raise SpecError(where, f"is {value!r}; expected {_describe(hint)}")
    if origin is tuple:
        if not isinstance(value, list) or not all(_is_int(v) for v in value):
            raise SpecError(where, f"is {value!r}; expected a list of integers")
        return tuple(value)
    if origin is dict:
        if not isinstance(value, dict):
            raise SpecError(where, f"is {value!r}; expected a JSON object")
        if args and args[1] is str and not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise SpecError(where, f"is {value!r}; expected string keys and string values")
        return dict(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise SpecError(where, f"is {value!r}; expected true or false")
        return value
    if hint is int:
        if not _is_int(value):
            raise SpecError(where, f"is {value!r}; expected an integer")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(where, f"is {value!r}; expected a number")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise SpecError(where, f"is {value!r}; expected a string")
        return value
    return value  # Any


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _describe(hint: Any) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false", type(None): "null"}
    options = [names.get(a, "a JSON object") for a in typing.get_args(hint)]
    return " or ".join(options)


def _one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise SpecError(name, f"is {value!r}; expected one of {', '.join(allowed)}")
