"""Run one job's command under a wall-clock limit, its output in a log, with a clear failure line.

``python -m shardscope.collectives.guard --job-id J --log LOG --wall-s S -- COMMAND ...``

The rules start every timed job through this guard so that a job that hangs (a rank that
never joins, a wedged NCCL communicator that no watchdog catches) cannot hang the pipeline:
after ``--wall-s`` seconds every process the command started (torchrun and its ranks, each
in its own session; :mod:`shardscope.process_tree` finds them all) gets SIGTERM, then
SIGKILL ``--kill-after-s`` later, and the guard exits with status 124 (as coreutils ``timeout``
does). It returns only when none of them is left, whatever the command's status. On any
failure it prints one line naming the job and its log (and a rank seen stopped), and appends
the same line to the log. It writes no result file itself (``shardscope job run`` publishes
the one the ranks left in a private folder, after the guard returns).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from shardscope.process_tree import run_owned

#: Exit status of a command stopped at its wall-clock limit (coreutils ``timeout`` uses it too).
TIMEOUT_EXIT = 124
#: Exit status when the command cannot be started at all (as a shell reports it).
NOT_STARTED_EXIT = 127
_ERROR_PREFIX = "shardscope: error:"


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
        started = time.monotonic()
        try:
            run = run_owned(command, env=None, stdout=handle, wall_s=wall_s, grace_s=kill_after_s)
        except OSError as exc:
            return _fail(log, f"job {job_id} could not start {command[0]!r} ({exc.strerror}); see {log}",
                         NOT_STARTED_EXIT)
    if run.timed_out:
        stopped = f" (rank {', '.join(map(str, sorted(run.stopped_ranks)))} was stopped)" if run.stopped_ranks else ""
        return _fail(log, f"job {job_id} ran past its wall-clock limit of {wall_s:g} s and was stopped{stopped} "
                          f"(a collective hung or a rank never joined); see {log}", TIMEOUT_EXIT)
    returncode = run.returncode
    if returncode == 0:
        return 0
    cause = last_error_line(log)
    status = f"signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
    detail = f": {cause}" if cause else ""
    elapsed_s = time.monotonic() - started
    return _fail(log, f"job {job_id} failed after {elapsed_s:.0f} s ({status}){detail}; see {log}",
                 returncode if returncode > 0 else 128 - returncode)


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
