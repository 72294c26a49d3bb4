"""Bytes a strategy's collectives move per step: the ZeRO paper's volumes, and measured ones beside them.

Sizes follow nccl-tests (an all-reduce's size is its buffer, an all-gather's its gathered
output, a reduce-scatter's its unreduced input). The *volume* is the ZeRO paper's count per
rank: an all-reduce moves twice its size (a reduce-scatter then an all-gather), every other
collective once. With Ψ parameters (ZeRO paper, section 7):

* ``ddp``, ``zero0``: one all-reduce of the gradients: 2Ψ;
* ``zero1``, ``zero2``: reduce-scatter of the gradients, all-gather of the updated parameters: 2Ψ;
* ``zero3``, ``fsdp``: all-gather of the parameters in forward and again in backward,
  reduce-scatter of the gradients: 3Ψ;
* ``fsdp_grad_op``: parameters gathered once (kept from forward to backward): 2Ψ.
* ``zero3_hpz`` (ZeRO++'s hpZ, Wang et al. 2023): ZeRO-3's 3Ψ, but backward's all-gather of the
  parameters runs inside one group of ``p`` ranks (an NVLink island) from the secondary partition,
  so only 2Ψ crosses the groups.

Each Ψ is counted in bytes of the dtype it travels in: gradients in the reduce dtype,
gathered parameters in the compute dtype.

Beside it, the *implementation* volume says what the code here really moves, read from the
frameworks and confirmed by the measured bytes (``tests/training/test_comm_bytes.py``):

* DeepSpeed ZeRO-1/2 (0.19) at its default ``use_multi_rank_bucket_allreduce: true``
  all-reduces every gradient bucket (2Ψ) and keeps its own partition, then all-gathers the
  updated parameters (Ψ): 3Ψ, 1.5x the paper's 2Ψ. Source, DeepSpeed 0.19.8,
  ``deepspeed/runtime/zero/stage_1_and_2.py``: ``average_tensor`` files every gradient slice of
  the bucket under the key ``("allreduce", group)`` when ``self.use_multi_rank_bucket_allreduce``
  is set (``zero_optimization.use_multi_rank_bucket_allreduce``, default ``True`` in
  ``deepspeed/runtime/zero/config.py``), and ``allreduce_and_scatter`` →
  ``allreduce_and_copy_with_multiple_ranks`` → ``allreduce_bucket`` calls ``dist.all_reduce`` on
  the whole flattened bucket (``rank=None``), copying back only this rank's slice; with the flag
  off the slices go to ``allreduce_no_retain(..., rank=dst)``, one ``dist.reduce`` per partition
  owner (Ψ in all, the paper's reduce-scatter). ``step`` then calls ``all_gather_dp_groups`` on the
  16-bit (here fp32) parameter partitions (Ψ). So the extra 0.5x is the gradient all-reduce, not
  the parameter all-gather (which the paper counts too) and not bucket accounting (the counter
  sees each ``dist`` call once, nested calls not again: ``tests/training/test_comm_bytes.py``).
* DeepSpeed ZeRO-3 keeps a gathered parameter whose next use is within
  ``stage3_max_reuse_distance`` (1e9 elements) of parameters fetched: a model of at most
  5e8 parameters is not gathered again in backward (2Ψ); above that it is not modeled
  (between 2Ψ and 3Ψ). The same holds under hpZ: a small model's backward gathers nothing,
  from the secondary partition either.
* Everything else moves the paper's volume (FSDP2 pads each parameter to a multiple of the
  world size, a few bytes more).

The per-strategy terms are rows of :mod:`shardscope.contracts.strategies`.

With gradient accumulation (:mod:`shardscope.training.accumulation`) the volumes are per
optimizer step: a term a strategy moves after every micro-batch counts ``grad_accum`` times
(:data:`PER_MICRO_BATCH`), one it moves once per step counts once (DDP's ``no_sync``, the
parameter all-gather of ZeRO-1/2 after the optimizer step, DeepSpeed's boundary reduction of stages 0 and 1).

Torch-free.
"""

from __future__ import annotations

from typing import Any

from shardscope.contracts.strategies import (
    DTYPE_BYTES as _BYTES,
    IMPLEMENTATION_TERMS,
    PAPER_TERMS,
    PER_MICRO_BATCH,
    VOLUME_FACTOR,
    ZERO3_MAX_REUSE_ELEMENTS,
)


def volume_bytes(op: str, size_bytes: int) -> int:
    """The ZeRO paper's volume of one collective of ``size_bytes`` (nccl-tests size)."""
    return VOLUME_FACTOR.get(op, 1) * size_bytes


def paper_volume(strategy: str, n_params: int, reduce_dtype: str, gather_dtype: str | None) -> dict[str, Any]:
    """The ZeRO paper's bytes moved per rank per step by ``strategy`` for ``n_params`` parameters (modeled)."""
    return _volume(PAPER_TERMS[strategy], n_params, reduce_dtype, gather_dtype)


def implementation_volume(strategy: str, n_params: int, reduce_dtype: str, gather_dtype: str | None) -> dict[str, Any] | None:
    """Bytes this code's ``strategy`` moves per rank per step as its framework implements it (modeled); None if not modeled."""
    terms = IMPLEMENTATION_TERMS[strategy]
    if strategy in ("zero3", "zero3_hpz"):
        if 2 * n_params > ZERO3_MAX_REUSE_ELEMENTS:
            return None
        terms = (1, 1)
    return _volume(terms, n_params, reduce_dtype, gather_dtype)


def _volume(terms: tuple[int, int], n_params: int, reduce_dtype: str, gather_dtype: str | None) -> dict[str, Any]:
    grads, params = terms
    gather_bytes = _BYTES[gather_dtype] if gather_dtype else 0
    term_bytes = [n_params * grads * _BYTES[reduce_dtype], n_params * params * gather_bytes]
    return {"method": "modeled", "psi_factor": grads + params, "volume_bytes": sum(term_bytes), "term_bytes": term_bytes,
            "formula": f"{grads}Ψ×{_BYTES[reduce_dtype]} B (gradients, {reduce_dtype})"
                       + (f" + {params}Ψ×{gather_bytes} B (parameters, {gather_dtype})" if params else "")}


def accumulated(volume: dict[str, Any] | None, strategy: str, grad_accum: int) -> dict[str, Any] | None:
    """``volume`` (one micro-batch per step) for an optimizer step of ``grad_accum`` micro-batches: each term
    :data:`PER_MICRO_BATCH` marks is moved ``grad_accum`` times, the others once."""
    if volume is None or grad_accum == 1:
        return volume
    repeat = PER_MICRO_BATCH[strategy]
    total = sum(term * (grad_accum if again else 1) for term, again in zip(volume["term_bytes"], repeat))
    moved = [name for name, again in zip(("gradients", "parameters"), repeat) if again]
    return dict(volume, volume_bytes=total, grad_accum=grad_accum,
                formula=f"{volume['formula']}; {grad_accum} micro-batches per step: "
                        + (f"{' and '.join(moved)} moved after each" if moved else "moved once per step"))


def comm_block(strategy: str, n_params: int, reduce_dtype: str, gather_dtype: str | None,
               per_op: list[dict[str, Any]] | None, grad_accum: int = 1) -> dict[str, Any]:
    """The result's ``summary.comm_bytes``: measured collectives of one optimizer step beside the paper's volume
    (of ``grad_accum`` micro-batches: :func:`accumulated`)."""
    modeled = accumulated(paper_volume(strategy, n_params, reduce_dtype, gather_dtype), strategy, grad_accum)
    implementation = accumulated(implementation_volume(strategy, n_params, reduce_dtype, gather_dtype), strategy, grad_accum)
    if per_op is None:
        return {"measured": None, "modeled": modeled, "implementation": implementation,
                "measured_over_modeled": None, "measured_over_implementation": None}
    total = sum(int(r["volume_bytes"]) for r in per_op)
    return {"measured": {"method": "measured: every torch.distributed collective of one untimed step, counted on rank 0",
                         "volume_bytes": total, "per_op": per_op},
            "modeled": modeled,
            "implementation": implementation,
            "measured_over_modeled": total / modeled["volume_bytes"] if modeled["volume_bytes"] else None,
            "measured_over_implementation": total / implementation["volume_bytes"] if implementation else None}
