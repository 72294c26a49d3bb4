"""Count the memory traffic and the kernels of one training micro-batch of this project's decoder, op by op.

A GPU runs a transformer's matmuls near its FLOP peak, but every other op of an eager step (norms, rotary, the
activation and its product, residual adds, dtype casts, the loss, and each of their backward ops) reads its inputs
from memory and writes its outputs back, at the memory's bandwidth. Those bytes do not shrink when the matmuls get
faster: they are why a 16-bit step is not as many times faster than a float32 one as the tensor cores' peak is
above the CUDA cores', and why autocast (fp32 residual stream and norms, a cast before every matmul) is slower
than a model held in 16 bits. :class:`TrafficCounter` is a ``TorchDispatchMode`` that sees every aten op of a
forward and backward: for each op that is not a view it adds the bytes of its tensor inputs and outputs (each read
or written once) and counts one kernel; matmuls and fused attention are counted apart (the step model times
them by their FLOPs). :func:`traced_traffic` runs :class:`shardscope.training.model.GPT` under it on CPU in one
of the three compute policies of :func:`shardscope.costmodel.memory_peak.compute_policy`, which is what
:mod:`shardscope.costmodel.elementwise`'s per-token coefficients were read from and what its test compares them
against on shapes no coefficient was read from.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from shardscope.contracts.models import ModelConfig
from shardscope.training.model import GPT

#: Ops the step model times by their FLOPs (matmuls and the fused attention kernels, forward and backward).
MATMUL_OPS = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "linear", "matmul",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
})
#: Ops that only make a new view of a tensor or allocate one: no kernel reads or writes memory for them.
NO_KERNEL_OPS = frozenset({
    "view", "_unsafe_view", "transpose", "t", "unbind", "expand", "slice", "select", "as_strided", "detach",
    "alias", "permute", "unsqueeze", "squeeze", "split", "split_with_sizes", "reshape", "_reshape_alias",
    "unflatten", "flatten", "chunk", "narrow", "diagonal", "empty", "empty_like", "empty_strided", "lift_fresh",
    "_local_scalar_dense", "is_same_size", "sym_size", "sym_stride",
})
POLICIES = ("fp32", "autocast", "bf16")
#: In-place ops that return nothing, by the positions of the tensor lists they write (a ``_foreach_`` op writes its
#: first): the fused Adam kernels update the parameters and both moments.
IN_PLACE_LISTS = {"_fused_adamw_": (0, 2, 3), "_fused_adam_": (0, 2, 3)}


@dataclass
class Traffic:
    """Bytes moved and kernels launched by the ops that are neither matmuls nor views, and the matmul kernels."""

    bytes: int = 0
    kernels: int = 0
    matmul_kernels: int = 0


class TrafficCounter(TorchDispatchMode):
    """Dispatch mode: adds each non-view op's input and output bytes to ``forward`` or ``backward`` (``phase``)."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "forward"
        self.forward, self.backward = Traffic(), Traffic()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._overloadpacket.__name__
        if name in NO_KERNEL_OPS:
            return out
        tally = self.forward if self.phase == "forward" else self.backward
        tally.kernels += 1
        if name in MATMUL_OPS:
            tally.matmul_kernels += 1
            return out
        tensors = [x for x in tree_leaves((args, kwargs, out)) if isinstance(x, torch.Tensor)]
        tally.bytes += sum(x.numel() * x.element_size() for x in tensors)
        if out is None and name.endswith("_"):  # in place, returning nothing: add the writes of the lists it updates
            written = [args[i] for i in IN_PLACE_LISTS.get(name, (0,) if name.startswith("_foreach_") else ())]
            tally.bytes += sum(x.numel() * x.element_size() for x in tree_leaves(written))
        return out


def traced_traffic(cfg: ModelConfig, micro_batch: int, seq_len: int, policy: str) -> tuple[Traffic, Traffic]:
    """(forward, backward) traffic of one micro-batch of ``cfg`` on CPU in ``policy``: ``fp32``, ``autocast`` (fp32
    weights, bf16 matmuls, as DDP runs) or ``bf16`` (weights held in bf16, as DeepSpeed and FSDP's mixed precision
    compute)."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    torch.manual_seed(0)
    model = GPT(cfg)
    if policy == "bf16":
        model = model.to(torch.bfloat16)
    tokens = torch.randint(0, cfg.vocab_size, (micro_batch, seq_len + 1))
    cast = torch.autocast("cpu", dtype=torch.bfloat16) if policy == "autocast" else contextlib.nullcontext()
    counter = TrafficCounter()
    with counter:
        with cast:
            loss = model(tokens)
        counter.phase = "backward"
        loss.backward()
    return counter.forward, counter.backward


#: torch.optim.AdamW's implementations on a GPU: ``foreach`` (its default there since torch 2.0), ``fused`` (one
#: kernel, as DeepSpeed's FusedAdam) and ``for-loop`` (one kernel per op and tensor, the default before 2.0).
TORCH_ADAMW_KWARGS = {"foreach": {"foreach": True}, "fused": {"fused": True}, "for-loop": {"foreach": False}}


def traced_update_bytes(implementation: str, tensors: int = 4, elements: int = 1 << 20) -> tuple[float, float]:
    """(bytes per parameter of one torch.optim.AdamW step in ``implementation``, bytes per parameter of
    ``clip_grad_norm_``) on CPU, counted op by op by :class:`TrafficCounter` over ``tensors`` fp32 parameters of
    ``elements`` each, at the second step (the first allocates the moments). What
    :mod:`shardscope.costmodel.optimizer_step`'s per-parameter bytes were read from."""
    if implementation not in TORCH_ADAMW_KWARGS:
        raise ValueError(f"implementation must be one of {', '.join(TORCH_ADAMW_KWARGS)}, got {implementation!r}")
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(elements)) for _ in range(tensors)]
    optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1, **TORCH_ADAMW_KWARGS[implementation])
    for p in params:
        p.grad = torch.randn(elements)
    optimizer.step()
    step, clip = TrafficCounter(), TrafficCounter()
    with step:
        optimizer.step()
    with clip:
        torch.nn.utils.clip_grad_norm_(params, 1.0)
    n = tensors * elements
    return step.forward.bytes / n, clip.forward.bytes / n
