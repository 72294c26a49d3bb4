"""Activation checkpointing of the decoder's blocks (``none`` or ``full``), the same for every strategy.

``full`` wraps each :class:`shardscope.training.model.Block`'s forward in torch's non-reentrant
``torch.utils.checkpoint``: forward keeps only each block's input, and backward recomputes the
block's activations just before its gradients are needed. The wrapper is set on the block
itself (its ``forward``), so whatever wraps the block sees an ordinary module: FSDP2's
``fully_shard`` hooks run around it as they would around torch's ``checkpoint_wrapper``
applied before ``fully_shard`` (the block's parameters are gathered before the recompute, by
FSDP's pre-backward hook), DeepSpeed ZeRO-3 fetches the parameters again through its
sub-module hooks while recomputing, and DDP's gradient hooks see the same parameters.

:func:`in_recompute` says whether backward is recomputing a block now: the tensor tracker
(:mod:`shardscope.training.memtrack`) counts what a recompute creates as activations (they
are the block's activations, only made late), not as buffers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

#: The modes the worker runs and the memory model knows (``memory_peak.CHECKPOINTING`` is the same tuple).
MODES = ("none", "full")

_state = threading.local()
#: Called with no arguments each time a block's recompute ends (the tensor tracker listens, see :func:`on_recompute_end`).
_recompute_listeners: list[Callable[[], None]] = []


def on_recompute_end(listener: Callable[[], None]) -> Callable[[], None]:
    """Call ``listener`` whenever a recompute ends, until the returned function is called.

    Why: what a recompute creates is a block's activations, except parameters that a
    framework gathers again for it (ZeRO-3 when it released them after forward); the tracker
    asks which storages back parameters at that moment, while they are still alive.
    """
    _recompute_listeners.append(listener)

    def remove() -> None:
        if listener in _recompute_listeners:
            _recompute_listeners.remove(listener)
    return remove


def in_recompute() -> bool:
    """Whether a checkpointed block is being recomputed in backward on this thread right now."""
    return getattr(_state, "depth", 0) > 0


def _checkpointed(forward: Callable[..., Any]) -> Callable[..., Any]:
    import torch
    from torch.utils.checkpoint import checkpoint

    def run(*args: Any) -> Any:
        # torch calls ``run`` twice: in forward (grad mode on, nothing saved) and in backward's
        # recompute, where autograd runs the graph and grad mode is on again; only the second
        # happens while a backward pass is executing.
        recomputing = torch._C._current_graph_task_id() != -1
        if recomputing:
            _state.depth = getattr(_state, "depth", 0) + 1
        try:
            return forward(*args)
        finally:
            if recomputing:
                for listener in list(_recompute_listeners):
                    listener()
                _state.depth -= 1

    def checkpointed_forward(*args: Any) -> Any:
        return checkpoint(run, *args, use_reentrant=False)

    return checkpointed_forward


def apply_checkpointing(model: Any, mode: str) -> int:
    """Checkpoint every block of the decoder inside ``model`` (``full``), or leave it (``none``); the blocks wrapped.

    ``model`` is the decoder or whatever wraps it (DDP, DeepSpeed's engine, FSDP2 in place).
    Raises ValueError for an unknown mode, naming the allowed ones.
    """
    if mode not in MODES:
        raise ValueError(f"activation checkpointing must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "none":
        return 0
    from shardscope.training.memtrack import decoder_of

    blocks = decoder_of(model).blocks
    for block in blocks:
        if getattr(block, "_shardscope_checkpointed", False):
            continue
        block.forward = _checkpointed(block.forward)
        block._shardscope_checkpointed = True
    return len(blocks)
