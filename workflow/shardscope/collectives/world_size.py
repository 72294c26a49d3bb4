"""How many ranks an nccl-tests run had, when its ``# Rank N ... device`` lines are missing.

Logs pasted into issues and posts often lack the device block (cut at the top, a table alone).
The rank count then comes, in this order, from:

1. the command line: nccl-tests runs ``-t`` threads × ``-g`` GPUs per process, and a launcher
   starts the processes (``mpirun``/``mpiexec -np N``, ``srun -n N``/``--ntasks N``,
   ``torchrun --nproc-per-node P --nnodes M``); without a launcher one process runs;
2. the ratio busbw / algbw of the printed rows, for ops whose busbw factor depends on the rank
   count (all_reduce ``2(n-1)/n``, all_gather / reduce_scatter / alltoall ``(n-1)/n``): each
   row, with its printed rounding, bounds n to an interval; the rows must agree on one integer.

Each function returns ``None`` when its source does not tell the rank count.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterable, Sequence
from typing import Any

#: Ops whose busbw factor is 2(n-1)/n (``2``) or (n-1)/n (``1``); the others (factor 1) say nothing about n.
RATIO_OPS = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}
#: Half a unit of the last printed digit of nccl-tests' ``%6.2f`` bandwidths.
PRINT_HALF_UNIT_GBPS = 0.005
#: The rank count read from the ratio must lie in this range to be believed.
MAX_RATIO_RANKS = 1 << 16

_BINARY = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z_]+_perf(?:_mpi)?(?![A-Za-z0-9_])")
_LAUNCHERS = ("mpirun", "mpiexec", "srun", "torchrun", "orterun", "prterun")
#: nccl-tests' own ``# Collective test starting: all_reduce_perf`` line names the binary but is no command.
_STARTING = re.compile(r"Collective test starting")
_PROMPT = re.compile(r"^.*?[#$>]\s+(?=\S)")


def command_lines(lines: Sequence[str]) -> list[str]:
    """Shell command lines in a log that start an nccl-tests binary, with ``\\`` continuations joined.

    A leading shell prompt (``root@host:~# ``, ``$ ``, ``> ``) is removed from every physical line.
    """
    joined: list[str] = []
    pending = ""
    for line in lines:
        text = line.rstrip()
        if pending:
            text = _PROMPT.sub("", text, count=1) if text.lstrip().startswith(">") else text.strip()
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        joined.append(pending + text)
        pending = ""
    if pending:
        joined.append(pending)
    return [line for line in joined if "_perf" in line and _BINARY.search(line) and not _STARTING.search(line)]


def ranks_from_command(lines: Sequence[str]) -> tuple[int, str] | None:
    """(rank count, the command it was read from) from the first command line that tells it, or None."""
    for line in command_lines(lines):
        ranks = _ranks_of_command(line)
        if ranks is not None:
            return ranks, line.strip()
    return None


def _tokens(line: str) -> list[str]:
    """The shell words of ``line`` (prompt removed), tolerant of unbalanced quotes."""
    text = line.strip()
    start = min((text.find(name) for name in (*_LAUNCHERS, *_binary_names(text)) if text.find(name) >= 0), default=0)
    text = text[start:]
    try:
        return shlex.split(text, comments=False)
    except ValueError:
        return text.split()


def _binary_names(text: str) -> list[str]:
    return [m.group(0) for m in _BINARY.finditer(text)]


def _option(words: Sequence[str], *names: str) -> str | None:
    """The value of the first of ``names`` in ``words``: ``-g 8``, ``-g8``, ``--ngpus=8``."""
    for i, word in enumerate(words):
        for name in names:
            if word == name and i + 1 < len(words):
                return words[i + 1]
            if name.startswith("--") and word.startswith(name + "="):
                return word[len(name) + 1 :]
            if not name.startswith("--") and len(name) == 2 and word.startswith(name) and word[2:].isdigit():
                return word[2:]
    return None


def _positive(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() and int(value) > 0 else None


def _ranks_of_command(line: str) -> int | None:
    """Ranks of one command line: processes × threads × GPUs per process, or None if it does not say."""
    words = _tokens(line)
    binary_at = next((i for i, w in enumerate(words) if _BINARY.search(w.rsplit("/", 1)[-1])), None)
    if binary_at is None:
        return None
    launcher, test = words[:binary_at], words[binary_at + 1 :]
    gpus = _positive(_option(test, "-g", "--ngpus"))
    threads = _positive(_option(test, "-t", "--nthreads"))
    per_process = (gpus or 1) * (threads or 1)
    names = {w.rsplit("/", 1)[-1] for w in launcher}
    processes: int | None = None
    if names & {"mpirun", "mpiexec", "orterun", "prterun"}:
        processes = _positive(_option(launcher, "-np", "-n", "--np", "-c"))
    elif "srun" in names:
        processes = _positive(_option(launcher, "-n", "--ntasks"))
        if processes is None:
            per_node = _positive(_option(launcher, "--ntasks-per-node"))
            nodes = _positive(_option(launcher, "-N", "--nodes"))
            processes = per_node * nodes if per_node and nodes else None
    elif "torchrun" in names:
        per_node = _positive(_option(launcher, "--nproc-per-node", "--nproc_per_node"))
        nodes = _positive(_option(launcher, "--nnodes")) or 1
        processes = per_node * nodes if per_node else None
    elif not launcher:
        processes = 1
    if processes is None:
        return None
    if processes == 1 and gpus is None and threads is None:
        return 1 if not launcher else None
    return processes * per_process


def ranks_from_ratio(op: str, rows: Iterable[dict[str, Any]]) -> tuple[int | None, str]:
    """(rank count, how it was read) from busbw / algbw of printed rows; count None when they do not tell.

    Every row with a non-zero algbw bounds the factor ``busbw / algbw`` by its print rounding; the
    bounds of all rows are intersected. The answer is the one integer n >= 2 inside, else None
    with the reason (no such op, rows disagree, or several counts fit).
    """
    scale = RATIO_OPS.get(op)
    if scale is None:
        return None, f"busbw equals algbw for {op} whatever the rank count"
    low, high = 1.0, math.inf
    used = 0
    for row in rows:
        algbw, busbw = float(row["algbw_gbps"]), float(row["busbw_gbps"])
        if not (math.isfinite(algbw) and math.isfinite(busbw)) or algbw <= 2 * PRINT_HALF_UNIT_GBPS:
            continue
        u = PRINT_HALF_UNIT_GBPS
        r_low, r_high = (busbw - u) / (algbw + u), (busbw + u) / (algbw - u)
        low = max(low, _ranks_for_factor(r_low / scale))
        high = min(high, _ranks_for_factor(r_high / scale))
        used += 1
    if not used:
        return None, "no row has a bandwidth large enough to read the busbw/algbw ratio"
    candidates = range(max(2, math.ceil(low - 1e-9)), math.floor(min(high, MAX_RATIO_RANKS) + 1e-9) + 1)
    if len(candidates) == 1:
        return candidates[0], f"busbw/algbw of {used} row(s) all give {candidates[0]} ranks"
    if not candidates:
        return None, f"busbw/algbw differs between rows (no single rank count fits all {used})"
    return None, f"busbw/algbw fits {len(candidates)} rank counts ({candidates[0]}..{candidates[-1]}) within print rounding"


def _ranks_for_factor(factor: float) -> float:
    """n with (n-1)/n == factor (``inf`` at or above 1); factors at or below 0 give 1."""
    if factor >= 1.0:
        return math.inf
    if factor <= 0.0:
        return 1.0
    return 1.0 / (1.0 - factor)
