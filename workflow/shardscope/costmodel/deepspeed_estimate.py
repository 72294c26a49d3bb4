"""DeepSpeed's own per-GPU memory estimators, shown beside the ZeRO-paper model.

DeepSpeed ships ``estimate_zero2_model_states_mem_needs_all_cold`` and
``estimate_zero3_model_states_mem_needs_all_cold``: they take the parameter count (and, for
ZeRO-3, the largest layer's) without building a model, and *print* a table of offload options.
Their numbers come from ``estimate_zero2_model_states_mem_needs`` and
``estimate_zero3_model_states_mem_needs``, which return them; we call those with the options of
the table's "no offload" row. DeepSpeed has no estimator for ZeRO-0/1, DDP or FSDP.

DeepSpeed's assumption differs from the ZeRO paper's: 2 bytes of 16-bit parameters per GPU plus
18 bytes per parameter sharded over the GPUs (16-bit and fp32 gradients, fp32 master weights,
Adam's two moments), i.e. 2Ψ + 18Ψ/N for ZeRO-2 and 4·largest_layer + 18Ψ/N for ZeRO-3.
"""

from __future__ import annotations

import contextlib
import io
import os
from typing import Any

from shardscope.contracts.models import ModelConfig


def largest_layer_params(cfg: ModelConfig) -> int:
    """Parameters of the largest single module (its own, not its children's), as DeepSpeed counts them.

    The same as ``deepspeed.runtime.zero.stage3.model_to_params`` on the built :class:`GPT`:
    the embedding or output head (vocab x d_model) or one MLP projection (d_model x d_ff).
    """
    kv = cfg.n_kv_heads * cfg.head_dim
    return max(cfg.vocab_size * cfg.d_model, cfg.d_model * cfg.d_ff, cfg.d_model * cfg.q_dim, cfg.d_model * 2 * kv)


def _import_estimators() -> tuple[Any, Any, str]:
    """DeepSpeed's estimator functions and version; its import chatter is kept off stdout."""
    if "DS_ACCELERATOR" not in os.environ:
        import torch

        if not torch.cuda.is_available():
            os.environ["DS_ACCELERATOR"] = "cpu"
    with contextlib.redirect_stdout(io.StringIO()):
        import deepspeed
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
        from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
    return estimate_zero2_model_states_mem_needs, estimate_zero3_model_states_mem_needs, deepspeed.__version__


def deepspeed_estimate(strategy: str, cfg: ModelConfig, gpus: int) -> dict[str, Any] | None:
    """DeepSpeed's estimate of per-GPU model-state bytes for ``zero2``/``zero3`` without offload; else None.

    The result says which function produced it and with which options, so a table can label it.
    None also when DeepSpeed cannot be imported (the field then says why).
    """
    if strategy not in ("zero2", "zero3"):
        return None
    try:
        zero2, zero3, version = _import_estimators()
    except Exception as exc:  # noqa: BLE001 - an optional comparison; say why it is missing
        return {"gpu_bytes": None, "error": f"deepspeed not importable: {type(exc).__name__}: {exc}"}
    total = cfg.param_count()
    if strategy == "zero2":
        _, gpu = zero2(total_params=total, num_gpus_per_node=gpus, num_nodes=1, cpu_offload=False)
        function, options = "estimate_zero2_model_states_mem_needs", "offload_optimizer=none"
    else:
        _, gpu, _ = zero3(total_params=total, largest_layer_params=largest_layer_params(cfg), num_gpus_per_node=gpus,
                          num_nodes=1, cpu_offload=False, cpu_offload_params=False, zero_init=True)
        function, options = "estimate_zero3_model_states_mem_needs", "offload_param=none, offload_optimizer=none, zero_init=1"
    return {"gpu_bytes": int(gpu), "function": function, "options": options, "deepspeed": version, "method": "deepspeed_estimator"}
