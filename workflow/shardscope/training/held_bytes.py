"""Per-rank bytes actually held in parameters, gradients and optimizer states.

Counted from the tensors themselves, whatever wraps them: DDP modules, FSDP2 DTensor
shards, DeepSpeed ZeRO flat partitions. Each storage is counted once (views into one flat
buffer count as the buffer), so padding and flattening done by a strategy are included.
Master weights held only by the optimizer (DeepSpeed's fp32 partitions) count as optimizer
state, as in the ZeRO paper's 12 bytes per parameter for Adam in mixed precision.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

# DeepSpeed keeps reduced gradient partitions outside ``param.grad``; these attributes hold them.
_DEEPSPEED_GRAD_ATTRS = ("averaged_gradients", "grad_partitions_flat_buffer", "fp32_groups_gradient_flat_partition")
# DeepSpeed's fp32 master partitions. ZeRO-3 puts its partition into the torch optimizer's
# param_groups only for the duration of ``step()`` (and empties them again), so between steps
# it is found only here; ZeRO-1/2 (``single_partition_of_fp32_groups``) and the bf16 optimizer
# (``fp32_groups_flat_partition``) also keep theirs in param_groups, and storages count once.
_DEEPSPEED_MASTER_ATTRS = ("fp32_partitioned_groups_flat", "single_partition_of_fp32_groups", "fp32_groups_flat_partition")


@dataclass(frozen=True)
class HeldBytes:
    """Bytes one rank holds in each category at the measurement point (after backward)."""

    param_bytes: int
    grad_bytes: int
    optim_bytes: int

    def to_dict(self) -> dict[str, int]:
        """Plain dictionary, as stored in the job's result file."""
        return asdict(self)


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The part of ``t`` this rank holds: the local shard of a DTensor, else ``t`` itself."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor inside nested lists, tuples and dicts."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _tensors(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _tensors(value)


def distinct_storages(tensors: Iterable[torch.Tensor], exclude: set[tuple[int, int]] | None = None
                      ) -> dict[tuple[int, int], torch.UntypedStorage]:
    """The distinct non-empty storages behind ``tensors`` (minus the keys in ``exclude``), by ``(address, bytes)``."""
    seen: dict[tuple[int, int], torch.UntypedStorage] = {}
    for t in tensors:
        storage = local_tensor(t).untyped_storage()
        key = (storage.data_ptr(), storage.nbytes()) if storage.nbytes() > 0 else None
        if key is not None and key not in (exclude or set()):
            seen.setdefault(key, storage)
    return seen


def count_storages(tensors: Iterable[torch.Tensor], exclude: set[tuple[int, int]] | None = None) -> tuple[int, set[tuple[int, int]]]:
    """Total bytes of the distinct storages behind ``tensors`` (minus ``exclude``), and their keys."""
    seen = distinct_storages(tensors, exclude)
    return sum(nbytes for _, nbytes in seen), set(seen)


def model_param_tensors(model: nn.Module) -> Iterator[torch.Tensor]:
    """Parameter tensors a rank holds: ZeRO-3 partitions (and hpZ's secondary partitions) plus any gathered/persistent data."""
    for p in model.parameters():
        for attr in ("ds_tensor", "ds_secondary_tensor"):
            ds_tensor = getattr(p, attr, None)
            if ds_tensor is not None:
                yield ds_tensor
        if p.numel() > 0:
            yield p


def innermost_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer inside wrappers such as DeepSpeed's ZeRO optimizers."""
    seen = 0
    while not isinstance(optimizer, torch.optim.Optimizer) and hasattr(optimizer, "optimizer") and seen < 8:
        optimizer, seen = optimizer.optimizer, seen + 1
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"no torch optimizer inside {type(optimizer).__name__}")
    return optimizer


def measure_held_bytes(model: nn.Module, optimizer: Any) -> HeldBytes:
    """Count parameters, gradients and optimizer state held by this rank, each storage once."""
    return held_bytes_and_storages(model, optimizer)[0]


def held_bytes_and_storages(model: nn.Module, optimizer: Any) -> tuple[HeldBytes, list[torch.UntypedStorage]]:
    """:func:`measure_held_bytes` and the storages it counted (the objects themselves).

    Why the storages: the tensor tracker (:mod:`shardscope.training.memtrack`) must leave the
    training state out of activations and buffers, and tells storages apart by identity, not
    by address (an address is reused as soon as a storage is freed).
    """
    params = distinct_storages(model_param_tensors(model))
    inner = innermost_optimizer(optimizer)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    grads += [p.grad for group in inner.param_groups for p in group["params"] if p.grad is not None]
    for attr in _DEEPSPEED_GRAD_ATTRS:
        grads += list(_tensors(getattr(optimizer, attr, None)))
    grad_storages = distinct_storages(grads, exclude=set(params))
    masters = [p for group in inner.param_groups for p in group["params"]]
    for attr in _DEEPSPEED_MASTER_ATTRS:
        masters += list(_tensors(getattr(optimizer, attr, None)))
    states = list(_tensors(list(inner.state.values())))
    optim_storages = distinct_storages(masters + states, exclude=set(params) | set(grad_storages))
    held = HeldBytes(param_bytes=sum(n for _, n in params), grad_bytes=sum(n for _, n in grad_storages),
                     optim_bytes=sum(n for _, n in optim_storages))
    return held, [*params.values(), *grad_storages.values(), *optim_storages.values()]
