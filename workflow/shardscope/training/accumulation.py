"""Gradient accumulation: one optimizer step over ``grad_accum`` micro-batches, the same way under every strategy.

"Fastest within memory" compares each strategy at its own largest micro-batch; so that they
still train on one global batch (``micro_batch x grad_accum x ranks`` sequences per optimizer
step) each accumulates gradients over ``grad_accum`` micro-batches before it steps. Each
framework accumulates its own recommended way, and the result's ``settings.accumulation`` says which:

* DDP skips the all-reduce of every micro-batch but the last (``no_sync``): one all-reduce per step;
* FSDP2 / HSDP reduce-scatter after every micro-batch (its default; the accumulated gradients
  stay sharded, so accumulation costs no memory);
* DeepSpeed accumulates with its own ``gradient_accumulation_steps`` (set in its config by
  :func:`shardscope.training.strategies.deepspeed_config`): ``engine.backward`` scales the loss
  and ``engine.step`` steps the optimizer only at the boundary.

The rank's batch of one step is one tensor of ``micro_batch x grad_accum`` rows, cut in
``grad_accum`` equal micro-batches in order, so a run at micro-batch 4 and one at micro-batch
2 accumulating 2 train on the same data; the loss of a step is the mean of its micro-batches'
losses (each a mean over equally many tokens), i.e. the loss of the whole batch. torch
strategies divide the summed gradients by ``grad_accum`` before the optimizer step (the same as
scaling each micro-batch's loss); DeepSpeed scales the loss itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import torch

from shardscope.contracts.strategies import uses_deepspeed

#: How each framework accumulates (the ``settings.accumulation`` of a result).
METHODS = {
    "ddp": "no_sync on all but the last micro-batch: one gradient all-reduce per optimizer step",
    "fsdp": "FSDP2 default: gradients reduce-scattered after every micro-batch, accumulated sharded",
    "deepspeed": "DeepSpeed gradient_accumulation_steps: loss scaled by the engine, optimizer stepped at the boundary",
}


def check_grad_accum(value: Any) -> int:
    """``value`` as a micro-batch count per optimizer step; ValueError naming ``--grad-accum`` unless a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"--grad-accum must be an integer of at least 1, got {value!r}")
    return value


def _family(strategy: str) -> str:
    return "deepspeed" if uses_deepspeed(strategy) else "ddp" if strategy == "ddp" else "fsdp"


def accumulating(prepared: Any, grad_accum: int) -> Any:
    """``prepared`` (a :class:`shardscope.training.strategies.Prepared`) stepping once per ``grad_accum`` micro-batches.

    Its ``forward_backward`` takes the rank's whole batch (``micro_batch x grad_accum`` rows)
    and returns the mean loss of its micro-batches; its ``step`` is the one optimizer step. With
    ``grad_accum`` 1 ``prepared`` is returned unchanged (apart from the settings' record), so a
    run without accumulation runs exactly the code it ran before.
    """
    grad_accum = check_grad_accum(grad_accum)
    family = _family(prepared.strategy)
    settings = dict(prepared.settings or {}, grad_accum=grad_accum,
                    accumulation=METHODS[family] if grad_accum > 1 else "none (one micro-batch per optimizer step)")
    if grad_accum == 1:
        return dataclasses.replace(prepared, settings=settings)
    inner_fb, inner_step, model = prepared.forward_backward, prepared.step, prepared.model

    def forward_backward(tokens: torch.Tensor) -> torch.Tensor:
        chunks = tokens.chunk(grad_accum, dim=0)
        if len(chunks) != grad_accum or any(len(c) != len(chunks[0]) for c in chunks):
            raise ValueError(f"a batch of {len(tokens)} rows does not cut into {grad_accum} equal micro-batches")
        losses = []
        for i, chunk in enumerate(chunks):
            last = i == grad_accum - 1
            skip_sync = model.no_sync() if family == "ddp" and not last else contextlib.nullcontext()
            with skip_sync:
                losses.append(inner_fb(chunk).float())
            if family == "deepspeed" and not last:
                inner_step()  # not a boundary: DeepSpeed counts the micro-step and leaves the optimizer alone
        return torch.stack(losses).mean()

    def step() -> None:
        if family != "deepspeed":
            with torch.no_grad():
                for param in model.parameters():
                    if param.grad is not None:
                        param.grad.div_(grad_accum)
        inner_step()

    return dataclasses.replace(prepared, forward_backward=forward_backward, step=step, settings=settings)
