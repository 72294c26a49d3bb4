"""One fair configuration across strategies: the policy, and the record each result carries of it.

The policy (issue 17, "fair configurations"):

* Every framework at its own recommended settings: DeepSpeed's per-stage defaults
  (``overlap_comm`` is on for ZeRO-3 and off for stages 0-2, as DeepSpeed's config validator
  sets it when left unset; ZeRO-3 prefetches ``stage3_prefetch_bucket_size`` = 5e7 elements
  ahead), FSDP2's default implicit prefetch, DDP's default 25 MiB buckets.
* Buckets: ``default`` leaves each framework's own sizes (DDP 25 MiB, DeepSpeed 5e8 elements
  for reduce and all-gather); ``equal`` gives DeepSpeed's reduce, all-gather and prefetch
  buckets DDP's 25 MiB (in the dtype each travels in). FSDP2 has no bucket size: it communicates
  per ``fully_shard`` group (one per transformer block, plus the root).
* One mixed-precision policy as far as the frameworks allow: bf16 compute, fp32 master
  weights and fp32 Adam state. torch (DDP, FSDP2) keeps fp32 parameters and computes in bf16
  (autocast, or FSDP2's ``param_dtype``); DeepSpeed keeps bf16 module parameters and an fp32
  master partition in its optimizer.
* One gradient-reduction dtype, selectable: ``auto`` reduces in the training dtype (bf16 in a
  bf16 run, as DeepSpeed does by default), or ``float32`` / ``bfloat16`` everywhere.
* One deliberate deviation from DeepSpeed's defaults: ``stage3_param_persistence_threshold``
  is 0, so ZeRO-3 partitions every parameter as FSDP2 does (DeepSpeed's 1e5 would keep every
  parameter of a small model whole, and ZeRO-3 would measure as ZeRO-2).

Torch-free: planning and storing code may read these names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardscope.contracts.names import BUCKET_POLICIES, REDUCE_DTYPES  # noqa: F401  (re-exported)
from shardscope.contracts.strategies import (  # noqa: F401  (the bucket defaults: read through this module too)
    DDP_BUCKET_BYTES,
    DEEPSPEED_BUCKET_ELEMENTS,
    DEEPSPEED_PREFETCH_ELEMENTS,
    dtype_bytes,
)



@dataclass(frozen=True)
class FairSettings:
    """The comparison's knobs shared by every strategy of a run."""

    reduce_dtype: str = "auto"
    """Gradient-reduction dtype: ``auto`` (the training dtype), ``float32`` or ``bfloat16``."""
    buckets: str = "default"
    """``default`` (each framework's own bucket sizes) or ``equal`` (DDP's 25 MiB for every framework)."""

    def __post_init__(self) -> None:
        if self.reduce_dtype not in REDUCE_DTYPES:
            raise ValueError(f"--reduce-dtype must be one of {', '.join(REDUCE_DTYPES)}, got {self.reduce_dtype!r}")
        if self.buckets not in BUCKET_POLICIES:
            raise ValueError(f"--buckets must be one of {', '.join(BUCKET_POLICIES)}, got {self.buckets!r}")

    def resolved_reduce_dtype(self, dtype: str) -> str:
        """The dtype gradients are reduced in for a run in ``dtype``."""
        return dtype if self.reduce_dtype == "auto" else self.reduce_dtype

    def describe(self, strategy: str, dtype: str, *, param_dtype: str, gather_dtype: str | None, overlap_comm: bool,
                 prefetch: str, reduce_bucket_bytes: int | None, allgather_bucket_bytes: int | None,
                 comm_hook: str | None) -> dict[str, Any]:
        """The ``settings`` block of a result: what ``strategy`` ran with, every field named for the reader."""
        return {
            "strategy": strategy,
            "compute_dtype": dtype,
            "param_dtype": param_dtype,
            "master_dtype": "float32",
            "optimizer_state_dtype": "float32",
            "reduce_dtype": self.resolved_reduce_dtype(dtype),
            "reduce_dtype_requested": self.reduce_dtype,
            "gather_dtype": gather_dtype,
            "overlap_comm": overlap_comm,
            "prefetch": prefetch,
            "bucket_policy": "equal_bytes" if self.buckets == "equal" else "framework_default",
            "reduce_bucket_bytes": reduce_bucket_bytes,
            "allgather_bucket_bytes": allgather_bucket_bytes,
            "comm_hook": comm_hook,
        }


def deepspeed_bucket_elements(fair: FairSettings, reduce_dtype: str, gather_dtype: str) -> dict[str, int]:
    """DeepSpeed's reduce, all-gather and prefetch bucket sizes in elements under ``fair``'s policy.

    ``equal``: 25 MiB each, counted in the dtype each bucket travels in (gradients in
    ``reduce_dtype``, gathered parameters in ``gather_dtype``).
    """
    if fair.buckets == "equal":
        gathered = DDP_BUCKET_BYTES // dtype_bytes(gather_dtype)
        return {"reduce": DDP_BUCKET_BYTES // dtype_bytes(reduce_dtype), "allgather": gathered, "prefetch": gathered}
    return {"reduce": DEEPSPEED_BUCKET_ELEMENTS, "allgather": DEEPSPEED_BUCKET_ELEMENTS, "prefetch": DEEPSPEED_PREFETCH_ELEMENTS}

