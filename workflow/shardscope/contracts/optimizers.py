"""Which optimizer-state variants the worker runs, and how (torch-free: the launcher checks jobs with it).

``adamw``
    torch's AdamW everywhere (DeepSpeed with ``torch_adam``): fp32 moments; DeepSpeed ZeRO keeps
    a fp32 master partition beside them.
``adamw_bf16_states``
    DeepSpeed ZeRO-1/2/3 in bf16 with ``bf16_master_weights_and_grads`` and
    ``bf16_optimizer_states``: the master partition and both moments in bf16, 6 bytes per
    parameter (sharded) instead of 12. DeepSpeed refuses it at stage 0 and without bf16.

Not run here, and said so by :func:`check_optimizer`: bf16 moments under DDP/FSDP (torch's
AdamW keeps its moments in the parameters' dtype, fp32 here), 8-bit Adam (bitsandbytes and
torchao are not dependencies of this project), and DeepSpeed's CPU offload of the optimizer:
on the CPU accelerator the "offloaded" state sits in the same host memory as everything else,
so a CPU run cannot show what offload saves on a GPU. The memory model takes all of them as
assumptions (:class:`shardscope.costmodel.memory_peak.OptimizerAssumption`).
"""

from __future__ import annotations

from typing import Any

from shardscope.contracts.names import WORKER_OPTIMIZERS
from shardscope.contracts.strategies import BF16_STATE_STRATEGIES as _BF16_STATE_STRATEGIES



def check_optimizer(optimizer: str, strategy: str, dtype: str) -> None:
    """Raise ValueError (one sentence naming ``--optimizer``) unless the worker runs ``optimizer`` for this strategy and dtype."""
    if optimizer not in WORKER_OPTIMIZERS:
        raise ValueError(f"--optimizer must be one of {', '.join(WORKER_OPTIMIZERS)}, got {optimizer!r}")
    if optimizer == "adamw_bf16_states" and (strategy not in _BF16_STATE_STRATEGIES or dtype != "bfloat16"):
        raise ValueError(f"--optimizer adamw_bf16_states runs only under {', '.join(_BF16_STATE_STRATEGIES)} with --dtype "
                         f"bfloat16 (DeepSpeed's bf16 optimizer states), not {strategy} in {dtype}")


def deepspeed_bf16_settings(optimizer: str) -> dict[str, Any]:
    """The keys the DeepSpeed config's ``bf16`` section gains for ``optimizer`` (none for ``adamw``)."""
    if optimizer == "adamw_bf16_states":
        return {"bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}
    return {}
