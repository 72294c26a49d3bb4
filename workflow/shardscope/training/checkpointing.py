"""Activation checkpointing of the decoder's blocks, the same for every strategy: ``none``, ``full``, and torchtitan's two
selective modes, ``selective_op`` and ``selective_layer``.

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

The selective modes are torchtitan's (``activation_checkpoint.mode = "selective"``; read in its
``torchtitan/parallelisms/parallelize_llama.py`` at commit 0413364, the commit of its published 64 x A100 numbers), rewritten
here: ``selective_layer`` checkpoints every second block (its ``selective_ac_option``
"2", the second, fourth, ...) and runs the others plainly; ``selective_op`` wraps every block in a checkpoint whose
policy (``torch.utils.checkpoint.create_selective_checkpoint_contexts``) keeps the attention kernel's outputs and the
output of every other matmul of the block (the first, third, ...; the count restarts in each block and again in its
recompute), and recomputes the rest. It counts the projections' ``mm``; eager attention's batched matmuls are neither
counted nor kept, so the memory model refuses ``selective_op`` beside eager attention rather than guess.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from shardscope.contracts.names import CHECKPOINTING_MODES, SELECTIVE_LAYER_EVERY

#: The modes the worker runs and the memory model knows (``memory_peak.CHECKPOINTING`` is the same tuple).
MODES = CHECKPOINTING_MODES

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


def _selective_op_context() -> Any:
    """The forward and recompute contexts of one ``selective_op`` checkpoint: save the attention kernel's outputs and
    the odd-numbered matmuls' (counted apart in forward and in recompute, so both make the same choice)."""
    from collections import defaultdict

    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    matmuls = {aten.mm.default, aten.addmm.default}
    attention = {getattr(aten, name).default for name in SAVED_ATTENTION_OPS if hasattr(aten, name)}
    counts: dict[bool, int] = defaultdict(int)

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        if func in matmuls:
            counts[ctx.is_recompute] += 1
            if counts[ctx.is_recompute] % 2 == 1:
                return CheckpointPolicy.MUST_SAVE
        elif func in attention:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


#: The fused attention kernels whose outputs (the output and its log-sum-exp) ``selective_op`` keeps, as torchtitan's
#: save list does, with the CPU kernel beside the GPU ones.
SAVED_ATTENTION_OPS = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                       "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu")


def _checkpointed(forward: Callable[..., Any], selective_op: bool = False) -> Callable[..., Any]:
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
                # the listeners only read storages; outside the dispatch modes, so that what they call is neither
                # tracked nor seen by a selective checkpoint, whose recompute must run the ops its forward ran
                from torch.utils._python_dispatch import _disable_current_modes

                with _disable_current_modes():
                    for listener in list(_recompute_listeners):
                        listener()
                _state.depth -= 1

    def checkpointed_forward(*args: Any) -> Any:
        if selective_op:
            return checkpoint(run, *args, use_reentrant=False, context_fn=_selective_op_context)
        return checkpoint(run, *args, use_reentrant=False)

    return checkpointed_forward


def apply_checkpointing(model: Any, mode: str) -> int:
    """Checkpoint the decoder's blocks inside ``model`` as ``mode`` says (module docstring); the number of blocks wrapped.

    ``model`` is the decoder or whatever wraps it (DDP, DeepSpeed's engine, FSDP2 in place).
    Raises ValueError for an unknown mode, naming the allowed ones.
    """
    if mode not in MODES:
        raise ValueError(f"activation checkpointing must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "none":
        return 0
    from shardscope.training.memtrack import decoder_of

    blocks = list(decoder_of(model).blocks)
    if mode == "selective_layer":
        blocks = [block for i, block in enumerate(blocks) if (i + 1) % SELECTIVE_LAYER_EVERY == 0]
    for block in blocks:
        if getattr(block, "_shardscope_checkpointed", False):
            continue
        block.forward = _checkpointed(block.forward, selective_op=mode == "selective_op")
        block._shardscope_checkpointed = True
    return len(blocks)
