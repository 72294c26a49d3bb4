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

:func:`quiet_known_warnings` silences the FutureWarnings DeepSpeed's ZeRO makes torch print on
every rank (some 25 of a 2-rank ZeRO-3 job's log lines): known and harmless, and nothing this
harness could change.
"""

from __future__ import annotations

import sys
import types
import warnings
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


#: FutureWarnings DeepSpeed's collectives make torch print, by their message. torch (2.13) deprecates
#: ``all_gather_into_tensor`` and ``reduce_scatter_tensor`` in favour of ``*_single``; DeepSpeed's
#: ZeRO (0.19) still calls the old names, which do the same collective. Known and harmless: the
#: calls are DeepSpeed's, not ours, and each rank repeats the warning, burying the job's own lines.
KNOWN_HARMLESS = (r"`torch\.distributed\.(all_gather_into_tensor|reduce_scatter_tensor)` is deprecated",)


def quiet_known_warnings() -> None:
    """Ignore :data:`KNOWN_HARMLESS` for the rest of this process (only those: any other warning still prints)."""
    for message in KNOWN_HARMLESS:
        warnings.filterwarnings("ignore", message=message, category=FutureWarning)
