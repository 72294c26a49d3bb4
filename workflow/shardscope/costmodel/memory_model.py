"""Analytic per-GPU memory of each strategy: the ZeRO paper's model (Rajbhandari et al., 2020).

For Ψ parameters on N GPUs with mixed-precision Adam: 16-bit parameters (2Ψ) and gradients
(2Ψ) plus K·Ψ of optimizer state, K = 12 (fp32 master weights, momentum, variance). DDP
holds all of it on every GPU (16Ψ); ZeRO-1 shards the optimizer state (4Ψ + 12Ψ/N), ZeRO-2
also the gradients (2Ψ + 14Ψ/N), ZeRO-3 and FSDP also the parameters (16Ψ/N). ZeRO-3 with
ZeRO++'s hpZ (``zero3_hpz``) keeps a second 16-bit partition of the parameters over a group of
``p`` GPUs (an NVLink island) beside ZeRO-3's: 16Ψ/N + 2Ψ/p (Wang et al., 2023). Without a
master copy (K = 8) Mistral-7B under DDP needs 2+2+8 bytes x 7.24 B = 87 GB, the seed
article's figure; with it, 116 GB. Activations, buffers and the whole peak are modeled in
:mod:`shardscope.costmodel.memory_peak` on top of these model states.

The bytes per parameter are an explicit, switchable assumption (:class:`BytesPerParam`);
every number here is *modeled*, never measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from shardscope.contracts.models import resolve_model
from shardscope.contracts.names import STRATEGIES
from shardscope.contracts.strategies import SHARDED  # noqa: F401  (read through this module too)


def hpz_secondary_bytes(n_params: int, param_bytes: float, partition: int) -> int:
    """Bytes of hpZ's secondary parameter partition per GPU: the parameters in their training dtype
    (``param_bytes`` each) sharded over the ``partition`` GPUs of one group (DeepSpeed's
    ``zero_hpz_partition_size``), held beside ZeRO-3's primary shard so that backward gathers inside the group.
    A partition of 1 is DeepSpeed's "hpZ off": no secondary copy, 0 bytes."""
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 1:
        raise ValueError(f"hpZ's partition size must be a positive integer, got {partition!r}")
    return 0 if partition == 1 else int(n_params * param_bytes / partition)


@dataclass(frozen=True)
class BytesPerParam:
    """Bytes one parameter costs in each category: the memory model's whole assumption."""

    param_bytes: float
    """Bytes of the parameter the model computes with (2 for bf16, 4 for fp32)."""
    grad_bytes: float
    """Bytes of its gradient."""
    optim_bytes: float
    """Bytes of optimizer state: Adam's two fp32 moments (8), plus a fp32 master copy (4) if kept."""
    description: str = "custom"
    """One line saying what the numbers stand for; printed beside every table."""

    def __post_init__(self) -> None:
        for name in ("param_bytes", "grad_bytes", "optim_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} per parameter must be a number of at least 0, got {value!r}")
        if self.param_bytes + self.grad_bytes + self.optim_bytes <= 0:
            raise ValueError("bytes per parameter must not all be 0")

    @property
    def total_bytes(self) -> float:
        """Bytes per parameter in all three categories together."""
        return self.param_bytes + self.grad_bytes + self.optim_bytes

    def to_dict(self) -> dict[str, Any]:
        """Plain dictionary, as printed by ``shardscope memory --json`` and stored with results."""
        return {"param_bytes": self.param_bytes, "grad_bytes": self.grad_bytes, "optim_bytes": self.optim_bytes,
                "description": self.description}


def bytes_per_param(dtype: str, master_weights: bool = True) -> tuple[int, int, int]:
    """(parameter, gradient, optimizer) bytes per parameter for Adam in ``dtype``."""
    if dtype == "bfloat16":
        return 2, 2, 12 if master_weights else 8
    if dtype == "float32":
        return 4, 4, 8
    raise ValueError(f"unknown dtype {dtype!r}; expected bfloat16 or float32")


def assumptions(dtype: str = "bfloat16", master_weights: bool = True, param_bytes: float | None = None,
                grad_bytes: float | None = None, optim_bytes: float | None = None,
                half: str = "bf16") -> BytesPerParam:
    """The bytes per parameter for ``dtype``, with any of the three overridden by the user.

    The defaults are the ZeRO paper's (bf16: 2 + 2 + 12 with a fp32 master copy, 2 + 2 + 8
    without, the seed article's case; fp32: 4 + 4 + 8, where the parameters are the master).
    ``half``: how the description names the 16-bit format (``fp16`` for a float16 run, sized as bfloat16).
    """
    p, g, o = bytes_per_param(dtype, master_weights)
    if dtype == "bfloat16":
        text = (f"{half} params and grads; fp32 master weights + Adam moments" if master_weights
                else f"{half} params and grads; fp32 Adam moments, no master copy")
    else:
        text = "fp32 params and grads; fp32 Adam moments (the params are the master copy)"
    overrides = {"param_bytes": param_bytes, "grad_bytes": grad_bytes, "optim_bytes": optim_bytes}
    if any(v is not None for v in overrides.values()):
        changed = ", ".join(f"{k.removesuffix('_bytes')} {v:g}" for k, v in overrides.items() if v is not None)
        text = f"{text}; overridden: {changed} B"
    return BytesPerParam(p if param_bytes is None else param_bytes, g if grad_bytes is None else grad_bytes,
                         o if optim_bytes is None else optim_bytes, text)


def predict_memory(n_params: int, strategy: str, gpus: int, dtype: str = "bfloat16", master_weights: bool = True,
                   per_param: BytesPerParam | None = None, hpz_partition: int | None = None) -> dict[str, Any]:
    """Per-GPU bytes of parameters, gradients and optimizer state for one strategy (modeled).

    ``per_param`` replaces the dtype's default bytes per parameter; the row's keys stay the same
    whatever the assumption (the results database stores them as they are). ``zero3_hpz`` adds its
    secondary partition over ``hpz_partition`` GPUs (default: all ``gpus``) to the parameters.
    """
    if strategy not in SHARDED:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"number of GPUs must be at least 1, got {gpus}")
    if isinstance(n_params, bool) or not isinstance(n_params, int) or n_params < 1:
        raise ValueError(f"number of parameters must be at least 1, got {n_params}")
    sizes = bytes_per_param(dtype, master_weights) if per_param is None else (
        per_param.param_bytes, per_param.grad_bytes, per_param.optim_bytes)
    held = [n_params * b / (gpus if sharded else 1) for b, sharded in zip(sizes, SHARDED[strategy])]
    if strategy == "zero3_hpz":
        held[0] += hpz_secondary_bytes(n_params, sizes[0], gpus if hpz_partition is None else hpz_partition)
    elif hpz_partition is not None:
        raise ValueError(f"an hpZ partition is zero3_hpz's alone, not {strategy!r}'s")
    return {
        "strategy": strategy,
        "gpus": gpus,
        "dtype": dtype,
        "n_params": n_params,
        "param_bytes": int(held[0]),
        "grad_bytes": int(held[1]),
        "optim_bytes": int(held[2]),
        "total_bytes": int(sum(held)),
        "method": "modeled",
    }


def memory_table(model: str | dict[str, Any], strategy: str, gpus: int, dtype: str = "bfloat16", master_weights: bool = True,
                 per_param: BytesPerParam | None = None, gpu_memory_gb: float = 80.0,
                 deepspeed_estimates: bool = False, shard_group: int | None = None) -> list[dict[str, Any]]:
    """Predictions for one strategy or ``all``, for a model preset or dimensions, with whether each fits.

    Each row carries its assumptions (``bytes_per_param``), the GPU size it was checked against
    and ``fits`` (model states only: activations and buffers come on top). With
    ``deepspeed_estimates`` the ZeRO-2/3 rows also carry DeepSpeed's own estimator's number.
    The ``hsdp`` row shards over its ``shard_group`` GPUs (all ``gpus`` when None; a divisor of
    them) and replicates across the groups; the ``zero3_hpz`` row keeps its secondary parameter
    partition over the same group; each says so in ``shard_group``.
    """
    from shardscope.costmodel.memory_peak import hsdp_shard_group

    group = hsdp_shard_group(gpus, shard_group)
    if strategy != "all" and strategy not in SHARDED:
        raise ValueError(f"unknown strategy {strategy!r}; expected 'all' or one of {', '.join(STRATEGIES)}")
    if isinstance(gpu_memory_gb, bool) or not isinstance(gpu_memory_gb, (int, float)) or not gpu_memory_gb > 0 \
            or not math.isfinite(gpu_memory_gb):
        raise ValueError(f"GPU memory must be a positive number of GB, got {gpu_memory_gb!r}")
    name, cfg = resolve_model(model)
    per_param = per_param or assumptions(dtype, master_weights)
    capacity = int(gpu_memory_gb * 1e9)
    rows = []
    # hpZ over all ``gpus`` (no smaller group) is degenerate: "all" lists it only with a group of 2 or more that splits them
    listed = [s for s in STRATEGIES if s != "zero3_hpz" or 1 < group < gpus]
    for s in listed if strategy == "all" else (strategy,):
        row = dict(predict_memory(cfg.param_count(), s, group if s == "hsdp" else gpus, dtype, per_param=per_param,
                                  hpz_partition=group if s == "zero3_hpz" else None), model=name, gpus=gpus)
        if s in ("hsdp", "zero3_hpz"):
            row["shard_group"] = group
        row.update(bytes_per_param=per_param.to_dict(), gpu_memory_bytes=capacity, fits=row["total_bytes"] <= capacity)
        if deepspeed_estimates:
            from shardscope.costmodel.deepspeed_estimate import deepspeed_estimate

            row["deepspeed_estimate"] = deepspeed_estimate(s, cfg, gpus)
        rows.append(row)
    return rows
