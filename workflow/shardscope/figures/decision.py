"""The decision map: which strategy to pick for a model size, a GPU memory and a fabric.

Memory comes from the analytic model (:mod:`shardscope.training.memory_model`, bf16 Adam with
fp32 master weights, activations excluded) on 8 GPUs; a strategy *fits* when its modeled
per-GPU bytes are at most the GPU's memory. Among the strategies that fit, the pick is the
first in the fabric's speed order: the order measured in the database for that fabric where
there is one (strategies by tokens/s relative to DDP), else the DESIGN.md rule -- on NVSwitch
DDP, then FSDP/ZeRO-3 when DDP does not fit; on PCIe or across NVLink islands DDP, then
ZeRO-1, ZeRO-2, ZeRO-3. Every cell is *modeled* (memory) and a *rule or a measured order*
(speed), never a measurement of that model size.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from shardscope.training.memory_model import predict_memory
from shardscope.contracts.models import PRESETS

GPUS = 8
GPU_MEMORY_GB = (24, 40, 80, 141)
DTYPE = "bfloat16"
#: Parameter counts swept (log-spaced); presets inside the range are added as their own columns.
SWEEP_PARAMS = np.geomspace(1e8, 2e11, 72)
#: DESIGN.md's speed order per fabric rule.
RULE_ORDER: dict[str, list[str]] = {
    "nvswitch": ["ddp", "fsdp"],
    "pcie": ["ddp", "zero1", "zero2", "zero3"],
}
#: Topology fabric class -> the rule that applies to it.
FABRIC_RULE: dict[str, str] = {
    "nvswitch": "nvswitch", "nvlink_mesh": "nvswitch",
    "pcie": "pcie", "nvlink_islands": "pcie", "nvlink_partial": "pcie",
}
PANEL_TITLES = {"nvswitch": "NVSwitch", "pcie": "PCIe or across NVLink islands"}


def measured_orders(speed: pd.DataFrame) -> dict[str, tuple[list[str], str]]:
    """Per GPU fabric in ``speed`` (the strategy_speed query): strategies fastest first, and where measured.

    Uses each fabric's largest world size and the mean tokens/s relative to DDP over hosts
    and models there; CPU and unknown fabrics are left out (their order says nothing about GPUs).
    """
    ok = speed[(speed["outcome"] == "ok") & speed["tokens_per_s_vs_ddp"].notna()
               & ~speed["fabric"].isin(["cpu", "unknown", "single"])]
    orders: dict[str, tuple[list[str], str]] = {}
    for fabric, sub in ok.groupby("fabric"):
        top = sub[sub["world_size"] == sub["world_size"].max()]
        mean = top.groupby("strategy")["tokens_per_s_vs_ddp"].mean().sort_values(ascending=False, kind="stable")
        where = f"measured on {', '.join(sorted(top['host'].dropna().unique()))} ({int(top['world_size'].max())} GPUs)"
        orders[str(fabric)] = (list(mean.index), where)
    return orders


def _param_grid() -> tuple[np.ndarray, dict[float, str]]:
    presets = {float(cfg.param_count()): name for name, cfg in PRESETS.items()
               if SWEEP_PARAMS[0] <= cfg.param_count() <= SWEEP_PARAMS[-1]}
    return np.unique(np.concatenate([SWEEP_PARAMS, list(presets)])), presets


def per_gpu_bytes(n_params: float, strategy: str, gpus: int = GPUS) -> int:
    """Modeled per-GPU bytes of ``strategy`` for ``n_params`` parameters (bf16 Adam, master weights)."""
    return predict_memory(int(n_params), strategy, gpus, DTYPE)["total_bytes"]


def pick(n_params: float, memory_bytes: float, order: list[str]) -> str:
    """The first strategy of ``order`` whose modeled bytes fit ``memory_bytes``, or 'none'."""
    for strategy in order:
        if per_gpu_bytes(n_params, strategy) <= memory_bytes:
            return strategy
    return "none"


def panels(speed: pd.DataFrame) -> list[dict[str, object]]:
    """The map's panels: NVSwitch and PCIe always, plus every other GPU fabric measured; each with its order."""
    measured = measured_orders(speed)
    result = []
    for fabric in [*RULE_ORDER, *sorted(f for f in measured if f not in RULE_ORDER)]:
        rule = FABRIC_RULE.get(fabric, "pcie")
        if fabric in measured:
            order, where = measured[fabric]
            order = [*order, *[s for s in RULE_ORDER[rule] if s not in order]]
            source = where
        else:
            order, source = RULE_ORDER[rule], "DESIGN.md rule"
        result.append({"panel": fabric, "title": PANEL_TITLES.get(fabric, fabric), "order": order, "order_source": source})
    return result


def decision_map(speed: pd.DataFrame) -> pd.DataFrame:
    """One row per (panel, GPU memory, parameter count): the pick and the bytes behind it."""
    params, presets = _param_grid()
    rows = []
    for panel in panels(speed):
        order = list(panel["order"])  # type: ignore[arg-type]
        for memory_gb in GPU_MEMORY_GB:
            for n in params:
                choice = pick(n, memory_gb * 1e9, order)
                rows.append({
                    "panel": panel["panel"], "title": panel["title"], "order_source": panel["order_source"],
                    "order": " > ".join(order), "gpus": GPUS, "gpu_memory_gb": memory_gb, "n_params": int(n),
                    "preset": presets.get(float(n)), "strategy": choice,
                    "per_gpu_bytes": per_gpu_bytes(n, choice if choice != "none" else order[-1]),
                    "ddp_per_gpu_bytes": per_gpu_bytes(n, "ddp"), "method": "modeled",
                })
    return pd.DataFrame(rows)


def largest_fitting_params(strategy: str, memory_gb: float, gpus: int = GPUS) -> float:
    """The largest parameter count whose modeled per-GPU bytes under ``strategy`` fit ``memory_gb``."""
    bytes_per_param = per_gpu_bytes(1e12, strategy, gpus) / 1e12
    return memory_gb * 1e9 / bytes_per_param
