"""The Python-call counter the training worker runs during its untimed step."""

from __future__ import annotations

import sys

from shardscope.training.host_calls import PythonCallCounter


def _leaf() -> int:
    return 1


def _branch() -> int:
    return _leaf() + _leaf()


def test_it_counts_python_function_calls_not_builtins_and_restores_the_profiler() -> None:
    before = sys.getprofile()
    with PythonCallCounter() as few:
        _branch()
    with PythonCallCounter() as many:
        for _ in range(50):
            _branch()
        sorted(range(1000))  # builtins (C functions) are not Python calls
    assert sys.getprofile() is before
    # each _branch is 3 Python calls; the counter's own __exit__ is the one more call it sees
    assert few.calls == 3 + 1 and many.calls == 150 + 1
