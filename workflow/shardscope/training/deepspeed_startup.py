"""Start-up work DeepSpeed does in every ZeRO job that this harness never needs, and how the worker skips it.

DeepSpeed imports its Muon optimizer in every ZeRO job whatever the optimizer: the ZeRO support
check of ``deepspeed.initialize``, the gradient averaging of each backward and the flat
partitions of each step import ``deepspeed.runtime.zero.muon.muon_optimizer`` /
``original_muon`` to test ``isinstance(optimizer, MuonWithAuxAdam)``. Those modules decorate their
kernels with ``torch.compile``, so the first import loads TorchInductor's compiler: measured here,
2.2 s of CPU per rank (8 s of wall time on a loaded machine), a fixed cost DDP never pays.

The harness trains with AdamW (``strategies.deepspeed_config``). For such a job
:func:`skip_muon` puts stand-ins for the two modules into ``sys.modules``: their
``MuonWithAuxAdam`` is a class no optimizer is an instance of, so every check answers "not Muon"
exactly as the real one would, and their update functions raise if anything ever calls them.
"""

from __future__ import annotations

import sys
import types
from typing import Any, NoReturn

MUON_MODULES = ("deepspeed.runtime.zero.muon.muon_optimizer", "deepspeed.runtime.zero.muon.original_muon")
_NOT_HERE = "DeepSpeed's Muon was replaced by a stand-in (shardscope.training.deepspeed_startup): this job's optimizer is not Muon"


class MuonWithAuxAdam:
    """Stand-in for DeepSpeed's Muon optimizer class: never instantiated, so ``isinstance`` checks are False."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(_NOT_HERE)


def _not_here(*args: Any, **kwargs: Any) -> NoReturn:
    """Stand-in for Muon's update functions, which only Muon parameters reach."""
    raise RuntimeError(_NOT_HERE)


def skip_muon(optimizer_type: str) -> bool:
    """Install the stand-ins for the rest of this process unless the optimizer is Muon or Muon is loaded; whether they were."""
    if "muon" in optimizer_type.lower() or any(sys.modules.get(name) is not None for name in MUON_MODULES):
        return False
    for name in MUON_MODULES:
        module = types.ModuleType(name, "Stand-in for DeepSpeed's Muon module (see shardscope.training.deepspeed_startup).")
        module.MuonWithAuxAdam = MuonWithAuxAdam  # type: ignore[attr-defined]
        module.muon_update = _not_here  # type: ignore[attr-defined]
        module.adam_update = _not_here  # type: ignore[attr-defined]
        sys.modules[name] = module
    return True
