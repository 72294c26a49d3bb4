"""Find and signal the processes of a job under test, by a string of their command line (read-only /proc scan)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path


def processes_mentioning(marker: str) -> list[int]:
    """Pids whose command line contains ``marker`` (zombies left out: they hold no command line)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def rank_of(pid: int) -> int | None:
    """The ``RANK`` variable of process ``pid`` (a torchrun rank), or None."""
    try:
        env = (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:
        return None
    values = [item[5:] for item in env if item.startswith(b"RANK=")]
    return int(values[0]) if values and values[0].isdigit() else None


def wait_for(find: Callable[[], list[int]], timeout_s: float) -> list[int]:
    """Poll ``find`` until it returns pids (or ``timeout_s`` passes: then an AssertionError)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = find()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"no such process within {timeout_s} s")


def agent_and_ranks(marker: str) -> tuple[list[int], dict[int, int]]:
    """The torchrun agents and the ranks (rank -> pid) whose command lines mention ``marker``."""
    pids = processes_mentioning(marker)
    agents = [pid for pid in pids if b"torch.distributed.run" in (Path("/proc") / str(pid) / "cmdline").read_bytes()]
    ranks = {rank: pid for pid in pids if pid not in agents and (rank := rank_of(pid)) is not None}
    return agents, ranks


def kill(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to ``pid``, which may be gone already."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
