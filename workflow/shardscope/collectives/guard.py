"""Run one job's command under a wall-clock limit, its output in a log, with a clear failure line.

``python -m shardscope.collectives.guard --job-id J --log LOG --wall-s S -- COMMAND ...``

The rules start every timed job through this guard so that a job that hangs (a rank that
never joins, a wedged NCCL communicator that no watchdog catches) cannot hang the pipeline:
after ``--wall-s`` seconds the whole process group of the command (torchrun and its ranks)
gets SIGTERM, then SIGKILL ``--kill-after-s`` later, and the guard exits with status 124
(as coreutils ``timeout`` does). On any failure it prints one line naming the job and its
log, and appends the same line to the log. It writes no result file itself, so a failed or
stopped job leaves none (the workers write theirs atomically, only on success).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

#: Exit status of a command stopped at its wall-clock limit (coreutils ``timeout`` uses it too).
TIMEOUT_EXIT = 124
#: Exit status when the command cannot be started at all (as a shell reports it).
NOT_STARTED_EXIT = 127
_ERROR_PREFIX = "shardscope: error:"


def stop_process_group(proc: subprocess.Popen[bytes], kill_after_s: float) -> None:
    """SIGTERM the process group led by ``proc``, then SIGKILL it if it outlives ``kill_after_s``."""
    for sig, wait_s in ((signal.SIGTERM, kill_after_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; ranks it left behind in the group get the same signal once more.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return


def last_error_line(log_path: str | os.PathLike[str]) -> str | None:
    """The last ``shardscope: error: ...`` line a worker wrote to the log, without the prefix."""
    try:
        lines = Path(log_path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        at = line.find(_ERROR_PREFIX)
        if at >= 0:
            return line[at + len(_ERROR_PREFIX):].strip()
    return None


def run_guarded(command: Sequence[str], job_id: str, log_path: str, wall_s: float, kill_after_s: float = 30.0) -> int:
    """Run ``command`` with its output in ``log_path``; its exit status, or 124 past ``wall_s``."""
    if not command:
        raise ValueError("no command to run")
    if not wall_s > 0:
        raise ValueError(f"wall-clock limit must be positive, got {wall_s}")
    log = Path(log_path)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as handle:
        handle.write(f"# shardscope guard: job {job_id}, limit {wall_s:g} s: {shlex.join(command)}\n".encode())
        handle.flush()
        try:
            proc = subprocess.Popen(list(command), stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            return _fail(log, f"job {job_id} could not start {command[0]!r} ({exc.strerror}); see {log}", NOT_STARTED_EXIT)
        previous = _forward_termination(proc, kill_after_s)
        started = time.monotonic()
        try:
            returncode = proc.wait(timeout=wall_s)
        except subprocess.TimeoutExpired:
            stop_process_group(proc, kill_after_s)
            return _fail(log, f"job {job_id} ran past its wall-clock limit of {wall_s:g} s and was stopped "
                              f"(a collective hung or a rank never joined); see {log}", TIMEOUT_EXIT)
        finally:
            for sig, handler in previous.items():
                if handler is not None:
                    signal.signal(sig, handler)  # type: ignore[arg-type]
    if returncode == 0:
        return 0
    cause = last_error_line(log)
    status = f"signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
    detail = f": {cause}" if cause else ""
    elapsed_s = time.monotonic() - started
    return _fail(log, f"job {job_id} failed after {elapsed_s:.0f} s ({status}){detail}; see {log}",
                 returncode if returncode > 0 else 128 - returncode)


def _forward_termination(proc: subprocess.Popen[bytes], kill_after_s: float) -> dict[int, object]:
    """Make SIGTERM/SIGINT to the guard (Snakemake cancelling the job) stop the command's group too."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop_process_group(proc, kill_after_s)
        sys.exit(128 + signum)

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.getsignal(sig)
        signal.signal(sig, handler)
    return previous


def _fail(log: Path, message: str, status: int) -> int:
    """Print ``message`` as one error line on stderr and at the end of the log; return ``status``."""
    line = f"{_ERROR_PREFIX} {message}"
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
    print(line, file=sys.stderr, flush=True)
    return status


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m shardscope.collectives.guard``."""
    p = argparse.ArgumentParser(prog="python -m shardscope.collectives.guard", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--job-id", required=True, help="the job's name, used in the failure message")
    p.add_argument("--log", required=True, help="file that receives the command's stdout and stderr")
    p.add_argument("--wall-s", type=float, required=True, help="wall-clock limit of the whole command, seconds")
    p.add_argument("--kill-after-s", type=float, default=30.0, help="grace between SIGTERM and SIGKILL, seconds")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("expected the command to run after --")
    if not args.wall_s > 0 or args.kill_after_s < 0:
        p.error(f"--wall-s must be positive and --kill-after-s >= 0, got {args.wall_s} and {args.kill_after_s}")
    return run_guarded(command, args.job_id, args.log, args.wall_s, args.kill_after_s)


if __name__ == "__main__":
    sys.exit(main())
