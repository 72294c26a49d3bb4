"""Own every process a job starts, wherever it ends up, and end them all before the job's result is written.

torchrun starts each rank in a session of its own, so a signal to the agent's process group misses the
ranks, and a rank whose agent died is re-parented away from the launcher and keeps running (it then
wrote ``ok`` over the launcher's ``failed``). Two things make the launcher the owner of the whole tree:

- every process of one launch carries a marker variable, :data:`MARKER_VAR`, with a value unique to the
  launch; it is inherited by torchrun, its ranks and whatever they start, and read back from
  ``/proc/PID/environ``, so :func:`end_marked` finds them however they were re-parented or re-sessioned;
- the launcher is a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): an orphaned rank becomes its
  child, not init's, so the launcher also reaps it and its state (stopped, running) stays visible.

Linux only (``/proc``); elsewhere the marker scan finds nothing and only the direct child is ended.
Torch-free.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

#: The variable whose value marks every process of one launch.
MARKER_VAR = "SHARDSCOPE_LAUNCH_MARKER"
#: ``prctl`` option that makes orphaned descendants children of the caller (linux/prctl.h).
PR_SET_CHILD_SUBREAPER = 36


def new_marker() -> str:
    """A value for :data:`MARKER_VAR` that no other launch uses."""
    return f"{os.getpid()}-{uuid.uuid4().hex}"


def become_subreaper(on: bool = True) -> bool:
    """Make this process the reaper of its orphaned descendants (or stop being one); False where the kernel or libc
    cannot. :func:`run_owned` is one only while its launch runs, so a test process that launches jobs does not
    adopt other tests' orphans afterwards."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@dataclass(frozen=True)
class MarkedProcess:
    """One live process of a launch, as ``/proc`` shows it."""

    pid: int
    state: str
    """The kernel's one-letter state: ``R`` running, ``S`` sleeping, ``T`` stopped, ``Z`` zombie..."""
    rank: int | None
    """Its ``RANK`` variable (a torchrun rank), or None (the agent, a helper)."""

    @property
    def stopped(self) -> bool:
        """Stopped by a signal (SIGSTOP, SIGTSTP) or a tracer: it will never answer its peers."""
        return self.state in ("T", "t")


def _environ(pid: str) -> dict[bytes, bytes]:
    raw = (Path("/proc") / pid / "environ").read_bytes()
    return dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)


def _state(pid: str) -> str:
    stat = (Path("/proc") / pid / "stat").read_text()
    return stat[stat.rindex(")") + 2:].split(" ", 1)[0]  # the command name in parentheses may hold spaces


def marked_processes(marker: str) -> list[MarkedProcess]:
    """Every live process (zombies left out) whose environment holds ``MARKER_VAR=marker``."""
    found = []
    me = str(os.getpid())
    try:
        entries = [e.name for e in Path("/proc").iterdir() if e.name.isdigit() and e.name != me]
    except OSError:
        return []
    for pid in entries:
        try:
            env = _environ(pid)
            if env.get(MARKER_VAR.encode()) != marker.encode():
                continue
            state = _state(pid)
        except (OSError, ValueError):  # gone meanwhile, or another user's process
            continue
        if state in ("Z", "X"):
            continue
        rank = env.get(b"RANK", b"")
        found.append(MarkedProcess(int(pid), state, int(rank) if rank.isdigit() else None))
    return found


def end_marked(marker: str, grace_s: float = 5.0) -> list[MarkedProcess]:
    """End every process of the launch ``marker``: SIGTERM (and SIGCONT, so a stopped one sees it), then SIGKILL.

    Returns what was found alive before the first signal. Waits until none is left (SIGKILL cannot be
    ignored; at most ``grace_s`` + 10 s), reaping the ones this process adopted.
    """
    first = marked_processes(marker)
    deadline = time.monotonic() + grace_s
    sig = signal.SIGTERM
    living = first
    while living:
        for proc in living:
            for each in (sig, signal.SIGCONT) if sig == signal.SIGTERM else (sig,):
                try:
                    os.kill(proc.pid, each)
                except (ProcessLookupError, PermissionError):
                    pass
        time.sleep(0.05)
        _reap_children_of_marker(living)
        living = marked_processes(marker)
        if time.monotonic() > deadline:
            sig = signal.SIGKILL
        if time.monotonic() > deadline + 10.0:
            break
    return first


def _reap_children_of_marker(procs: list[MarkedProcess]) -> None:
    """Reap those of ``procs`` that are this process's children (adopted orphans), leaving other children alone."""
    for proc in procs:
        try:
            os.waitpid(proc.pid, os.WNOHANG)
        except ChildProcessError:
            continue


@dataclass
class OwnedRun:
    """How a command run by :func:`run_owned` ended."""

    returncode: int
    """Its exit status (negative: the signal that ended it)."""
    timed_out: bool = False
    """Stopped at its wall-clock limit."""
    stopped_ranks: set[int] = field(default_factory=set)
    """Ranks seen stopped (SIGSTOP) while it ran or when it ended: they never answered their peers."""
    left_behind: list[MarkedProcess] = field(default_factory=list)
    """Processes of the launch still alive after the command itself ended, ended then."""


def run_owned(command: Sequence[str], *, env: dict[str, str] | None, stdout: IO[Any] | int | None,
              wall_s: float | None, grace_s: float = 5.0, poll_s: float = 1.0) -> OwnedRun:
    """Run ``command`` as the owner of every process it starts; return only when all of them are gone.

    Past ``wall_s`` seconds (None: no limit) the launch is ended (SIGTERM, then SIGKILL after
    ``grace_s``). SIGTERM/SIGINT to this process end the launch too, then this process (exit 128+signal),
    so a cancelled job leaves no rank behind. Raises ``OSError`` when the command cannot start.
    """
    marker = new_marker()
    proc = subprocess.Popen(list(command), stdout=stdout, stderr=subprocess.STDOUT if stdout is not None else None,
                            env={**(os.environ if env is None else env), MARKER_VAR: marker}, start_new_session=True)
    become_subreaper()  # torchrun takes seconds to start a rank: none can be orphaned before this
    run = OwnedRun(returncode=0)
    previous = _end_on_termination(marker, grace_s)
    deadline = None if wall_s is None else time.monotonic() + wall_s
    try:
        while True:
            try:
                run.returncode = proc.wait(timeout=poll_s if deadline is None else
                                           max(0.0, min(poll_s, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                run.stopped_ranks |= _stopped(marked_processes(marker))
                if deadline is not None and time.monotonic() >= deadline:
                    run.timed_out = True
                    run.stopped_ranks |= _stopped(end_marked(marker, grace_s))
                    run.returncode = proc.wait()
                    break
        left = end_marked(marker, grace_s)
        run.left_behind = left
        run.stopped_ranks |= _stopped(left)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        become_subreaper(False)
    return run


def _stopped(procs: list[MarkedProcess]) -> set[int]:
    return {p.rank for p in procs if p.stopped and p.rank is not None}


def _end_on_termination(marker: str, grace_s: float) -> dict[int, Any]:
    """Make SIGTERM/SIGINT to this process (Snakemake cancelling the job) end the launch first."""

    def handler(signum: int, frame: FrameType | None) -> None:
        end_marked(marker, grace_s)
        sys.exit(128 + signum)

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread: signals stay with whoever handles them there
            continue
    return previous


@contextlib.contextmanager
def private_result(out: str | os.PathLike[str]) -> Iterator[Path]:
    """A path beside ``out``, private to this launch, where the ranks write the result (and their error files).

    Only the launcher publishes (:func:`publish`), after every rank is gone; the folder is removed on
    leaving, so a rank that somehow outlived its launch has nowhere left to write.
    """
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{target.name}.ranks-", dir=target.parent))
    try:
        yield folder / target.name
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def publish(staged: Path, out: str | os.PathLike[str]) -> bool:
    """Move the ranks' result at ``staged`` to ``out`` (one rename); False when the ranks left none."""
    try:
        os.replace(staged, out)
    except FileNotFoundError:
        return False
    return True
