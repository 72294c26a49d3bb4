"""Count the Python function calls one training step makes: the host work the frameworks add around the math.

On CPU processes a step's time beyond its FLOPs and its collectives is interpreter work: DeepSpeed
ZeRO-3's hooks on every submodule (fetch and release of its parameters in forward and backward),
ZeRO-1/2's per-parameter gradient hooks, FSDP2's per-unit hooks and its DTensor optimizer
dispatch. Their cost per call is roughly constant (a few microseconds of CPython per function
call), so the number of Python function calls of one step measures that work for any strategy
without modelling each framework's hooks. :class:`PythonCallCounter` counts them with
``sys.setprofile`` (``call`` events: Python functions; C functions such as torch kernels are
not counted) on the thread that runs it. The worker runs it during its one untimed step that
already counts the collectives, so no timed step is slowed.

On CPU autograd runs backward on the calling thread, so backward hooks are counted; on a GPU
autograd's device threads run them and they are not counted (the count is then a lower bound).
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any


class PythonCallCounter:
    """Context manager: ``calls`` is the number of Python function calls made on this thread while active."""

    def __init__(self) -> None:
        self.calls = 0
        self._previous: Any = None

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            self.calls += 1

    def __enter__(self) -> PythonCallCounter:
        self._previous = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(self._previous)
