"""What a module's forward saves for backward: the bytes of the distinct storages autograd's saved-tensor hooks see."""

from __future__ import annotations

import contextlib

import torch
from torch import nn


def saved_bytes(module: nn.Module, x: torch.Tensor, policy: str) -> int:
    """Bytes of the distinct storages ``module``'s forward on ``x`` saves for backward, its parameters aside, under
    CPU bf16 autocast where ``policy`` is ``autocast``."""
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if policy == "autocast" else contextlib.nullcontext()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast:
        module(x)
    return sum(seen.values())
