"""A training run's measured per-rank bytes beside the analytic models (:func:`modeled_for_document`).

The worker measures only; this module, where the models live, puts both models beside what it measured.

Two models, both labelled *modeled*, with their assumptions written out:

``zero_paper``
    :func:`shardscope.costmodel.memory_model.predict_memory` for the run's dtype: the ZeRO
    paper's bytes per parameter (bf16: 2 + 2 + 12, fp32: 4 + 4 + 8) and which part each strategy
    shards. It is the reference the seed article reasons with, and it is *not* what the
    implementations hold (see below); the ratios say by how much.
``implementation``
    Bytes per parameter as this code runs each strategy, read from the implementations and
    confirmed by the 2-rank proof test (``tests/training/test_strategy_proof.py``):

    * DDP (and FSDP's parameters) keep fp32 weights even in a bf16 run: bf16 is autocast
      (DDP) or FSDP's ``MixedPrecisionPolicy`` (bf16 copies only while a layer is gathered),
      so parameters 4, gradients 4, Adam moments 8 bytes per parameter.
    * DeepSpeed ZeRO-1/2/3 keep a fp32 master partition of 4/N bytes per parameter in the
      optimizer *even in fp32 runs* (a clone; the module's fp32 parameters are not reused),
      so their optimizer state is 12/N, not 8/N. (ZeRO-3 hands its partition to the torch
      optimizer only inside ``step()``; :mod:`shardscope.training.held_bytes` finds it.)
    * DeepSpeed ZeRO-1 in this version (0.19) partitions the gradients too: stage 1 and 2
      share one optimizer (``stage_1_and_2.py``) that reduce-scatters gradients into
      partitions, so ZeRO-1 holds gradients of 1/N like ZeRO-2.
    * DeepSpeed in bf16 keeps bf16 parameters and gradients (2 bytes each) plus the fp32
      master in the optimizer: ZeRO-0 is exactly the paper's 2 + 2 + 12 unsharded.
    * DeepSpeed ZeRO-3 with hpZ (``zero3_hpz``) holds ZeRO-3's bytes plus its secondary
      partition: the parameters in the training dtype over the ``p`` ranks of one group
      (``ds_secondary_tensor``, 4/p fp32, 2/p bf16 bytes per parameter).
    * FSDP2 without resharding after forward (``fsdp_grad_op``) still reshards after backward,
      so after backward (where bytes are counted) its parameters are 1/N, as under ``fsdp``;
      the full parameters exist only between forward and backward (they show in peak memory).

Activations, communication buffers and allocator caching are in neither model.
"""

from __future__ import annotations

from typing import Any

from shardscope.costmodel.memory_model import SHARDED, assumptions, hpz_secondary_bytes, predict_memory

#: (param, grad, optim) bytes per parameter and whether each is sharded, per (strategy, dtype),
#: as the strategies in :mod:`shardscope.training.strategies` hold them after backward.
_FP32 = {
    "ddp": ((4, False), (4, False), (8, False)),
    "zero0": ((4, False), (4, False), (8, False)),
    "zero1": ((4, False), (4, True), (12, True)),
    "zero2": ((4, False), (4, True), (12, True)),
    "zero3": ((4, True), (4, True), (12, True)),
    "zero3_hpz": ((4, True), (4, True), (12, True)),  # ZeRO-3's, and the secondary partition (implementation_memory)
    "fsdp": ((4, True), (4, True), (8, True)),
    "fsdp_grad_op": ((4, True), (4, True), (8, True)),
    "hsdp": ((4, True), (4, True), (8, True)),  # FSDP2 inside one shard group (sharded over the group's ranks)
}
_BF16 = {
    "ddp": ((4, False), (4, False), (8, False)),
    "zero0": ((2, False), (2, False), (12, False)),
    "zero1": ((2, False), (2, True), (12, True)),
    "zero2": ((2, False), (2, True), (12, True)),
    "zero3": ((2, True), (2, True), (12, True)),
    "zero3_hpz": ((2, True), (2, True), (12, True)),  # ZeRO-3's, and the secondary partition (implementation_memory)
    "fsdp": ((4, True), (4, True), (8, True)),
    "fsdp_grad_op": ((4, True), (4, True), (8, True)),
    "hsdp": ((4, True), (4, True), (8, True)),  # FSDP2 inside one shard group (sharded over the group's ranks)
}
IMPLEMENTATION: dict[str, dict[str, tuple[tuple[int, bool], ...]]] = {"float32": _FP32, "bfloat16": _BF16}

_KEYS = ("param_bytes", "grad_bytes", "optim_bytes")


def implementation_memory(n_params: int, strategy: str, world_size: int, dtype: str,
                          hpz_partition: int | None = None) -> dict[str, Any]:
    """Per-rank bytes this code's ``strategy`` is expected to hold after backward (modeled); ``zero3_hpz``
    with its secondary parameter partition over ``hpz_partition`` ranks (default: all of them)."""
    if dtype not in IMPLEMENTATION or strategy not in IMPLEMENTATION[dtype]:
        raise ValueError(f"no implementation model for strategy {strategy!r} in {dtype!r}")
    parts = IMPLEMENTATION[dtype][strategy]
    held = {key: int(n_params * b / (world_size if sharded else 1)) for key, (b, sharded) in zip(_KEYS, parts)}
    if strategy == "zero3_hpz":
        held["param_bytes"] += hpz_secondary_bytes(n_params, parts[0][0], hpz_partition or world_size)
    return {**held, "total_bytes": sum(held.values()),
            "bytes_per_param": {key: b for key, (b, _) in zip(_KEYS, parts)},
            "sharded": {key: sharded for key, (_, sharded) in zip(_KEYS, parts)}}


def _ratios(measured: dict[str, int], modeled: dict[str, Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key in (*_KEYS, "total_bytes"):
        out[key] = measured[key] / modeled[key] if modeled[key] else None
    return out


def measured_max(ranks: list[dict[str, Any]]) -> dict[str, int]:
    """The largest rank's bytes in each category, and their sum (the rank that decides what fits)."""
    held = {key: max(int(r[key]) for r in ranks) for key in _KEYS}
    return {**held, "total_bytes": sum(held.values())}


def modeled_block(strategy: str, n_params: int, world_size: int, dtype: str, ranks: list[dict[str, Any]],
                  hpz_partition: int | None = None) -> dict[str, Any]:
    """Both models for this run, and measured / modeled per category (largest rank), all labelled
    (``hpz_partition``: a ``zero3_hpz`` run's secondary partition size).

    Why both: the ZeRO paper's model is the one users reason with; the implementation model
    says what the code really keeps, so a ratio far from 1 against it is a finding (or a bug).
    """
    measured = measured_max(ranks)
    paper_assumption = assumptions(dtype)
    paper = predict_memory(n_params, strategy, world_size, dtype, per_param=paper_assumption, hpz_partition=hpz_partition)
    paper_block = {key: paper[key] for key in (*_KEYS, "total_bytes")}
    paper_block.update(bytes_per_param=paper_assumption.to_dict(),
                       sharded=dict(zip(_KEYS, SHARDED[strategy])), measured_over_modeled=_ratios(measured, paper))
    implementation = implementation_memory(n_params, strategy, world_size, dtype, hpz_partition)
    implementation["measured_over_modeled"] = _ratios(measured, implementation)
    return {"method": "modeled", "measured_max_rank": measured, "zero_paper": paper_block, "implementation": implementation}


def modeled_for_document(doc: dict[str, Any]) -> dict[str, Any]:
    """:func:`modeled_block` for a training result document (what its worker measured, beside both models).

    The worker writes measured bytes only; this is the comparison the block used to carry, computed
    where the models live. HSDP is modeled as FSDP over one shard group (the cross-group all-reduce
    of each shard's gradients is not in the model states), ``zero3_hpz`` with its run's secondary partition.
    """
    job, settings = doc["job"], doc.get("settings") or {}
    hsdp = job["strategy"] == "hsdp"
    strategy, ranks = ("fsdp", job["shard_size"]) if hsdp else (job["strategy"], job["world_size"])
    block = modeled_block(strategy, job["param_count"], ranks, job["dtype"], doc["ranks"],
                          hpz_partition=settings.get("hpz_partition_size"))
    if hsdp:
        block["modeled_as"] = (f"fsdp over one shard group of {job['shard_size']} ranks (the cross-group "
                               "all-reduce of each shard's gradients is not in the volumes)")
    return block
