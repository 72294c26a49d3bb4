"""Time and peak memory of every reader on huge inputs (issue 16: under 5 s and 300 MB each).

    .venv/bin/python benchmarks/huge_inputs.py [--size-mib 1024] [--limit-s 5] [--limit-mb 300]

Builds, in a temporary folder, a file of zeros and a valid nccl-tests log (the bundled
generation-2 log) followed by a huge tail of NCCL INFO lines, each ``--size-mib`` large, and
the same two files just under each reader's default input size limit (those are read, not refused);
runs each reader (``topology parse``/``show``, ``collectives import``, ``verdict``,
``nccl-log``) on each file as a child process and prints its CPU and wall time, its peak
resident memory and how it ended. Each run is measured by a fresh wrapper process (this script
with ``--measure``) that starts the command, waits for it and reads
``resource.getrusage(RUSAGE_CHILDREN)``: with one child, that is the command's own peak and CPU
time. The time limit is judged on CPU seconds (user + system), since wall time on a shared
machine measures the other jobs too; wall seconds are printed beside it. Exits with status 1
when a run exceeds a limit, ends with a traceback, or ``topology parse`` copies a huge input
into ``raw/``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
LOG = REPO / "tests" / "data" / "nccl-tests" / "all_reduce_perf-gen2-2x8-h100-16ranks.txt"
TAIL_LINE = b"ztan-mig-235z:6899:6899 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n"
#: reader -> (its command, whether its default size limit is the topology one)
READERS = {
    "topology parse": (["topology", "parse"], True),
    "topology show": (["topology", "show"], True),
    "collectives import": (["collectives", "import"], False),
    "verdict": (["verdict"], False),
    "nccl-log": (["nccl-log"], False),
}


def build_inputs(folder: Path, size: int) -> dict[str, Path]:
    """A sparse file of zeros and a valid log with a huge tail, each ``size`` bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    zeros = folder / "zeros_all_reduce_perf.txt"
    with open(zeros, "wb") as handle:
        handle.truncate(size)
    tail = folder / "tail_all_reduce_perf.txt"
    block = TAIL_LINE * ((1 << 20) // len(TAIL_LINE) + 1)
    with open(tail, "wb") as handle:
        handle.write(LOG.read_bytes())
        while handle.tell() < size:
            handle.write(block[: size - handle.tell()])
    return {"zeros": zeros, "log + huge tail": tail}


def measure(argv: list[str]) -> int:
    """Run ``argv`` once and print one JSON line: wall seconds, peak RSS (MB, getrusage), exit status, last stderr line.

    Runs in its own wrapper process, so RUSAGE_CHILDREN holds exactly this one command.
    """
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # ru_maxrss is in KiB on Linux
    err = done.stderr.decode(errors="replace")
    lines = err.strip().splitlines()
    print(json.dumps({"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024,
                      "status": done.returncode,
                      "message": ("Traceback! " if "Traceback" in err else "") + (lines[-1] if lines else "")}))
    return 0


def run_child(argv: list[str]) -> dict[str, Any]:
    """``wall_s``, ``cpu_s``, ``peak_mb``, ``status`` and ``message`` of ``argv``, measured by a wrapper process."""
    wrapper = subprocess.run([sys.executable, __file__, "--measure", "--", *argv], capture_output=True, text=True, check=True)
    return dict(json.loads(wrapper.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    """Run every reader on every huge input and print one line per run; 1 when a limit is exceeded."""
    if argv is None:
        argv = sys.argv[1:]
    if argv[:2] == ["--measure", "--"]:
        return measure(argv[2:])
    from shardscope.fileio import DEFAULT_MAX_INPUT_MIB, TOPOLOGY_MAX_INPUT_MIB

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=float, default=1024.0)
    parser.add_argument("--limit-s", type=float, default=5.0)
    parser.add_argument("--limit-mb", type=float, default=300.0)
    args = parser.parse_args(argv)
    shardscope = [sys.executable, "-m", "shardscope"]
    failed = False
    worst = {"cpu_s": 0.0, "wall_s": 0.0, "peak_mb": 0.0}
    with tempfile.TemporaryDirectory(prefix="huge-inputs-") as tmp:
        sizes = {f"{args.size_mib:g} MiB": args.size_mib, "under limit": DEFAULT_MAX_INPUT_MIB - 0.5,
                 "under topology limit": TOPOLOGY_MAX_INPUT_MIB - 0.5}
        built = {label: build_inputs(Path(tmp) / label.replace(" ", "-"), int(mib * 2**20)) for label, mib in sizes.items()}
        print(f"limits: {args.limit_s:g} s of CPU and {args.limit_mb:g} MB peak RSS per run (resource.getrusage); "
              f"default input size limits {DEFAULT_MAX_INPUT_MIB:g} MiB, topology files {TOPOLOGY_MAX_INPUT_MIB:g} MiB")
        print(f"{'reader':<19} {'input':<38} {'cpu s':>6} {'wall s':>7} {'peak MB':>8}  exit  message")
        for reader, (command, topology) in READERS.items():
            under = "under topology limit" if topology else "under limit"
            for label in (f"{args.size_mib:g} MiB", under):
                for kind, path in built[label].items():
                    out = Path(tmp) / "out" / "topology.json"
                    extra = ["--out", str(out)] if reader == "topology parse" else []
                    run = run_child([*shardscope, *command, str(path), *extra])
                    message = run["message"].replace(str(Path(tmp)), "$TMP")
                    over = (run["cpu_s"] > args.limit_s or run["peak_mb"] > args.limit_mb
                            or message.startswith("Traceback") or run["status"] not in (0, 2))
                    failed |= over
                    worst = {key: max(worst[key], run[key]) for key in worst}
                    print(f"{reader:<19} {kind + ', ' + label:<38} {run['cpu_s']:6.2f} {run['wall_s']:7.2f} "
                          f"{run['peak_mb']:8.1f}  {run['status']:4d}  {message[:90]}" + ("  OVER LIMIT" if over else ""))
                    copied = Path(tmp) / "out" / "raw" / path.name
                    if copied.exists() and copied.stat().st_size > TOPOLOGY_MAX_INPUT_MIB * 2**20:
                        failed = True
                        print(f"  topology parse copied {copied.stat().st_size} bytes into raw/")
    print(f"worst: {worst['cpu_s']:.2f} s of CPU (limit {args.limit_s:g}, ratio {worst['cpu_s'] / args.limit_s:.2f}; "
          f"wall {worst['wall_s']:.2f} s), {worst['peak_mb']:.1f} MB (limit {args.limit_mb:g}, "
          f"ratio {worst['peak_mb'] / args.limit_mb:.2f})" + ("; OVER A LIMIT" if failed else "; all within"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
