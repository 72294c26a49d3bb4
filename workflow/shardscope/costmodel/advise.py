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
from dataclasses import dataclass, field
from typing import Any

from shardscope.costmodel.calibrate import Calibration
from shardscope.contracts.groups import gpu_islands, hsdp_shard_size
from shardscope.costmodel.collectives import Job, peak_busbw_gbps, predict_collective
from shardscope.costmodel.decision import Decision, decide
from shardscope.costmodel.machine import Machine, build_machine
from shardscope.topology.model import Link, nvlink_islands
from shardscope.costmodel.placement import (
    GroupComparison,
    Placement,
    best_placement,
    compare_groups,
)
from shardscope.costmodel.step import StepAssumptions, StepPrediction, predict_step
from shardscope.errors import UserError
from shardscope.contracts.models import ModelConfig, resolve_model
from shardscope.costmodel.peak_flops import peak_flops
from shardscope.contracts.names import GROUPED_STRATEGIES, STRATEGIES

#: The strategies the question is about; ``--strategies`` adds ``fsdp_grad_op`` or ``zero0``.
DEFAULT_STRATEGIES = ("ddp", "fsdp", "zero1", "zero2", "zero3")


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
                 calibrations: Mapping[str, Calibration] | None = None
                 ) -> tuple[Callable[[str, int], float], Callable[[str, int], float]]:
    """(inside one island, across the replica groups) timers of a job on ``members`` of each of ``nodes`` nodes,
    cut into groups of ``shard`` consecutive ranks (node-major, ``members`` order in a node).

    The island timer times a job of one group's GPUs (the first ``shard`` members, or whole nodes where a
    group spans several), the replica timer one of a GPU of each group; a group of one rank communicates in no time.
    """
    per_node = len(members)
    if shard <= per_node:
        island = Job(machine, tuple(members[:shard]))
        replicas = Job(machine, tuple(members[::shard]), nodes=nodes)
    else:
        island = Job(machine, tuple(members), nodes=shard // per_node)
        replicas = Job(machine, tuple(members[:1]), nodes=per_node * nodes // shard)
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


def setup(doc: Mapping[str, Any], gpus: int, *, gpu_name: str | None = None, memory_bytes: int | None = None,
          peak_tflops: float | None = None, nic_gbps: float | None = None,
          calibrations: Mapping[str, Calibration] | None = None, source: str = "topology",
          nics: int | None = None) -> Setup:
    """The machine of ``doc`` (a topology.json) with a ``gpus``-GPU job placed on its best GPUs; UserError on bad input."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise UserError(f"--gpus must be a positive integer, got {gpus!r}")
    machine = build_machine(doc, gpu_name=gpu_name, memory_bytes=memory_bytes, nic_gbps=nic_gbps, source=source, nics=nics)
    if machine.fabric == "cpu":
        raise UserError(f"{source}: the topology has no GPUs (fabric cpu); advise predicts GPU jobs — give a GPU topology")
    peak = peak_tflops * 1e12 if peak_tflops else peak_flops(machine.spec.reference_name)
    if not peak:
        raise UserError(f"peak FLOP/s of {machine.spec.family} is not known; name the GPU with --gpu NAME "
                        "or give its dense bf16 peak with --peak-tflops")
    nodes, per_node = _split(gpus, machine, source)
    placement = best_placement(machine, per_node)
    job = Job(machine, placement.members, nodes=nodes)
    return Setup(machine, peak, nodes, per_node, placement, job, CollectiveTimer(job, calibrations), source,
                 island_shard_size(doc, machine, placement.members, nodes))


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
    island, replicas = group_timers(where.machine, members, where.nodes, shard, where.timer.calibrations)
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
                                    assumptions, gpu=where.machine.spec,
                                    **_grouped(where, s, where.placement.members, gpus, shard_sizes))
                       for s in strategies]


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
            "ranking": [p.to_row() for p in self.ranking],
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


def _fit_sentence(ranking: Sequence[StepPrediction], machine: Machine) -> str:
    if machine.memory_bytes is None:
        return "GPU memory is unknown (pass --memory-gib or --gpu), so whether each strategy fits was not checked."
    usable = ranking[0].memory_available_bytes or 0
    misfits = [p for p in ranking if p.fits is False]
    if not misfits:
        low, high = min(p.memory_total_bytes for p in ranking), max(p.memory_total_bytes for p in ranking)
        return (f"All fit: the whole peak (model states, activations and buffers) takes {_gb(low)} to {_gb(high)} per GPU "
                f"of the {_gb(usable)} usable ({_gb(machine.memory_bytes)} GPU).")
    names = ", ".join(f"{p.strategy} ({_gb(p.memory_total_bytes)})" for p in sorted(misfits, key=lambda p: -p.memory_total_bytes))
    if len(misfits) == len(ranking):
        return (f"Nothing fits in the {_gb(usable)} usable per GPU (whole peak): {names}; use more GPUs, activation "
                "checkpointing, a smaller micro-batch or offload.")
    return f"Do not fit in the {_gb(usable)} usable per GPU: {names} (whole peak: model states, activations and buffers)."


def _group_sentence(advice_n: int, comp: GroupComparison | None, machine: Machine, best: str,
                    pinned: float | None, across: float | None, nodes: int, placement: Placement) -> str:
    if nodes > 1:
        return (f"The job spans {nodes} nodes: the network ({machine.network_gbps(machine.gpu_count):.0f} GB/s per node, "
                f"{max(1, min(machine.rail_nics or 1, machine.gpu_count))} NIC(s)) bounds the ring, not the NVLink groups.")
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
           nics: int | None = None, shard_sizes: Mapping[str, int] | None = None) -> Advice:
    """Rank ``strategies`` for ``model`` on ``gpus`` GPUs of the machine in ``doc`` (a topology.json).

    ``strategies`` None: :data:`DEFAULT_STRATEGIES`, plus ``zero3_hpz`` and ``hsdp`` where islands split the
    placed ranks (a note says so). ``shard_sizes``: hpZ's partition / HSDP's shard group per strategy (default:
    the island's ranks). The recommendation is :func:`shardscope.costmodel.decision.decide`'s, the same as the
    decision map's and the report's.
    """
    assumptions = assumptions or StepAssumptions()
    where = setup(doc, gpus, gpu_name=gpu_name, memory_bytes=memory_bytes, peak_tflops=peak_tflops, nic_gbps=nic_gbps,
                  calibrations=calibrations, source=source, nics=nics)
    notes = where.machine.notes
    if strategies is None:
        strategies = DEFAULT_STRATEGIES
        if where.shard_size or shard_sizes:
            strategies += GROUPED_STRATEGIES
            notes += (_grouped_note(where, gpus, shard_sizes),)
    name, cfg, predictions = step_predictions(where, model, gpus, strategies, assumptions, shard_sizes)
    machine, nodes, per_node, placement, job = where.machine, where.nodes, where.per_node, where.placement, where.job
    decision = decide(predictions, machine.memory_bytes, assumptions.usable_fraction)
    by_name = {p.strategy: p for p in predictions}
    ranking = [by_name[r.strategy] for r in decision.ranking]
    comp = compare_groups(machine, per_node) if nodes == 1 else None
    best = by_name[decision.recommended] if decision.recommended else ranking[0]
    pinned = across = None
    if comp is not None and comp.inside and comp.across:
        pinned = _step_on(where, comp.inside, best.strategy, name, cfg, gpus, assumptions, shard_sizes)
        across = _step_on(where, comp.across, best.strategy, name, cfg, gpus, assumptions, shard_sizes)
    busbw = peak_busbw_gbps("all_reduce", job) if gpus > 1 else 0.0
    first = _first_sentence(decision, best, ranking, placement, nodes, busbw)
    sentences = (first, _fit_sentence(ranking, machine),
                 _group_sentence(per_node, comp, machine, best.strategy, pinned, across, nodes, placement))
    return Advice(model=name, gpus=gpus, nodes=nodes, machine=machine, placement=placement, allreduce_busbw_gbps=busbw,
                  ranking=tuple(ranking), comparison=comp, pinned_step_s=pinned, across_step_s=across,
                  explanation=sentences, assumptions=assumptions, decision=decision, notes=notes,
                  shard_size=next((g for s in strategies if (g := _shard_of(where, s, gpus, shard_sizes))), None))


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
                        gpu=machine.spec, **_grouped(where, strategy, placement.members, gpus, shard_sizes)).step_time_s
