"""An emulated fabric leaves the machine as it found it: build, run a process in it, tear down -- twice.

After each teardown no namespace under the test's prefix is left and the process started inside
a namespace is gone (the ``prefix`` fixture fails the test on any leftover, too).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from shardscope.emulated import netns
from shardscope.emulated.fabric import EmulatedFabric
from shardscope.emulated.presets import BUILTIN


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_build_and_teardown_twice_leaves_no_namespace_or_process(prefix: str, ours: Callable[[], list[str]]) -> None:
    for _ in range(2):
        with EmulatedFabric(BUILTIN["nvl_groups"], prefix=prefix) as fabric:
            assert sorted(ours()) == sorted(fabric.namespaces) and len(fabric.namespaces) >= 4
            sleeper = subprocess.Popen(["ip", "netns", "exec", fabric.host_namespace(0), "sleep", "300"])
            deadline = time.monotonic() + 10
            while not netns.namespace_pids(fabric.host_namespace(0)) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert sleeper.pid in netns.namespace_pids(fabric.host_namespace(0))
        sleeper.wait(timeout=10)  # killed by the teardown, reaped here
        assert ours() == [] and not alive(sleeper.pid)
