"""The decision map's cells: which strategy to pick for a model size, a GPU memory and a fabric (modeled).

Every cell is :func:`shardscope.costmodel.decision.decide` -- the function ``shardscope advise``
calls, with the same memory criterion (the whole modeled peak per GPU within
:data:`USABLE_FRACTION` of the GPU's memory) and the same tie margin -- for the panel's
published machine (:data:`FABRIC_PRESET`) with its GPU memory set to the row's, ranked by the
cost model's step times. The rule is ``docs/design.md``'s "The decision rule".

The predictions stage computes the cells once (:func:`decision_map_rows`, the predictions
document's ``decision_map`` rows, table ``decision_map_cells``); figure 5, its caption and the
report only query them. Every cell is *modeled*, never a measurement of that model size: the
measured runs of the database are drawn on the map beside it, labelled measured.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import numpy as np

from shardscope.contracts.models import PRESETS, ModelConfig
from shardscope.costmodel.advise import DEFAULT_STRATEGIES, Setup, rank_strategies, setup
from shardscope.costmodel.decision import MODEL_TIE_MARGIN, RULE_CITATION, Decision, decide
from shardscope.costmodel.presets import preset
from shardscope.costmodel.step import DEFAULT_USABLE_FRACTION, StepAssumptions

__all__ = ["MODEL_TIE_MARGIN", "RULE_CITATION", "decision_map_rows", "map_fabrics", "panels"]

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
#: The panels modeled always; a GPU machine's own fabric class is modeled beside them.
PANEL_PRESETS = ("nvswitch", "nvlink_islands", "pcie")
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


def columns() -> list[tuple[str, str | None, ModelConfig]]:
    """The map's columns: (model as advise takes it, preset name or None, shape), sweep and presets by size."""
    cols: list[tuple[str, str | None, ModelConfig]] = [
        (name, name, cfg) for name, cfg in PRESETS.items() if SWEEP_PARAMS[0] <= cfg.param_count() <= SWEEP_PARAMS[-1]]
    cols += [(f"{n:.3g}", None, shape_for_params(n)) for n in SWEEP_PARAMS]
    return sorted(cols, key=lambda c: c[2].param_count())


def map_fabrics(machine_fabric: str | None = None) -> tuple[str, ...]:
    """The panels a predictions document models: :data:`PANEL_PRESETS`, and the machine's own GPU fabric class."""
    own = (machine_fabric,) if machine_fabric in FABRIC_PRESET and machine_fabric not in PANEL_PRESETS else ()
    return (*PANEL_PRESETS, *own)


def panel_setup(fabric: str, gpus: int, memory_gb: float | None = None) -> Setup:
    """The machine a panel is modeled on: its fabric's preset, ``gpus`` GPUs, the row's memory if given."""
    memory = int(memory_gb * 1e9) if memory_gb else None
    return setup(preset(FABRIC_PRESET.get(fabric, "pcie-l40s")), gpus, memory_bytes=memory,
                 source=f"preset:{FABRIC_PRESET.get(fabric, 'pcie-l40s')}")


def cell_decision(where: Setup, cfg: ModelConfig, memory_gb: float, gpus: int = GPUS,
                  predictions: list | None = None) -> Decision:
    """The decision of one cell: :func:`decide` on the cost model's steps of ``cfg`` with the row's memory."""
    preds = predictions if predictions is not None else list(
        rank_strategies(where, cfg.to_dict(), gpus, DEFAULT_STRATEGIES, ASSUMPTIONS).predictions)
    return decide(preds, int(memory_gb * 1e9), USABLE_FRACTION)


def panels(fabrics: Iterable[str] = PANEL_PRESETS) -> list[dict[str, str]]:
    """Each panel's fabric class and title (the fabric's name, the GPU of its preset and the preset)."""
    result = []
    for fabric in fabrics:
        name = FABRIC_PRESET.get(fabric, "pcie-l40s")
        gpu = preset(name)["gpus"][0]["name"]
        result.append({"panel": fabric, "title": f"{PANEL_TITLES.get(fabric, fabric)} ({gpu}, preset {name})"})
    return result


def decision_map_rows(fabrics: Iterable[str] = PANEL_PRESETS, gpus: int = GPUS,
                      memories_gb: tuple[float, ...] = GPU_MEMORY_GB, presets_only: bool = False) -> list[dict[str, Any]]:
    """One row per (panel, GPU memory, model): the modeled decision and the bytes behind it (``decision_map_cells``).

    ``presets_only`` keeps only the preset models' columns. The rows of one panel are computed
    once per process (the same panel is asked for by every predictions document).
    """
    return [dict(row) for fabric in fabrics for row in _panel_rows(fabric, gpus, tuple(memories_gb), presets_only)]


@functools.cache
def _panel_rows(fabric: str, gpus: int, memories_gb: tuple[float, ...], presets_only: bool) -> tuple[dict[str, Any], ...]:
    panel = panels([fabric])[0]
    where = panel_setup(fabric, gpus)
    rows = []
    for model, name, cfg in (c for c in columns() if c[1] is not None or not presets_only):
        preds = list(rank_strategies(where, cfg.to_dict(), gpus, DEFAULT_STRATEGIES, ASSUMPTIONS).predictions)
        # the device's whole use (reserved peak, CUDA context, NCCL buffers): what "fits" compares with the memory
        peaks = {p.strategy: p.memory_total_bytes + p.memory_runtime_bytes for p in preds}
        for memory_gb in memories_gb:
            d = cell_decision(where, cfg, memory_gb, gpus, preds)
            shown = d.recommended or min(peaks, key=peaks.__getitem__)
            rows.append({
                "panel": fabric, "title": panel["title"], "order_source": d.source,
                "ranking": " > ".join(r.strategy for r in d.ranking if r.fits is not False) or "none fits",
                "gpus": gpus, "gpu_memory_gb": float(memory_gb), "model": model, "n_params": cfg.param_count(),
                "preset": name, "strategy": d.recommended or "none", "pick": d.label(),
                "tied": " / ".join(d.tied) or None, "tie_spread": d.spread if d.tied else None,
                "tie_margin": d.tie_margin, "rule": RULE_CITATION,
                "per_gpu_bytes": int(peaks[shown]), "ddp_per_gpu_bytes": int(peaks["ddp"]),
                "usable_fraction": USABLE_FRACTION, "micro_batch": ASSUMPTIONS.micro_batch,
                "seq_len": ASSUMPTIONS.seq_len_for(cfg), "method": "modeled",
            })
    return tuple(rows)
