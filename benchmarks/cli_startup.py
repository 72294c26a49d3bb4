"""Start-up time of a command that does not measure, beside an empty interpreter, in one run.

    .venv/bin/python benchmarks/cli_startup.py [--repeats 5] [--topology FILE]

Times ``python -c pass``, ``shardscope --help`` and ``shardscope topology show FILE`` (a saved
``nvidia-smi topo -m`` of the test data by default) in fresh interpreters, ``--repeats`` times
each, and prints the median seconds and the ratio to ``python -c pass``. Importing torch would
add seconds; the torch-free core keeps this near the interpreter's own start-up.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TOPOLOGY = REPO / "tests" / "data" / "topo" / "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt"


def median_seconds(argv: list[str], repeats: int) -> float:
    """Median wall-clock seconds of running ``argv`` to completion ``repeats`` times (output discarded)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    """Print one line per command: median seconds and the ratio to an empty interpreter."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--topology", default=str(DEFAULT_TOPOLOGY))
    args = parser.parse_args(argv)
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "shardscope --help": [sys.executable, "-m", "shardscope", "--help"],
        "shardscope topology show": [sys.executable, "-m", "shardscope", "topology", "show", args.topology],
        "python -c 'import torch' (for scale)": [sys.executable, "-c", "import torch"],
    }
    base = None
    for name, command in commands.items():
        seconds = median_seconds(command, args.repeats)
        base = base or seconds
        print(f"{name:40s} {seconds:7.3f} s  {seconds / base:6.1f}x python -c pass")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
