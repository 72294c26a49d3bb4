"""Analytic per-GPU memory of each strategy: the ZeRO paper's model (Rajbhandari et al., 2020).

For Ψ parameters on N GPUs with mixed-precision Adam: 16-bit parameters (2Ψ) and gradients
(2Ψ) plus K·Ψ of optimizer state, K = 12 (fp32 master weights, momentum, variance). DDP
holds all of it on every GPU (16Ψ); ZeRO-1 shards the optimizer state (4Ψ + 12Ψ/N), ZeRO-2
also the gradients (2Ψ + 14Ψ/N), ZeRO-3 and FSDP also the parameters (16Ψ/N). Without a
master copy (K = 8) Mistral-7B under DDP needs 2+2+8 bytes x 7.24 B = 87 GB, the seed
article's figure; with it, 116 GB. Activations and buffers are not modelled.
"""

from __future__ import annotations

from typing import Any

from shardscope.training.model import resolve_model
from shardscope.training.strategies import STRATEGIES

#: Which of (parameters, gradients, optimizer state) each strategy shards across ranks.
SHARDED: dict[str, tuple[bool, bool, bool]] = {
    "ddp": (False, False, False),
    "zero0": (False, False, False),
    "zero1": (False, False, True),
    "zero2": (False, True, True),
    "fsdp_grad_op": (False, True, True),
    "zero3": (True, True, True),
    "fsdp": (True, True, True),
}


def bytes_per_param(dtype: str, master_weights: bool = True) -> tuple[int, int, int]:
    """(parameter, gradient, optimizer) bytes per parameter for Adam in ``dtype``."""
    if dtype == "bfloat16":
        return 2, 2, 12 if master_weights else 8
    if dtype == "float32":
        return 4, 4, 8
    raise ValueError(f"unknown dtype {dtype!r}; expected bfloat16 or float32")


def predict_memory(n_params: int, strategy: str, gpus: int, dtype: str = "bfloat16", master_weights: bool = True) -> dict[str, Any]:
    """Per-GPU bytes of parameters, gradients and optimizer state for one strategy."""
    if strategy not in SHARDED:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    if gpus < 1:
        raise ValueError(f"number of GPUs must be at least 1, got {gpus}")
    sizes = bytes_per_param(dtype, master_weights)
    held = [n_params * b / (gpus if sharded else 1) for b, sharded in zip(sizes, SHARDED[strategy])]
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


def memory_table(model: str, strategy: str, gpus: int, dtype: str = "bfloat16") -> list[dict[str, Any]]:
    """Predictions for one strategy or ``all``, for a model preset."""
    name, cfg = resolve_model(model)
    names = STRATEGIES if strategy == "all" else (strategy,)
    return [dict(predict_memory(cfg.param_count(), s, gpus, dtype), model=name) for s in names]
