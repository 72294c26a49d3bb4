"""``shardscope advise``: rank the strategies by modeled step time among those that fit, recommend one, and say why.

The recommendation (ties included) is :func:`shardscope.costmodel.decision.decide`'s, the rule of
``docs/design.md`` that the decision map and the report use too.

The job is placed on the best GPUs of the node (:mod:`.placement`); a job larger than one node
spans identical nodes joined by their NICs. Every number is modeled (``method: modeled``).

Where the placed ranks split into islands (equal blocks of consecutive ranks on one NVLink island or,
across nodes, one node: :func:`shardscope.contracts.groups.hsdp_shard_size`, as the planner cuts them),
``zero3_hpz`` and ``hsdp`` are ranked too, with the island's ranks as hpZ's partition and HSDP's shard
group; their collectives inside one island are timed on one island's GPUs and HSDP's all-reduce across
the groups on one GPU of each (:func:`group_timers`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from shardscope.costmodel.answer import PEAK_BASIS, best_micro_batch, job_peak, smallest_holding
from shardscope.costmodel.calibrate import Calibration
from shardscope.contracts.groups import gpu_islands, hsdp_shard_size
from shardscope.costmodel.collectives import Job, peak_busbw_gbps, predict_collective
from shardscope.costmodel.decision import Decision, decide
from shardscope.costmodel.deepspeed_hooks import recount_note
from shardscope.costmodel.machine import Machine, build_machine
from shardscope.topology.model import Link, nvlink_islands
from shardscope.costmodel.placement import (
    GroupComparison,
    Placement,
    best_placement,
    compare_groups,
)
from shardscope.costmodel.step import StepAssumptions, StepPrediction, dtype_peak_flops, predict_step
from shardscope.errors import UserError
from shardscope.contracts.models import ModelConfig, resolve_model
from shardscope.contracts.peak_flops import peak_flops
from shardscope.contracts.names import GROUPED_STRATEGIES, STRATEGIES

#: The strategies the question is about; ``--strategies`` adds ``fsdp_grad_op`` or ``zero0``.
DEFAULT_STRATEGIES = ("ddp", "fsdp", "zero1", "zero2", "zero3")
#: GPU memory assumed when neither the topology, the GPU table nor ``--memory-gib`` gives it: 24 GB, the smallest
#: of the common training GPUs (RTX 3090/4090, A10, L4), so that "fits" errs towards not fitting.
DEFAULT_MEMORY_BYTES = 24 * 10**9
#: Dense 16-bit peak assumed when the GPU is not in the table and ``--peak-tflops`` is not given: the A10's 125
#: TFLOP/s (NVIDIA A10 datasheet), a mid-range data-centre GPU; step times scale with it, the ranking barely.
DEFAULT_PEAK_FLOPS = 125e12


class CollectiveTimer:
    """Times collectives of one job: the model, or a calibration where one exists for the op."""

    def __init__(self, job: Job, calibrations: Mapping[str, Calibration] | None = None) -> None:
        self.job = job
        self.calibrations = dict(calibrations or {})
        self._peak: dict[str, float] = {}
        self._times: dict[tuple[str, int], float] = {}

    def __call__(self, op: str, size_bytes: int) -> float:
        """Seconds for one call of ``op`` on ``size_bytes`` (remembered: a step repeats the same sizes)."""
        key = (op, size_bytes)
        if key not in self._times:
            self._times[key] = self._time(op, size_bytes)
        return self._times[key]

    def _time(self, op: str, size_bytes: int) -> float:
        cal = self.calibrations.get(op)
        if cal is None:
            return predict_collective(op, size_bytes, self.job).time_s
        if op not in self._peak:
            self._peak[op] = predict_collective(op, 1 << 40, self.job).algbw_gbps
        return cal.time_s(size_bytes, self._peak[op])


def _no_communication(op: str, size_bytes: int) -> float:
    """A collective of one rank moves nothing."""
    return 0.0


def _timer(job: Job, calibrations: Mapping[str, Calibration] | None) -> Callable[[str, int], float]:
    return CollectiveTimer(job, calibrations) if job.world_size > 1 else _no_communication


def group_timers(machine: Machine, members: Sequence[int], nodes: int, shard: int,
                 calibrations: Mapping[str, Calibration] | None = None, nvlink: bool = True
                 ) -> tuple[Callable[[str, int], float], Callable[[str, int], float]]:
    """(inside one island, across the replica groups) timers of a job on ``members`` of each of ``nodes`` nodes,
    cut into groups of ``shard`` consecutive ranks (node-major, ``members`` order in a node).

    The island timer times a job of one group's GPUs (the first ``shard`` members, or whole nodes where a
    group spans several), the replica timer one of a GPU of each group; a group of one rank communicates in no time.
    ``nvlink`` False: the PCIe-forced transport.
    """
    per_node = len(members)
    if shard <= per_node:
        island = Job(machine, tuple(members[:shard]), nvlink=nvlink)
        replicas = Job(machine, tuple(members[::shard]), nodes=nodes, nvlink=nvlink)
    else:
        island = Job(machine, tuple(members), nodes=shard // per_node, nvlink=nvlink)
        replicas = Job(machine, tuple(members[:1]), nodes=per_node * nodes // shard, nvlink=nvlink)
    return _timer(island, calibrations), _timer(replicas, calibrations)


def rank_islands(doc: Mapping[str, Any], machine: Machine, members: Sequence[int], nodes: int) -> list[int]:
    """Each rank's island, node-major: the topology's ``islands`` (else the NVLink-connected GPUs) inside a node,
    each node's its own."""
    islands = [list(i) for i in doc.get("islands") or []] or _linked_components(machine)
    in_node, span = gpu_islands(islands, members), len(islands) + len(members)
    return [node * span + i for node in range(nodes) for i in in_node]


def _linked_components(machine: Machine) -> list[list[int]]:
    """GPUs joined by NVLink, directly or through others (one group on an NVSwitch): the topology's own islands."""
    if machine.fabric == "nvswitch":
        return [list(machine.gpus)]
    links = [Link(min(a, b), max(a, b), "NV", nvlinks=1) for (a, b), gbps in machine.nvlink_gbps.items() if gbps > 0 and a != b]
    return nvlink_islands(list(machine.gpus), links)


def island_shard_size(doc: Mapping[str, Any], machine: Machine, members: Sequence[int], nodes: int) -> int | None:
    """Ranks of one island of the placed job (hpZ's partition, HSDP's shard group), or None where the islands
    do not split it (all ranks in one, or no two consecutive ranks sharing one)."""
    groups = rank_islands(doc, machine, members, nodes)
    shard = hsdp_shard_size(groups)
    return shard if 1 < shard < len(groups) else None


@dataclass(frozen=True)
class Setup:
    """The machine a job is modeled on: where it is placed and how its collectives are timed."""

    machine: Machine
    peak_flops: float
    nodes: int
    per_node: int
    placement: Placement
    job: Job
    timer: CollectiveTimer
    source: str
    shard_size: int | None = None
    """Ranks of one island of the placed job (:func:`island_shard_size`); None where islands do not split it."""
    nvlink: bool = True
    """False for the PCIe-forced transport (``--transport pcie``: NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0)."""


def setup(doc: Mapping[str, Any], gpus: int, *, gpu_name: str | None = None, memory_bytes: int | None = None,
          peak_tflops: float | None = None, nic_gbps: float | None = None,
          calibrations: Mapping[str, Calibration] | None = None, source: str = "topology",
          nics: int | None = None, transport: str = "default", assume_unknown: bool = True) -> Setup:
    """The machine of ``doc`` (a topology.json) with a ``gpus``-GPU job placed on its best GPUs; UserError on bad input.

    A GPU whose memory or peak FLOP/s nothing gives (not in the table, unnamed on PCIe) gets
    :data:`DEFAULT_MEMORY_BYTES` and :data:`DEFAULT_PEAK_FLOPS`, each with a note saying so; with ``assume_unknown``
    False an unknown peak is a UserError instead (the pipeline's predictions of this machine price nothing on a guess).
    """
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise UserError(f"--gpus must be a positive integer, got {gpus!r}")
    if transport not in ("default", "pcie"):
        raise UserError(f"--transport must be default or pcie, got {transport!r}")
    machine = build_machine(doc, gpu_name=gpu_name, memory_bytes=memory_bytes, nic_gbps=nic_gbps, source=source, nics=nics)
    if machine.fabric == "cpu":
        raise UserError(f"{source}: the topology has no GPUs (fabric cpu); advise predicts GPU jobs — give a GPU topology")
    peak = peak_tflops * 1e12 if peak_tflops else peak_flops(machine.spec.reference_name)
    if not peak and not assume_unknown:
        raise UserError(f"peak FLOP/s of {machine.spec.family} is not known; name the GPU with --gpu NAME "
                        "or give its dense bf16 peak with --peak-tflops")
    if not peak:
        peak = DEFAULT_PEAK_FLOPS
        machine = replace(machine, notes=(*machine.notes, f"peak FLOP/s of {machine.spec.family} is not known: "
                                          f"{DEFAULT_PEAK_FLOPS / 1e12:g} TFLOP/s dense 16-bit assumed (an A10's); "
                                          "give --peak-tflops for its own"))
    if machine.memory_bytes is None:
        machine = replace(machine, memory_bytes=DEFAULT_MEMORY_BYTES,
                          notes=(*machine.notes, f"memory of {machine.spec.family} is not known: "
                                 f"{DEFAULT_MEMORY_BYTES / 1e9:g} GB assumed; give --memory-gib for its own"))
    nodes, per_node = _split(gpus, machine, source)
    nvlink = transport == "default"
    placement = best_placement(machine, per_node, nvlink)
    job = Job(machine, placement.members, nodes=nodes, nvlink=nvlink)
    return Setup(machine, peak, nodes, per_node, placement, job, CollectiveTimer(job, calibrations), source,
                 island_shard_size(doc, machine, placement.members, nodes), nvlink)


def _shard_of(where: Setup, strategy: str, gpus: int, shard_sizes: Mapping[str, int] | None) -> int | None:
    """``strategy``'s shard group / hpZ partition: the given size, else the placement's island; None for a flat
    strategy or where there is neither. A size that does not divide the GPUs is a :class:`UserError`."""
    shard = (shard_sizes or {}).get(strategy) or where.shard_size
    if strategy not in GROUPED_STRATEGIES or shard is None:
        return None
    if isinstance(shard, bool) or not isinstance(shard, int) or shard < 1 or gpus % shard:
        raise UserError(f"the shard size of {strategy} must be a positive divisor of the {gpus} GPUs, got {shard!r}")
    return shard


def _grouped(where: Setup, strategy: str, members: Sequence[int], gpus: int,
             shard_sizes: Mapping[str, int] | None) -> dict[str, Any]:
    """predict_step's ``shard_group``, ``island_time`` and ``replica_time`` for ``strategy`` on ``members``:
    the given shard size, else the placement's island; nothing for a flat strategy or where there is neither."""
    shard = _shard_of(where, strategy, gpus, shard_sizes)
    if shard is None:
        return {}
    island, replicas = group_timers(where.machine, members, where.nodes, shard, where.timer.calibrations, where.nvlink)
    return {"shard_group": shard, "island_time": island, "replica_time": replicas}


def step_predictions(where: Setup, model: str | dict[str, Any], gpus: int, strategies: Sequence[str] = DEFAULT_STRATEGIES,
                     assumptions: StepAssumptions | None = None, shard_sizes: Mapping[str, int] | None = None
                     ) -> tuple[str, ModelConfig, list[StepPrediction]]:
    """(model name, shape, the cost model's step of each strategy) for ``model`` on ``gpus`` GPUs of ``where``.

    ``hsdp`` and ``zero3_hpz`` take their shard size from ``shard_sizes`` (a plan's jobs), else the placement's
    island, and time their collectives inside one island and across the groups on those GPUs (:func:`group_timers`).
    """
    assumptions = assumptions or StepAssumptions()
    try:
        name, cfg = resolve_model(model)
    except (TypeError, ValueError) as exc:
        raise UserError(str(exc)) from None
    bad = [s for s in strategies if s not in STRATEGIES]
    if bad or not strategies:
        raise UserError(f"unknown strategy {', '.join(bad) or '(none)'}; expected some of {', '.join(STRATEGIES)}")
    return name, cfg, [predict_step(s, name, cfg, gpus, where.peak_flops, where.timer, where.machine.memory_bytes,
                                    assumptions, gpu=where.machine.spec, gpus_per_host=where.per_node,
                                    **_grouped(where, s, where.placement.members, gpus, shard_sizes))
                       for s in strategies]


@dataclass(frozen=True)
class Ranking:
    """The strategies ranked for one question: each one's step at its own micro-batch, and the decision."""

    model: str
    cfg: ModelConfig
    predictions: tuple[StepPrediction, ...]
    """One optimizer step of each strategy (``grad_accum`` micro-batches), in the decision's order."""
    batches: dict[str, tuple[int, int]]
    """Strategy -> (micro-batch, gradient accumulation)."""
    decision: Decision


def rank_strategies(where: Setup, model: str | dict[str, Any], gpus: int,
                    strategies: Sequence[str] = DEFAULT_STRATEGIES, assumptions: StepAssumptions | None = None,
                    shard_sizes: Mapping[str, int] | None = None, global_batch: int | None = None) -> Ranking:
    """The one ranking (advise's, the decision map's): each strategy's modeled step, ordered by
    :func:`~shardscope.costmodel.decision.decide` (fits, then fastest, ties to the least memory).

    Without ``global_batch`` every strategy runs ``assumptions.micro_batch`` accumulated ``assumptions.grad_accum``
    times (the run a user describes; once by default). With it, each
    strategy runs at its own best micro-batch (:func:`~shardscope.costmodel.answer.best_micro_batch`: the largest
    that fits and divides each rank's share), accumulating to ``global_batch`` sequences per optimizer step.
    """
    a = assumptions or StepAssumptions()
    name, cfg, predictions = step_predictions(where, model, gpus, strategies, a, shard_sizes)
    batches = {p.strategy: (a.micro_batch, a.grad_accum) for p in predictions}
    if global_batch is not None:
        if a.grad_accum != 1:
            raise UserError("--global-batch ranks each strategy at its own micro-batch and accumulation; "
                            "--grad-accum describes one run's: give one of them")
        usable = int(where.machine.memory_bytes * a.usable_fraction) if where.machine.memory_bytes else None
        resized = []
        for p in predictions:
            try:
                mb, accum, _ = best_micro_batch(p.strategy, cfg, gpus, a, usable, global_batch,
                                                _shard_of(where, p.strategy, gpus, shard_sizes))
            except ValueError as exc:
                raise UserError(str(exc)) from None
            # one optimizer step of accum micro-batches: the step model issues each strategy's collectives once per
            # step or per micro-batch as its framework does (DDP's no_sync, DeepSpeed's reduction points)
            resized.append(p if (mb, accum) == (a.micro_batch, 1) else step_predictions(
                where, model, gpus, (p.strategy,), replace(a, micro_batch=mb, grad_accum=accum), shard_sizes)[2][0])
            batches[p.strategy] = (mb, accum)
        predictions = resized
    decision = decide(predictions, where.machine.memory_bytes, a.usable_fraction)
    by_name = {p.strategy: p for p in predictions}
    return Ranking(name, cfg, tuple(by_name[r.strategy] for r in decision.ranking), batches, decision)


@dataclass(frozen=True)
class Advice:
    """The ranking, the placement it assumes and the two or three sentences that explain it."""

    model: str
    gpus: int
    nodes: int
    machine: Machine
    placement: Placement
    allreduce_busbw_gbps: float
    ranking: tuple[StepPrediction, ...]
    comparison: GroupComparison | None
    pinned_step_s: float | None
    across_step_s: float | None
    explanation: tuple[str, ...]
    assumptions: StepAssumptions
    decision: Decision
    notes: tuple[str, ...] = field(default_factory=tuple)
    shard_size: int | None = None
    """hpZ's partition and HSDP's shard group where either was ranked with one (the placement's island, or given)."""
    batches: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Strategy -> (micro-batch, gradient accumulation) it is ranked at."""
    global_batch: int | None = None
    no_fit: dict[str, Any] | None = None
    """Where nothing fits: the smallest peak and what would hold it
    (:func:`~shardscope.costmodel.answer.smallest_holding`)."""
    transport: str = "default"

    def entry(self, p: StepPrediction) -> dict[str, Any]:
        """One ``--json`` ranking entry: the documented keys first, then the step model's row."""
        ranked = next(r for r in self.decision.ranking if r.strategy == p.strategy)
        mb, accum = self.batches.get(p.strategy, (self.assumptions.micro_batch, self.assumptions.grad_accum))
        return {"strategy": p.strategy, "fits": p.fits, "peak_bytes": p.memory_total_bytes,
                "device_bytes": p.memory_total_bytes + p.memory_runtime_bytes,
                "allocated_peak_bytes": p.memory_allocated_bytes, "micro_batch": mb,
                "grad_accum": accum, "step_time_s": p.step_time_s,
                "tokens_per_s": p.tokens_per_step / p.step_time_s
                if p.step_time_s > 0 else None, "tied": ranked.tied, **p.to_row()}

    def __post_init__(self) -> None:
        if not self.ranking:
            raise ValueError("an advice ranks at least one strategy")
        if not 2 <= len(self.explanation) <= 3:
            raise ValueError("an advice explains itself in two or three sentences")

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` output: documented keys, every number labelled modeled."""
        comp = self.comparison
        return {
            "method": "modeled",
            "model": self.model,
            "gpus": self.gpus,
            "nodes": self.nodes,
            "fabric": self.machine.fabric,
            "gpu": self.machine.spec.to_dict(),
            "memory_bytes": self.machine.memory_bytes,
            "placement": list(self.placement.members),
            "allreduce_busbw_gbps": self.allreduce_busbw_gbps,
            "bottleneck": self.placement.link,
            "peak_basis": PEAK_BASIS,
            "global_batch": self.global_batch,
            "transport": self.transport,
            "ranking": [self.entry(p) for p in self.ranking],
            "no_fit": self.no_fit,
            "recommended": self.decision.recommended,
            "decision": self.decision.to_dict(),
            "nvl_groups": None if comp is None else {
                "inside": None if comp.inside is None else {"gpus": list(comp.inside.members), "ring_gbps": comp.inside.ring_gbps,
                                                             "step_time_s": self.pinned_step_s},
                "across": None if comp.across is None else {"gpus": list(comp.across.members), "ring_gbps": comp.across.ring_gbps,
                                                             "step_time_s": self.across_step_s},
                "largest_group": comp.largest_group},
            "explanation": " ".join(self.explanation),
            "assumptions": self.assumptions.to_dict(),
            "shard_size": self.shard_size,
            "notes": list(self.notes),
        }


def _gb(value: float) -> str:
    return f"{value / 1e9:.0f} GB"


def _fit_sentence(ranking: Sequence[StepPrediction], machine: Machine, no_fit: Mapping[str, Any] | None = None) -> str:
    if machine.memory_bytes is None:
        return "GPU memory is unknown (pass --memory-gib or --gpu), so whether each strategy fits was not checked."
    usable = ranking[0].memory_available_bytes or 0
    misfits = [p for p in ranking if p.fits is False]
    if not misfits:
        low, high = min(p.memory_total_bytes for p in ranking), max(p.memory_total_bytes for p in ranking)
        span = _gb(low) if _gb(low) == _gb(high) else f"{_gb(low)} to {_gb(high)}"
        return (f"All fit: the whole peak (model states, activations and buffers) takes {span} per GPU "
                f"of the {_gb(usable)} usable ({_gb(machine.memory_bytes)} GPU).")
    names = ", ".join(f"{p.strategy} ({_gb(p.memory_total_bytes)})" for p in sorted(misfits, key=lambda p: -p.memory_total_bytes))
    if len(misfits) == len(ranking):
        return f"Nothing fits in the {_gb(usable)} usable per GPU (whole peak): {names}; {_holding_clause(no_fit)}."
    return f"Do not fit in the {_gb(usable)} usable per GPU: {names} (whole peak: model states, activations and buffers)."


def _holding_clause(no_fit: Mapping[str, Any] | None) -> str:
    """What would hold a model nothing fits: the smallest peak, the GPUs it needs, offload or checkpointing."""
    if not no_fit:
        return "use more GPUs, activation checkpointing, a smaller micro-batch or offload"
    ways = []
    if no_fit["gpus_needed"]:
        ways.append(f"{no_fit['gpus_needed']} GPUs ({no_fit['strategy_needed']})")
    elif no_fit.get("gpus_needed_with_checkpointing"):
        ways.append(f"{no_fit['gpus_needed_with_checkpointing']} GPUs ({no_fit['strategy_needed_with_checkpointing']}) "
                    "with full activation checkpointing (no GPU count up to 4096 holds it without: sharding divides "
                    "the model states, not the activations)")
    if no_fit["fits_with_offload"]:
        ways.append(f"{no_fit['fits_with_offload']} with the optimizer offloaded to the CPU")
    if no_fit["fits_with_checkpointing"]:
        ways.append(f"{no_fit['fits_with_checkpointing']} with full activation checkpointing")
    smallest = (f"the smallest peak is {no_fit['strategy']}'s at micro-batch {no_fit['micro_batch']} "
                f"({_gb(no_fit['smallest_peak_bytes'])})")
    return smallest + (", which would need " + " or ".join(ways) if ways else ", which no GPU count up to 4096 holds")


def _group_sentence(advice_n: int, comp: GroupComparison | None, machine: Machine, best: str,
                    pinned: float | None, across: float | None, nodes: int, placement: Placement,
                    nvlink: bool = True) -> str:
    if nodes > 1:
        return (f"The job spans {nodes} nodes: the network ({machine.network_gbps(machine.gpu_count):.0f} GB/s per node, "
                f"{max(1, min(machine.rail_nics or 1, machine.gpu_count))} NIC(s)) bounds the ring, not the NVLink groups.")
    if advice_n >= 2 and not nvlink:
        return (f"NVLink unused (--transport pcie: NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0): the best placement "
                f"({placement.label()}) reaches {placement.ring_gbps:.0f} GB/s over PCIe.")
    if comp is None or advice_n < 2:
        return "One GPU: no communication, placement does not matter."
    if comp.inside and comp.across and pinned and across:
        ratio = across / pinned
        verdict = f"makes {best} {ratio:.2f}x faster" if ratio >= 1.05 else f"changes {best} by under 5%"
        return (f"Pinning the {advice_n} GPUs inside one NVL group ({comp.inside.label()}, {comp.inside.ring_gbps:.0f} GB/s) "
                f"instead of across groups ({comp.across.label()}, {comp.across.ring_gbps:.0f} GB/s) {verdict} "
                f"({pinned:.3g} s vs {across:.3g} s per step).")
    if comp.inside:
        return f"All {advice_n} GPUs talk over NVLink ({machine.fabric}): placement does not change the prediction."
    if comp.largest_group < 2:
        return (f"No GPUs share NVLink ({machine.fabric}): the best placement ({placement.label()}) reaches "
                f"{placement.ring_gbps:.0f} GB/s over PCIe.")
    return (f"No NVL group holds {advice_n} GPUs (the largest has {comp.largest_group}), so the job crosses groups: "
            f"the best placement ({placement.label()}) reaches {placement.ring_gbps:.0f} GB/s over {placement.link}.")


def advise(doc: Mapping[str, Any], model: str | dict[str, Any], gpus: int, *, gpu_name: str | None = None,
           memory_bytes: int | None = None, peak_tflops: float | None = None, nic_gbps: float | None = None,
           strategies: Sequence[str] | None = None, assumptions: StepAssumptions | None = None,
           calibrations: Mapping[str, Calibration] | None = None, source: str = "topology",
           nics: int | None = None, shard_sizes: Mapping[str, int] | None = None, global_batch: int | None = None,
           transport: str = "default", assume_unknown: bool = True) -> Advice:
    """Rank ``strategies`` for ``model`` on ``gpus`` GPUs of the machine in ``doc`` (a topology.json).

    ``strategies`` None: :data:`DEFAULT_STRATEGIES`, plus ``zero3_hpz`` and ``hsdp`` where islands split the
    placed ranks (a note says so). ``shard_sizes``: hpZ's partition / HSDP's shard group per strategy (default:
    the island's ranks). The ranking is :func:`rank_strategies`'s and the recommendation
    :func:`shardscope.costmodel.decision.decide`'s, the same as the decision map's and the report's. ``global_batch``:
    each strategy at its own best micro-batch, accumulating to it. ``transport`` ``pcie``: NVLink unused.
    A model that no strategy holds is still an answer: ``no_fit`` says the smallest peak and what would hold it.
    """
    assumptions = assumptions or StepAssumptions()
    where = setup(doc, gpus, gpu_name=gpu_name, memory_bytes=memory_bytes, peak_tflops=peak_tflops, nic_gbps=nic_gbps,
                  calibrations=calibrations, source=source, nics=nics, transport=transport,
                  assume_unknown=assume_unknown)
    notes = where.machine.notes
    if assumptions.dtype == "float32":
        fp32 = dtype_peak_flops(where.peak_flops, "float32", where.machine.spec)
        notes += (f"float32: matmuls priced at the fp32 CUDA-core peak, {fp32 / 1e12:g} TFLOP/s, not the 16-bit "
                  f"tensor {where.peak_flops / 1e12:g} (PyTorch leaves TF32 matmuls off by default)",)
    if strategies is None:
        strategies = DEFAULT_STRATEGIES
        if where.shard_size or shard_sizes:
            strategies += GROUPED_STRATEGIES
            notes += (_grouped_note(where, gpus, shard_sizes),)
    ranked = rank_strategies(where, model, gpus, strategies, assumptions, shard_sizes, global_batch)
    name, cfg, decision, ranking = ranked.model, ranked.cfg, ranked.decision, list(ranked.predictions)
    machine, nodes, per_node, placement, job = where.machine, where.nodes, where.per_node, where.placement, where.job
    by_name = {p.strategy: p for p in ranking}
    comp = compare_groups(machine, per_node) if nodes == 1 and where.nvlink else None
    best = by_name[decision.recommended] if decision.recommended else ranking[0]
    pinned = across = None
    if comp is not None and comp.inside and comp.across:
        mb, accum = ranked.batches[best.strategy]
        at_best = replace(assumptions, micro_batch=mb)
        pinned = accum * _step_on(where, comp.inside, best.strategy, name, cfg, gpus, at_best, shard_sizes)
        across = accum * _step_on(where, comp.across, best.strategy, name, cfg, gpus, at_best, shard_sizes)
    no_fit = None
    if decision.recommended is None and decision.usable_bytes is not None:
        no_fit = smallest_holding([p.strategy for p in ranking], cfg, gpus, replace(assumptions, micro_batch=1),
                                  decision.usable_bytes, {p.strategy: g for p in ranking
                                                          if (g := _shard_of(where, p.strategy, gpus, shard_sizes))})
    recount = recount_note(assumptions.deepspeed_version, [p.strategy for p in ranking], cfg,
                           assumptions.trainable_fraction)
    notes += (recount,) if recount else ()
    notes += model_notes(cfg, model)
    busbw = peak_busbw_gbps("all_reduce", job) if gpus > 1 else 0.0
    first = _first_sentence(decision, best, ranking, placement, nodes, busbw)
    sentences = (first, _fit_sentence(ranking, machine, no_fit),
                 _group_sentence(per_node, comp, machine, best.strategy, pinned, across, nodes, placement,
                                 where.nvlink))
    return Advice(model=name, gpus=gpus, nodes=nodes, machine=machine, placement=placement, allreduce_busbw_gbps=busbw,
                  ranking=tuple(ranking), comparison=comp, pinned_step_s=pinned, across_step_s=across,
                  explanation=sentences, assumptions=assumptions, decision=decision, notes=notes,
                  shard_size=next((g for s in strategies if (g := _shard_of(where, s, gpus, shard_sizes))), None),
                  batches=ranked.batches, global_batch=global_batch, no_fit=no_fit, transport=transport)


def model_notes(cfg: ModelConfig, spec: Any = None) -> tuple[str, ...]:
    """What the model's description leaves out, said beside the answer: an encoder-decoder's cross-attentions are in
    its weights and FLOPs only, its encoder taken as long as its decoder; a vision-language model (``spec`` read
    through its ``text_config``) is its language model alone; a mixture of experts is held whole and routed evenly."""
    from shardscope.contracts.hf_config import reads_text_config

    notes: tuple[str, ...] = ()
    if cfg.cross_attention_layers:
        notes += (f"encoder-decoder: the {cfg.cross_attention_layers} decoder layers' cross-attentions are counted in "
                  "the weights and FLOPs, not in the activations, and the encoder is taken as long as the decoder "
                  "(--seq-len)",)
    if spec is not None and reads_text_config(spec):
        notes += ("vision-language model: its language model (text_config) is modeled; the vision tower's weights, "
                  "FLOPs and activations are not",)
    if cfg.experts:
        notes += (f"mixture of experts: all {cfg.experts} experts' weights are held, sharded and reduced as a dense "
                  f"model's (no expert parallelism); each token's activations and FLOPs are its "
                  f"{cfg.experts_per_token} routed experts' and their dispatch's (as Hugging Face's Mixtral code "
                  "routes, traced per block); tokens spread evenly over the experts (no load imbalance or capacity "
                  "factor); the time of the dispatch's copies, the host time of an eager per-expert loop and the "
                  "framework hooks of every expert's module are not modeled",)
    return notes


def _grouped_note(where: Setup, gpus: int, shard_sizes: Mapping[str, int] | None) -> str:
    """Why ``hsdp`` and ``zero3_hpz`` are ranked by default, and with which shard sizes."""
    given = dict(shard_sizes or {})
    sizes = ", ".join(f"{s} {given.get(s) or where.shard_size}" for s in GROUPED_STRATEGIES)
    why = (f"the {gpus} ranks split into {gpus // where.shard_size} islands of {where.shard_size}" if where.shard_size
           else "a shard size was given")
    return f"{' and '.join(GROUPED_STRATEGIES)} ranked too: {why} (shard group / hpZ partition in ranks: {sizes})"


def _first_sentence(decision: Decision, best: StepPrediction, ranking: Sequence[StepPrediction], placement: Placement,
                    nodes: int, busbw: float) -> str:
    """What is recommended and why: fastest, or tied with the fastest and holding the least memory, or nothing fits."""
    share = best.exposed_comm_time_s / best.step_time_s if best.step_time_s > 0 else 0.0
    if decision.recommended is None:
        head = f"{best.strategy} is predicted fastest (but does not fit)"
    elif decision.tied:
        head = (f"{best.strategy} is recommended: {', '.join(decision.tied)} are tied within {decision.spread:.1%} "
                f"(inside the model's {decision.tie_margin:.0%} margin) and {best.strategy} holds the least memory of them")
    else:
        head = f"{best.strategy} is predicted fastest"
    text = (f"{head}: {best.step_time_s:.3g} s per step, of which communication takes {best.comm_time_s:.3g} s "
            f"({share:.0%} of the step left exposed after overlap) on {placement.label()}"
            f"{f' x {nodes} nodes' if nodes > 1 else ''} ({busbw:.0f} GB/s all-reduce bus bandwidth)")
    others = [p for p in ranking if p.strategy != best.strategy]
    if others and not decision.tied:
        nxt = others[0]
        text += f"; next is {nxt.strategy} at {nxt.step_time_s:.3g} s"
    return text + "."


def _split(gpus: int, machine: Machine, source: str) -> tuple[int, int]:
    """(nodes, GPUs per node) for a job of ``gpus``: one node when it fits, else whole identical nodes."""
    if gpus <= machine.gpu_count:
        return 1, gpus
    if gpus % machine.gpu_count:
        raise UserError(f"--gpus {gpus} is more than the {machine.gpu_count} GPUs of {source} and not a multiple of it; "
                        "a multi-node job uses whole identical nodes")
    return gpus // machine.gpu_count, machine.gpu_count


def _step_on(where: Setup, placement: Placement, strategy: str, name: str, cfg: ModelConfig, gpus: int,
             assumptions: StepAssumptions, shard_sizes: Mapping[str, int] | None) -> float:
    """The modeled step of ``strategy`` with the job placed on ``placement`` instead (its islands cut the same way)."""
    machine = where.machine
    timer = CollectiveTimer(Job(machine, placement.members), where.timer.calibrations)
    return predict_step(strategy, name, cfg, gpus, where.peak_flops, timer, machine.memory_bytes, assumptions,
                        gpu=machine.spec, gpus_per_host=where.per_node,
                        **_grouped(where, strategy, placement.members, gpus, shard_sizes)).step_time_s
