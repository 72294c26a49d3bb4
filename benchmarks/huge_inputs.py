"""Time and peak memory of every reader on huge inputs (issue 16: under 5 s and 300 MB each).

    .venv/bin/python benchmarks/huge_inputs.py [--size-mib 1024] [--limit-s 5] [--limit-mb 300]

Builds, in a temporary folder, a file of zeros and a valid nccl-tests log (the bundled
generation-2 log) followed by a huge tail of NCCL INFO lines, each ``--size-mib`` large; runs
each reader (``topology parse``/``show``, ``collectives import``, ``verdict``, ``nccl-log``) on
each file as a child process and prints its wall time, its peak resident memory (from
``os.wait4``'s resource usage of that child) and how it ended. Exits with status 1 when a run
exceeds a limit or ends with a traceback.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOG = REPO / "tests" / "data" / "nccl-tests" / "all_reduce_perf-gen2-2x8-h100-16ranks.txt"
TAIL_LINE = b"ztan-mig-235z:6899:6899 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n"
READERS = {
    "topology parse": ["topology", "parse"],
    "topology show": ["topology", "show"],
    "collectives import": ["collectives", "import"],
    "verdict": ["verdict"],
    "nccl-log": ["nccl-log"],
}


def build_inputs(folder: Path, size: int) -> dict[str, Path]:
    """A sparse file of zeros and a valid log with a huge tail, each ``size`` bytes."""
    zeros = folder / "zeros_all_reduce_perf.txt"
    with open(zeros, "wb") as handle:
        handle.truncate(size)
    tail = folder / "tail_all_reduce_perf.txt"
    block = TAIL_LINE * (1 << 20 // len(TAIL_LINE) + 1)
    with open(tail, "wb") as handle:
        handle.write(LOG.read_bytes())
        while handle.tell() < size:
            handle.write(block[: size - handle.tell()])
    return {"zeros": zeros, "log + huge tail": tail}


def run_child(argv: list[str]) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS in MB, exit status, last stderr line) of one child process."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert child.stderr is not None
    err = child.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    lines = err.strip().splitlines()
    return wall, usage.ru_maxrss / 1024, child.returncode, ("Traceback! " if "Traceback" in err else "") + (lines[-1] if lines else "")


def main(argv: list[str] | None = None) -> int:
    """Run every reader on every huge input and print one line per run; 1 when a limit is exceeded."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=float, default=1024.0)
    parser.add_argument("--limit-s", type=float, default=5.0)
    parser.add_argument("--limit-mb", type=float, default=300.0)
    args = parser.parse_args(argv)
    shardscope = [sys.executable, "-m", "shardscope"]
    failed = False
    with tempfile.TemporaryDirectory(prefix="huge-inputs-") as tmp:
        inputs = build_inputs(Path(tmp), int(args.size_mib * 2**20))
        print(f"{'reader':<20} {'input':<16} {'time s':>7} {'peak MB':>8}  exit  message")
        for reader, command in READERS.items():
            for kind, path in inputs.items():
                out = Path(tmp) / "out" / "topology.json"
                extra = ["--out", str(out)] if reader == "topology parse" else []
                wall, peak_mb, status, message = run_child([*shardscope, *command, str(path), *extra])
                over = wall > args.limit_s or peak_mb > args.limit_mb or message.startswith("Traceback")
                failed |= over
                print(f"{reader:<20} {kind:<16} {wall:7.2f} {peak_mb:8.1f}  {status:4d}  {message[:110]}"
                      + ("  OVER LIMIT" if over else ""))
                copied = Path(tmp) / "out" / "raw" / path.name
                if copied.exists():
                    failed = True
                    print(f"  topology parse copied {copied.stat().st_size} bytes into raw/")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
