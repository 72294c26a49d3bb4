"""The one decision: which strategy to recommend, given what fits and what is fastest.

``shardscope advise``, the decision map (figure 5), its caption and the report's table all call
:func:`decide`, so they cannot disagree. The rule is stated in ``docs/design.md`` ("The decision
rule", :data:`RULE_CITATION`):

1. *Fits*: the whole modeled peak per GPU (:func:`shardscope.costmodel.step.whole_peak_bytes`,
   which is :func:`shardscope.costmodel.answer.job_peak`, the one whole-peak function: model states, activations and
   buffers) is at most ``usable_fraction`` of the GPU's memory.
2. *Fastest*: among the strategies that fit, the measured speed where the database has runs on
   that fabric (:class:`Evidence`), else the cost model's step time.
3. *Tie*: strategies within the margin of the fastest (the model's :data:`MODEL_TIE_MARGIN`, or
   the measurement's noise: overlapping 95% intervals, :data:`MEASURED_TIE_MARGIN` without
   repeats) are tied; of tied strategies the one with the smallest whole peak is recommended
   (equally fast, more headroom).
4. Nothing fits: no recommendation.

Torch-free: it only reads step predictions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shardscope.costmodel.step import DEFAULT_USABLE_FRACTION, StepPrediction

RULE_CITATION = "docs/design.md, 'The decision rule'"
#: Modeled step times closer than this (relative to the fastest) are a tie. A chosen constant, not a
#: measured error: the step model's MFU and overlap are assumptions, and moving either by a tenth
#: moves a step time by more than this.
MODEL_TIE_MARGIN = 0.05
#: Measured speeds without a 95% interval (one repeat) closer than this are a tie (an assumed noise).
MEASURED_TIE_MARGIN = 0.05


@dataclass(frozen=True)
class MeasuredSpeed:
    """One strategy's measured tokens/s relative to DDP on a fabric, with its 95% interval if repeated."""

    strategy: str
    speed_vs_ddp: float
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Evidence:
    """Measured speeds on the fabric the decision is for, and where they were measured."""

    speeds: tuple[MeasuredSpeed, ...]
    where: str
    """e.g. ``measured on hostA (8 GPUs)``."""

    def of(self, strategy: str) -> MeasuredSpeed | None:
        """The measured speed of ``strategy``, or None."""
        return next((m for m in self.speeds if m.strategy == strategy), None)


@dataclass(frozen=True)
class Ranked:
    """One strategy in a decision: its modeled step and peak, whether it fits and how far from the fastest."""

    strategy: str
    step_time_s: float
    peak_bytes: int
    fits: bool | None
    margin: float
    """Relative gap to the fastest fitting strategy (0 for it); modeled step times or measured speeds."""
    tied: bool
    basis: str
    """``modeled`` or ``measured``."""


@dataclass(frozen=True)
class Decision:
    """The recommendation, the ranking behind it, the ties and the memory criterion used."""

    recommended: str | None
    """None when nothing fits."""
    ranking: tuple[Ranked, ...]
    tied: tuple[str, ...]
    """Fitting strategies within the tie margin of the fastest (fastest first); empty if no tie."""
    tie_margin: float
    spread: float
    """Largest relative gap among the tied strategies."""
    source: str
    """``cost model`` or where the evidence was measured."""
    memory_bytes: int | None
    usable_fraction: float

    @property
    def usable_bytes(self) -> int | None:
        """GPU memory the whole peak may use."""
        return None if self.memory_bytes is None else int(self.memory_bytes * self.usable_fraction)

    @property
    def fastest(self) -> str | None:
        """The fastest strategy that fits (it may differ from the recommended one when they tie)."""
        return next((r.strategy for r in self.ranking if r.fits is not False), None)

    def label(self) -> str:
        """The recommendation in a few words: ``fsdp (tie with zero2, zero3 within 0.2%)``, or ``none``."""
        if self.recommended is None:
            return "none"
        others = [s for s in self.tied if s != self.recommended]
        return f"{self.recommended} (tie with {', '.join(others)} within {self.spread:.1%})" if others else self.recommended

    def tie_sentence(self) -> str | None:
        """One line naming the tied strategies, their margin and which is recommended; None if no tie."""
        if len(self.tied) < 2:
            return None
        rec = next(r for r in self.ranking if r.strategy == self.recommended)
        what = "the model's" if self.source == "cost model" else "the measurement's"
        return (f"tie: {', '.join(self.tied)} are within {self.spread:.1%} of each other, inside {what} "
                f"{self.tie_margin:.0%} margin; {self.recommended} is recommended as it holds the least memory of them "
                f"({rec.peak_bytes / 1e9:.1f} GB)")

    def to_dict(self) -> dict[str, Any]:
        """Plain dictionary (``advise --json``'s ``decision``)."""
        return {"recommended": self.recommended, "tied": list(self.tied), "tie_margin": self.tie_margin,
                "spread": self.spread, "source": self.source, "rule": RULE_CITATION,
                "memory_bytes": self.memory_bytes, "usable_fraction": self.usable_fraction,
                "usable_bytes": self.usable_bytes,
                "ranking": [{"strategy": r.strategy, "step_time_s": r.step_time_s, "peak_bytes": r.peak_bytes,
                             "fits": r.fits, "margin": r.margin, "tied": r.tied, "basis": r.basis} for r in self.ranking]}


def _fits(peak: int, usable: int | None) -> bool | None:
    return None if usable is None else peak <= usable


def _device_bytes(p: StepPrediction) -> int:
    """What "fits" compares with the usable memory: the reserved peak and what is held outside the allocator
    (:meth:`shardscope.costmodel.memory_peak.PeakTerms.fits`)."""
    return p.memory_total_bytes + getattr(p, "memory_runtime_bytes", 0)


def _measured_ties(best: MeasuredSpeed, other: MeasuredSpeed) -> bool:
    if None not in (best.low, best.high, other.low, other.high):
        return other.high >= best.low  # type: ignore[operator]
    return other.speed_vs_ddp >= best.speed_vs_ddp * (1 - MEASURED_TIE_MARGIN)


def decide(predictions: Sequence[StepPrediction], memory_bytes: int | None,
           usable_fraction: float = DEFAULT_USABLE_FRACTION, evidence: Evidence | None = None,
           tie_margin: float = MODEL_TIE_MARGIN) -> Decision:
    """The recommended strategy for one (model, machine, GPU count, step shape) by the rule of the module docstring.

    ``predictions`` are the cost model's steps of each candidate strategy (their whole peaks are the
    memory criterion; their own ``fits`` is ignored and recomputed from ``memory_bytes`` and
    ``usable_fraction`` so that every caller uses the same one). ``evidence`` orders the measured
    strategies first by measured speed; unmeasured ones follow by modeled step time.
    """
    if not predictions:
        raise ValueError("a decision needs at least one strategy")
    if not 0 < usable_fraction <= 1:
        raise ValueError(f"usable memory fraction must be in (0, 1], got {usable_fraction!r}")
    usable = None if memory_bytes is None else int(memory_bytes * usable_fraction)
    measured = {p.strategy: evidence.of(p.strategy) for p in predictions} if evidence else {}
    measured = {s: m for s, m in measured.items() if m is not None}

    def key(p: StepPrediction) -> tuple[Any, ...]:
        m = measured.get(p.strategy)
        return (_fits(_device_bytes(p), usable) is False, m is None, -m.speed_vs_ddp if m else p.step_time_s,
                p.memory_total_bytes)

    ordered = sorted(predictions, key=key)
    fitting = [p for p in ordered if _fits(_device_bytes(p), usable) is not False]
    best = fitting[0] if fitting else None
    best_m = measured.get(best.strategy) if best else None

    def margin_tied(p: StepPrediction) -> tuple[float, bool]:
        if best is None:
            return 0.0, False
        m = measured.get(p.strategy)
        if best_m is not None:
            if m is None:
                return float("nan"), False
            gap = 1 - m.speed_vs_ddp / best_m.speed_vs_ddp if best_m.speed_vs_ddp else 0.0
            return gap, _measured_ties(best_m, m)
        gap = p.step_time_s / best.step_time_s - 1 if best.step_time_s > 0 else 0.0
        return gap, gap <= tie_margin

    ranking = []
    for p in ordered:
        fits = _fits(_device_bytes(p), usable)
        gap, tied = margin_tied(p)
        ranking.append(Ranked(p.strategy, p.step_time_s, p.memory_total_bytes, fits, gap,
                              tied and fits is not False, "measured" if p.strategy in measured else "modeled"))
    tied = tuple(r.strategy for r in ranking if r.tied)
    tied = tied if len(tied) > 1 else ()
    spread = max((r.margin for r in ranking if r.strategy in tied), default=0.0)
    if best is None:
        recommended = None
    elif tied:
        recommended = min((r for r in ranking if r.strategy in tied), key=lambda r: r.peak_bytes).strategy
    else:
        recommended = best.strategy
    return Decision(recommended=recommended, ranking=tuple(ranking), tied=tied,
                    tie_margin=MEASURED_TIE_MARGIN if best_m is not None else tie_margin, spread=spread,
                    source=evidence.where if best_m is not None and evidence else "cost model",
                    memory_bytes=memory_bytes, usable_fraction=usable_fraction)

