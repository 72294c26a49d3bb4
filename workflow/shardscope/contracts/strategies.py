"""What each data-parallel strategy does, in one table: the facts every model and the worker read.

One row per strategy of :data:`shardscope.contracts.names.STRATEGIES`, in its order (:data:`STRATEGY_FACTS`):

* ``framework``: who implements it here (``torch``: DDP and FSDP2; ``deepspeed``: ZeRO);
* ``sharded``: which of (parameters, gradients, optimizer state) the ZeRO paper shards across ranks
  (HSDP over its shard group: its ``gpus`` are the group's ranks);
* ``paper_terms`` / ``implementation_terms``: the collectives of one step as Ψ counts, (gradients
  moved in the reduce dtype, parameters moved in the gather dtype): the ZeRO paper's, and what this
  code's frameworks move (DeepSpeed ZeRO-1/2 all-reduce their gradient buckets, 2Ψ instead of Ψ;
  the provenance is in :mod:`shardscope.contracts.comm_volume`); None where no volume is stated
  (HSDP is counted as FSDP over one shard group);
* ``per_micro_batch``: whether (the gradient term, the parameter term) is moved after every
  micro-batch of an accumulated step, or once per optimizer step;
* ``bf16_optimizer_states``: whether DeepSpeed's bf16 master weights and moments run under it;
* ``offload_holds``: which of (parameters, gradients, optimizer state) its CPU offload keeps on the host.

Beside the table, the framework constants each of them is defined by, once: DDP's bucket, DeepSpeed's
bucket, prefetch and reuse-distance defaults, and the bytes of each dtype. Adding a strategy means one
row here and its wrapper in the worker (:mod:`shardscope.training.strategies`).

Torch-free: every stage may read it.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Bytes per element of each dtype a job trains, reduces or gathers in.
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}
#: torch DDP's default bucket (``bucket_cap_mb=25``), the size the ``equal`` bucket policy gives every framework.
DDP_BUCKET_BYTES = 25 * 2**20
#: The worker's DDP makes its gradients views of the all-reduce buckets (``gradient_as_bucket_view=True``), so it holds
#: them once; what the pipeline predicts for its own jobs says so (torch's default, which the memory model assumes for
#: a run it is only told about, copies them: :data:`shardscope.costmodel.memory_peak.DDP_BUCKET_VIEW_DEFAULT`).
WORKER_DDP_BUCKET_VIEW = True
#: The worker steps every strategy with torch's AdamW at its default (DeepSpeed with ``"torch_adam": true``): the
#: multi-tensor ``foreach`` kernels on a GPU, where a run the model is only told about under DeepSpeed would use
#: DeepSpeed's FusedAdam (:func:`shardscope.costmodel.optimizer_step.adamw_implementation`).
WORKER_ADAMW = "foreach"
#: DeepSpeed's default ``reduce_bucket_size`` and ``allgather_bucket_size`` (elements).
DEEPSPEED_BUCKET_ELEMENTS = 500_000_000
#: DeepSpeed's default ``stage3_prefetch_bucket_size`` (elements).
DEEPSPEED_PREFETCH_ELEMENTS = 50_000_000
#: DeepSpeed's default ``stage3_max_reuse_distance`` (elements): a parameter used again within it stays gathered.
ZERO3_MAX_REUSE_ELEMENTS = 1_000_000_000
#: Volume per byte of size, per collective (the ZeRO paper's convention: an all-reduce moves its buffer twice).
VOLUME_FACTOR = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1, "broadcast": 1, "reduce": 1, "all_to_all": 1}


@dataclass(frozen=True)
class StrategyFacts:
    """One strategy's row: what it shards, what it moves per step, and who implements it."""

    framework: str
    """``torch`` (DDP, FSDP2) or ``deepspeed`` (ZeRO)."""
    sharded: tuple[bool, bool, bool]
    """Whether (parameters, gradients, optimizer state) are sharded across ranks (the ZeRO paper's stages)."""
    paper_terms: tuple[int, int] | None
    """The ZeRO paper's Ψ moved per step: (gradients in the reduce dtype, parameters in the gather dtype)."""
    implementation_terms: tuple[int, int] | None
    """The Ψ this code's framework moves per step (same order); None where no volume is stated."""
    per_micro_batch: tuple[bool, bool]
    """Whether (the gradient term, the parameter term) is moved after every micro-batch of an accumulated step."""
    bf16_optimizer_states: bool = False
    """Whether DeepSpeed's bf16 master weights and moments (``adamw_bf16_states``) run under this strategy."""
    offload_holds: tuple[bool, bool, bool] = (False, False, True)
    """Which of (its sharded parameters, gradients, optimizer state) its CPU offload keeps on the host: ZeRO-Offload
    the optimizer state and, under ZeRO-2/3, the reduced gradient partition (``offload_optimizer``); FSDP's
    ``CPUOffload``/``CPUOffloadPolicy`` all three (its only offload mode)."""


_NONE, _STATES, _GRADS, _ALL = (False, False, False), (False, False, True), (False, True, True), (True, True, True)
_HOST_GRADS, _HOST_ALL = (False, True, True), (True, True, True)

#: The table: every strategy's facts.
STRATEGY_FACTS: dict[str, StrategyFacts] = {
    "ddp": StrategyFacts("torch", _NONE, (2, 0), (2, 0), (False, False)),
    "fsdp": StrategyFacts("torch", _ALL, (1, 2), (1, 2), (True, True), offload_holds=_HOST_ALL),
    "fsdp_grad_op": StrategyFacts("torch", _GRADS, (1, 1), (1, 1), (True, True), offload_holds=_HOST_ALL),
    "zero0": StrategyFacts("deepspeed", _NONE, (2, 0), (2, 0), (False, False)),
    "zero1": StrategyFacts("deepspeed", _STATES, (1, 1), (2, 1), (False, False), bf16_optimizer_states=True),
    "zero2": StrategyFacts("deepspeed", _GRADS, (1, 1), (2, 1), (True, False), bf16_optimizer_states=True,
                           offload_holds=_HOST_GRADS),
    "zero3": StrategyFacts("deepspeed", _ALL, (1, 2), (1, 2), (True, True), bf16_optimizer_states=True,
                           offload_holds=_HOST_GRADS),
    "hsdp": StrategyFacts("torch", _ALL, None, None, (True, True), offload_holds=_HOST_ALL),
    "zero3_hpz": StrategyFacts("deepspeed", _ALL, (1, 2), (1, 2), (True, True), offload_holds=_HOST_GRADS),
}

#: Per strategy: which of (parameters, gradients, optimizer state) are sharded.
SHARDED: dict[str, tuple[bool, bool, bool]] = {s: f.sharded for s, f in STRATEGY_FACTS.items()}
#: Per strategy with a stated volume: the ZeRO paper's (gradient Ψ, parameter Ψ) per step.
PAPER_TERMS: dict[str, tuple[int, int]] = {s: f.paper_terms for s, f in STRATEGY_FACTS.items() if f.paper_terms}
#: Per strategy with a stated volume: what this code's frameworks move (gradient Ψ, parameter Ψ) per step.
IMPLEMENTATION_TERMS: dict[str, tuple[int, int]] = {s: f.implementation_terms for s, f in STRATEGY_FACTS.items()
                                                    if f.implementation_terms}
#: Per strategy: whether (the gradient term, the parameter term) is moved after every micro-batch.
PER_MICRO_BATCH: dict[str, tuple[bool, bool]] = {s: f.per_micro_batch for s, f in STRATEGY_FACTS.items()}
#: Per strategy: which of (parameters, gradients, optimizer state) its CPU offload keeps on the host.
OFFLOAD_HOLDS: dict[str, tuple[bool, bool, bool]] = {s: f.offload_holds for s, f in STRATEGY_FACTS.items()}
#: Strategies DeepSpeed runs with bf16 optimizer states.
BF16_STATE_STRATEGIES = tuple(s for s, f in STRATEGY_FACTS.items() if f.bf16_optimizer_states)


def uses_deepspeed(strategy: str) -> bool:
    """Whether DeepSpeed runs ``strategy`` (False for a name the table does not know)."""
    facts = STRATEGY_FACTS.get(strategy)
    return facts is not None and facts.framework == "deepspeed"


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name (:data:`DTYPE_BYTES`)."""
    return DTYPE_BYTES[dtype]
