"""Count the bytes of every collective one training step issues, by wrapping ``torch.distributed``.

Every strategy here reaches the process group through ``torch.distributed``'s Python functions:
DDP through its comm hook (``allreduce_hook`` / ``bf16_compress_hook`` call
``dist.all_reduce``), FSDP2 through ``all_gather_single`` / ``reduce_scatter_single``, and
DeepSpeed through ``deepspeed.comm``'s torch backend (which also keeps its own references to
the all-gather and reduce-scatter functions; those are swapped too). While
:class:`CollectiveCounter` is active, each of those functions is replaced by a wrapper that
records the op, dtype and nccl-tests size of the call and then calls the original; nested
calls (one of these functions calling another) count once. The counter runs during one
untimed step only, so the wrapping never touches a timed step.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from shardscope.contracts.comm_volume import volume_bytes

#: function name -> (op, which argument holds the tensor(s) whose bytes are the nccl-tests size)
WRAPPED = {
    "all_reduce": ("all_reduce", 0),
    "all_reduce_coalesced": ("all_reduce", 0),
    "all_gather_into_tensor": ("all_gather", 0),
    "_all_gather_base": ("all_gather", 0),
    "all_gather_single": ("all_gather", 0),
    "all_gather": ("all_gather", 0),
    "all_gather_coalesced": ("all_gather", 0),
    "reduce_scatter_tensor": ("reduce_scatter", 1),
    "_reduce_scatter_base": ("reduce_scatter", 1),
    "reduce_scatter_single": ("reduce_scatter", 1),
    "reduce_scatter": ("reduce_scatter", 1),
    "broadcast": ("broadcast", 0),
    "reduce": ("reduce", 0),
    "all_to_all_single": ("all_to_all", 1),
}
_ARG_NAMES = {
    "all_reduce": ("tensor", "tensors"), "all_gather": ("output_tensor", "tensor_list", "output_tensor_lists"),
    "reduce_scatter": ("input", "input_list", "input_tensor"), "broadcast": ("tensor",), "reduce": ("tensor",),
    "all_to_all": ("input",),
}


def tensor_bytes(value: Any) -> tuple[int, str | None]:
    """Bytes of a tensor, or of every tensor in a (nested) list, and the first tensor's dtype name."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size(), str(value.dtype).removeprefix("torch.")
    if isinstance(value, (list, tuple)):
        total, dtype = 0, None
        for item in value:
            size, kind = tensor_bytes(item)
            total, dtype = total + size, dtype or kind
        return total, dtype
    return 0, None


class CollectiveCounter:
    """Context manager: while active, every collective through ``torch.distributed`` is tallied per (op, dtype)."""

    def __init__(self) -> None:
        self.tally: dict[tuple[str, str], dict[str, int]] = {}
        self._depth = 0
        self._restore: list[tuple[Any, str, Any]] = []

    def record(self, op: str, size_bytes: int, dtype: str | None) -> None:
        """Add one call of ``op`` moving ``size_bytes`` (nccl-tests size) in ``dtype``."""
        entry = self.tally.setdefault((op, dtype or "unknown"), {"calls": 0, "size_bytes": 0})
        entry["calls"] += 1
        entry["size_bytes"] += size_bytes

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        op, position = WRAPPED[name]

        @functools.wraps(original)
        def counted(*args: Any, **kwargs: Any) -> Any:
            if self._depth == 0:
                value = args[position] if len(args) > position else next(
                    (kwargs[k] for k in _ARG_NAMES[op] if k in kwargs), None)
                size, dtype = tensor_bytes(value)
                self.record(op, size, dtype)
            self._depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                self._depth -= 1

        return counted

    def _swap(self, owner: Any, attr: str, name: str) -> None:
        original = getattr(owner, attr, None)
        if original is None or getattr(original, "_shardscope_counted", False):
            return
        wrapper = self._wrap(name, original)
        wrapper._shardscope_counted = True  # type: ignore[attr-defined]
        self._restore.append((owner, attr, original))
        setattr(owner, attr, wrapper)

    def __enter__(self) -> CollectiveCounter:
        for name in WRAPPED:
            self._swap(dist, name, name)
            self._swap(c10d, name, name)
        backend = getattr(sys.modules.get("deepspeed.comm.comm"), "cdb", None)
        if backend is not None:  # deepspeed.comm's torch backend holds its own references
            for attr, name in (("all_gather_function", "all_gather_into_tensor"),
                               ("reduce_scatter_function", "reduce_scatter_tensor")):
                self._swap(backend, attr, name)
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, attr, original in reversed(self._restore):
            setattr(owner, attr, original)
        self._restore.clear()

    def rows(self) -> list[dict[str, Any]]:
        """One row per (op, dtype): calls, summed nccl-tests size and the ZeRO paper's volume, largest first."""
        out = [{"op": op, "dtype": dtype, "calls": v["calls"], "size_bytes": v["size_bytes"],
                "volume_bytes": volume_bytes(op, v["size_bytes"])} for (op, dtype), v in self.tally.items()]
        return sorted(out, key=lambda r: (-r["volume_bytes"], r["op"], r["dtype"]))


def count_step_collectives(prepared: Any, tokens: torch.Tensor, synchronize: Callable[[], None]) -> list[dict[str, Any]]:
    """Run one full step (forward, backward, optimizer) under :class:`CollectiveCounter`; its rows.

    ``synchronize`` waits for this rank's device before the counter is removed, so an
    asynchronous collective was at least issued (counting happens at issue time).
    """
    dist.barrier()
    with CollectiveCounter() as counter:
        prepared.forward_backward(tokens)
        prepared.step()
        synchronize()
    return counter.rows()
