"""Start-up work DeepSpeed does in every ZeRO job that this harness never needs, and how the worker skips it.

``deepspeed.initialize`` checks that the optimizer is one ZeRO supports
(``deepspeed.runtime.zero.utils.is_zero_supported_optimizer``). To add its Muon optimizer to that
list, the check imports ``deepspeed.runtime.zero.muon.muon_optimizer``, whose kernels are
decorated with ``torch.compile``: the import loads TorchInductor, the largest part of a ZeRO job's
fixed cost on CPU (profiled: about half of ``deepspeed.initialize``, seconds per rank; DDP never
pays it). The harness trains with AdamW, which is in the list already, so the check answers the
same without Muon; inside :func:`without_muon` the import fails as if Muon were not installed,
which the check handles (``except ImportError``).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

MUON_MODULE = "deepspeed.runtime.zero.muon.muon_optimizer"


@contextlib.contextmanager
def without_muon() -> Iterator[None]:
    """Inside the block, ``import deepspeed.runtime.zero.muon.muon_optimizer`` raises ImportError (unless already imported)."""
    if sys.modules.get(MUON_MODULE) is not None:
        yield
        return
    sys.modules[MUON_MODULE] = None  # type: ignore[assignment]  # Python's documented way to make an import fail
    try:
        yield
    finally:
        if MUON_MODULE in sys.modules and sys.modules[MUON_MODULE] is None:
            del sys.modules[MUON_MODULE]
