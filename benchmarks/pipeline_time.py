"""How long the default pipeline takes on this machine, per job kind, and a ZeRO job against a DDP job.

Runs ``snakemake --cores N`` with ``config/config.yaml`` (results in a temporary folder, nothing
of the repository's ``results/`` touched), reads each job's start and finish from Snakemake's
output, and prints:

- the pipeline's wall time, the CPU seconds of all its processes (user + system, from the
  kernel's accounting of the waited-for children: a measure that a loaded machine inflates far
  less than the wall time) and the load average before and after;
- per job kind (``train:ddp``, ``train:zero2``, ``collective:all_reduce``, ``plan``, ...): count,
  mean and total seconds;
- the ratio mean ZeRO training job / DDP training job (issue 21's target: at most 1.5 on CPU).

Timestamps are Snakemake's, to the second. Run it on an idle machine for the README's times; a
loaded machine gives longer ones (say so when quoting them)::

    nice .venv/bin/python benchmarks/pipeline_time.py [--cores 2] [--keep DIR] [--json OUT]
    .venv/bin/python benchmarks/pipeline_time.py --parse snakemake.log --plan results/plan/plan.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
_RULE = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")
_JOBID = re.compile(r"^\s+jobid: (\d+)$")
_WILDCARDS = re.compile(r"^\s+wildcards: .*\bjob=([^,\s]+)")
_FINISHED = re.compile(r"^Finished jobid: (\d+)")
ZERO = ("zero1", "zero2", "zero3")


def job_spans(log: str) -> list[dict[str, object]]:
    """Every finished job of a Snakemake log: rule, ``job`` wildcard, start and finish (datetime)."""
    stamp: dt.datetime | None = None
    started: dict[str, dict[str, object]] = {}
    current: dict[str, object] | None = None
    done = []
    for line in log.splitlines():
        if m := _STAMP.match(line):
            stamp = dt.datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")
        elif m := _RULE.match(line):
            current = {"rule": m.group(1), "start": stamp, "job": None}
        elif current is not None and (m := _WILDCARDS.match(line)):
            current["job"] = m.group(1)
        elif current is not None and (m := _JOBID.match(line)):
            started[m.group(1)] = current
        elif (m := _FINISHED.match(line)) and m.group(1) in started:
            span = dict(started.pop(m.group(1)), end=stamp)
            done.append(span)
    return done


def job_kinds(plan: dict[str, object]) -> dict[str, str]:
    """Job id -> kind (``train:<strategy>``, ``collective:<op>``, ``peer``) from a plan.json."""
    kinds: dict[str, str] = {}
    for section in (plan, plan.get("multi_node") or {}):
        for job in section.get("training", []):  # type: ignore[union-attr]
            kinds[job["job_id"]] = f"train:{job['strategy']}"
        for job in section.get("collectives", []):  # type: ignore[union-attr]
            kinds[job["job_id"]] = f"collective:{job['op']}"
    for job in plan.get("nccl_tests", []):  # type: ignore[union-attr]
        kinds[job["job_id"]] = "peer"
    return kinds


def per_kind(spans: list[dict[str, object]], kinds: dict[str, str]) -> dict[str, list[float]]:
    """Seconds of every job, grouped by kind (the rule name for jobs that are not planned measurements)."""
    out: dict[str, list[float]] = defaultdict(list)
    for span in spans:
        if span["start"] is None or span["end"] is None or span["rule"] == "all":
            continue
        kind = kinds.get(str(span["job"]), str(span["rule"])) if span["job"] else str(span["rule"])
        out[kind].append((span["end"] - span["start"]).total_seconds())  # type: ignore[operator]
    return dict(out)


def zero_over_ddp(times: dict[str, list[float]]) -> float | None:
    """Mean ZeRO-1/2/3 training job over the mean DDP training job, or None without both."""
    zero = [t for s in ZERO for t in times.get(f"train:{s}", [])]
    ddp = times.get("train:ddp", [])
    return statistics.mean(zero) / statistics.mean(ddp) if zero and ddp and statistics.mean(ddp) > 0 else None


def report(wall_s: float | None, times: dict[str, list[float]], usage: dict[str, object] | None = None) -> str:
    """The printed table (``usage``: CPU seconds and load averages of the run, see :func:`run_pipeline`)."""
    lines = [f"default pipeline wall time: {wall_s:.0f} s ({wall_s / 60:.1f} min)" if wall_s is not None
             else "default pipeline wall time: (not run here)"]
    if usage:
        lines.append(f"CPU seconds of every process: {usage['cpu_s']:.0f} (user {usage['user_s']:.0f}, system "
                     f"{usage['system_s']:.0f}); load average before {usage['load_before']}, after {usage['load_after']}")
    lines.append(f"{'job kind':<28}{'jobs':>5}{'mean s':>9}{'total s':>9}")
    for kind in sorted(times, key=lambda k: -sum(times[k])):
        values = times[kind]
        lines.append(f"{kind:<28}{len(values):>5}{statistics.mean(values):>9.1f}{sum(values):>9.0f}")
    ratio = zero_over_ddp(times)
    lines.append("ZeRO job / DDP job: " + (f"{ratio:.2f} (target <= 1.5 on CPU)" if ratio is not None else "n/a"))
    return "\n".join(lines)


def _load() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` prints them."""
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def run_pipeline(cores: int, workdir: Path) -> tuple[float, str, Path, dict[str, object]]:
    """Run the default pipeline with results in ``workdir``; (wall seconds, Snakemake's output, plan.json path,
    CPU seconds and load averages).

    The CPU seconds are those of Snakemake and every process below it that was waited for (the
    kernel adds a child's time to its parent's when the parent waits for it), so every job counts."""
    results = workdir / "results"
    command = [sys.executable, "-m", "snakemake", "--cores", str(cores), "--config", f"results={results}",
               f"db={results / 'shardscope.duckdb'}"]
    before, load_before = resource.getrusage(resource.RUSAGE_CHILDREN), _load()
    start = time.monotonic()
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        sys.exit(f"pipeline_time: snakemake failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    usage = {"cpu_s": user + system, "user_s": user, "system_s": system, "load_before": load_before, "load_after": _load()}
    return wall, proc.stderr, results / "plan" / "plan.json", usage


def main() -> int:
    """Run (or parse) and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=2, help="snakemake --cores (default 2)")
    parser.add_argument("--keep", type=Path, help="folder for the run's results (default: a temporary one, removed)")
    parser.add_argument("--parse", type=Path, help="read this Snakemake log instead of running the pipeline")
    parser.add_argument("--plan", type=Path, help="with --parse: the run's plan.json (job kinds)")
    parser.add_argument("--json", type=Path, help="also write the seconds per kind and the ratio to this file")
    args = parser.parse_args()
    usage: dict[str, object] | None = None
    if args.parse:
        wall, log, plan_path = None, args.parse.read_text(), args.plan
    else:
        with tempfile.TemporaryDirectory(prefix="pipeline_time.") as tmp:
            workdir = args.keep or Path(tmp)
            wall, log, plan_path, usage = run_pipeline(args.cores, workdir)
            plan = json.loads(plan_path.read_text())
            if args.keep:
                (workdir / "snakemake.log").write_text(log)  # for --parse later
    if args.parse:
        plan = json.loads(plan_path.read_text()) if plan_path else {}
    times = per_kind(job_spans(log), job_kinds(plan))
    print(report(wall, times, usage))
    if args.json:
        args.json.write_text(json.dumps({"wall_s": wall, "usage": usage, "seconds": times,
                                         "zero_over_ddp": zero_over_ddp(times)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
