"""The decision map: which strategy to pick for a model size, a GPU memory and a fabric.

Every cell is :func:`shardscope.costmodel.decision.decide` -- the function ``shardscope advise``
calls, with the same memory criterion (the whole modeled peak per GPU within
:data:`USABLE_FRACTION` of the GPU's memory) and the same tie margin -- for the panel's
published machine (:data:`PANEL_PRESETS`) with its GPU memory set to the row's. The rule is
``docs/design.md``'s "The decision rule". Speed is the cost model's step time, or the order
measured in the database for that fabric where there is one (tokens/s relative to DDP at the
largest world size). Every cell is *modeled* (memory, and speed unless the panel says measured),
never a measurement of that model size.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from shardscope.contracts.models import PRESETS, ModelConfig
from shardscope.costmodel.advise import DEFAULT_STRATEGIES, Setup, setup, step_predictions
from shardscope.costmodel.decision import MODEL_TIE_MARGIN, RULE_CITATION, Decision, Evidence, MeasuredSpeed, decide
from shardscope.costmodel.presets import preset
from shardscope.costmodel.step import DEFAULT_USABLE_FRACTION, StepAssumptions

__all__ = ["MODEL_TIE_MARGIN", "RULE_CITATION", "decision_map", "measured_orders", "panels"]

GPUS = 8
GPU_MEMORY_GB = (24, 40, 80, 141)
USABLE_FRACTION = DEFAULT_USABLE_FRACTION
#: Step shape of every cell (advise's defaults): one sequence per GPU, the model's length up to 4096.
ASSUMPTIONS = StepAssumptions(usable_fraction=USABLE_FRACTION)
#: Parameter counts swept (log-spaced); presets inside the range are added as their own columns.
SWEEP_PARAMS = np.geomspace(1e8, 2e11, 24)
#: The published machine each fabric class is modeled on (:mod:`shardscope.costmodel.presets`).
FABRIC_PRESET: dict[str, str] = {
    "nvswitch": "hgx-h100", "nvlink_mesh": "hgx-h100",
    "nvlink_islands": "h100-nvl-pairs", "nvlink_partial": "h100-nvl-pairs", "pcie": "pcie-l40s",
}
#: The panels drawn always; other GPU fabrics get a panel when the database measured them.
PANEL_PRESETS = ("nvswitch", "pcie")
PANEL_TITLES = {"nvswitch": "NVSwitch", "pcie": "PCIe", "nvlink_islands": "NVLink islands",
                "nvlink_partial": "partial NVLink", "nvlink_mesh": "NVLink mesh"}


def shape_for_params(n_params: float) -> ModelConfig:
    """A Llama-like decoder of about ``n_params`` parameters for the sweep's columns.

    Hidden size from a depth/width ratio of 1/128 (Llama: 4096 wide, 32 deep), heads of 128,
    SwiGLU MLP of 8/3 the hidden size, vocabulary 32000, sequences up to 4096; layers fill the rest.
    """
    d_model = max(256, int(round((n_params * 128 / 12) ** (1 / 3) / 128)) * 128)
    shape = {"d_model": d_model, "n_heads": d_model // 128, "n_kv_heads": d_model // 128,
             "d_ff": int(round(8 * d_model / 3 / 256)) * 256, "vocab_size": 32000, "max_seq_len": 4096}
    one, two = ModelConfig(n_layers=1, **shape).param_count(), ModelConfig(n_layers=2, **shape).param_count()
    layers = max(1, int(round((n_params - one) / (two - one))) + 1)
    return ModelConfig(n_layers=layers, **shape)


def measured_orders(speed: pd.DataFrame) -> dict[str, Evidence]:
    """Per GPU fabric in ``speed`` (the strategy_speed query): the measured speeds the decision uses there.

    Each fabric's largest world size, the mean tokens/s relative to DDP over hosts and models there
    (with the mean 95% interval where repeats give one); CPU and unknown fabrics are left out (their
    order says nothing about GPUs).
    """
    ok = speed[(speed["outcome"] == "ok") & speed["tokens_per_s_vs_ddp"].notna()
               & ~speed["fabric"].isin(["cpu", "unknown", "single"])]
    orders: dict[str, Evidence] = {}
    for fabric, sub in ok.groupby("fabric"):
        top = sub[sub["world_size"] == sub["world_size"].max()]
        cols = [c for c in ("tokens_per_s_vs_ddp", "ci95_low_vs_ddp", "ci95_high_vs_ddp") if c in top]
        mean = top.groupby("strategy")[cols].mean().sort_values("tokens_per_s_vs_ddp", ascending=False, kind="stable")
        speeds = tuple(MeasuredSpeed(str(s), float(row["tokens_per_s_vs_ddp"]), _num(row.get("ci95_low_vs_ddp")),
                                     _num(row.get("ci95_high_vs_ddp"))) for s, row in mean.iterrows())
        where = f"measured on {', '.join(sorted(top['host'].dropna().unique()))} ({int(top['world_size'].max())} GPUs)"
        orders[str(fabric)] = Evidence(speeds, where)
    return orders


def _num(value: object) -> float | None:
    return None if value is None or pd.isna(value) else float(value)  # type: ignore[arg-type]


def columns() -> list[tuple[str, str | None, ModelConfig]]:
    """The map's columns: (model as advise takes it, preset name or None, shape), sweep and presets by size."""
    cols: list[tuple[str, str | None, ModelConfig]] = [
        (name, name, cfg) for name, cfg in PRESETS.items() if SWEEP_PARAMS[0] <= cfg.param_count() <= SWEEP_PARAMS[-1]]
    cols += [(f"{n:.3g}", None, shape_for_params(n)) for n in SWEEP_PARAMS]
    return sorted(cols, key=lambda c: c[2].param_count())


def panel_setup(fabric: str, gpus: int, memory_gb: float | None = None) -> Setup:
    """The machine a panel is modeled on: its fabric's preset, ``gpus`` GPUs, the row's memory if given."""
    memory = int(memory_gb * 1e9) if memory_gb else None
    return setup(preset(FABRIC_PRESET.get(fabric, "pcie-l40s")), gpus, memory_bytes=memory,
                 source=f"preset:{FABRIC_PRESET.get(fabric, 'pcie-l40s')}")


def cell_decision(where: Setup, cfg: ModelConfig, memory_gb: float, evidence: Evidence | None, gpus: int = GPUS,
                  predictions: list | None = None) -> Decision:
    """The decision of one cell: :func:`decide` on the cost model's steps of ``cfg`` with the row's memory."""
    preds = predictions if predictions is not None else step_predictions(where, cfg.to_dict(), gpus, DEFAULT_STRATEGIES,
                                                                          ASSUMPTIONS)[2]
    return decide(preds, int(memory_gb * 1e9), USABLE_FRACTION, evidence)


def panels(speed: pd.DataFrame) -> list[dict[str, object]]:
    """The map's panels: NVSwitch and PCIe always, plus every other GPU fabric measured; each with its evidence."""
    measured = measured_orders(speed)
    result = []
    for fabric in [*PANEL_PRESETS, *sorted(f for f in measured if f not in PANEL_PRESETS)]:
        name = FABRIC_PRESET.get(fabric, "pcie-l40s")
        gpu = preset(name)["gpus"][0]["name"]
        result.append({"panel": fabric, "title": f"{PANEL_TITLES.get(fabric, fabric)} ({gpu}, preset {name})",
                       "evidence": measured.get(fabric)})
    return result


def decision_map(speed: pd.DataFrame, gpus: int = GPUS, memories_gb: tuple[float, ...] = GPU_MEMORY_GB,
                 presets_only: bool = False) -> pd.DataFrame:
    """One row per (panel, GPU memory, model): the decision and the bytes behind it (only the presets' columns if asked)."""
    rows = []
    cols = [c for c in columns() if c[1] is not None or not presets_only]
    for panel in panels(speed):
        evidence: Evidence | None = panel["evidence"]  # type: ignore[assignment]
        where = panel_setup(str(panel["panel"]), gpus)
        for model, name, cfg in cols:
            preds = step_predictions(where, cfg.to_dict(), gpus, DEFAULT_STRATEGIES, ASSUMPTIONS)[2]
            peaks = {p.strategy: p.memory_total_bytes for p in preds}
            for memory_gb in memories_gb:
                d = cell_decision(where, cfg, memory_gb, evidence, gpus, preds)
                shown = d.recommended or min(peaks, key=peaks.__getitem__)
                rows.append({
                    "panel": panel["panel"], "title": panel["title"], "order_source": d.source,
                    "order": " > ".join(r.strategy for r in d.ranking if r.fits is not False) or "none fits",
                    "gpus": gpus, "gpu_memory_gb": memory_gb, "n_params": cfg.param_count(), "preset": name,
                    "strategy": d.recommended or "none", "pick": d.label(), "tied": " / ".join(d.tied),
                    "tie_spread": d.spread if d.tied else None, "per_gpu_bytes": peaks[shown],
                    "ddp_per_gpu_bytes": peaks["ddp"], "usable_fraction": USABLE_FRACTION,
                    "micro_batch": ASSUMPTIONS.micro_batch, "seq_len": ASSUMPTIONS.seq_len_for(cfg), "method": "modeled",
                })
    return pd.DataFrame(rows)

