"""The CPU finding measured end to end: the pipeline with emulated fabrics on, and what its training runs say.

Runs ``snakemake --cores N`` with ``config/config.yaml`` and ``emulated.enabled: true`` (results in
a folder of its own; needs root, ``ip`` and ``tc``), or reads the results of such a run
(``--results DIR``), and prints per emulated condition (preset and placement) and strategy the
tokens/s (median over the repeats, with their 95% interval and min..max of the windows), the
ratio to DDP under the same condition, and the two checks of the finding (issue 17):

1. the sharded strategy's slowdown relative to DDP is larger on ``pcie_like`` than on ``fast``:
   ``sharded/ddp`` on ``pcie_like`` below ``sharded/ddp`` on ``fast``;
2. a 2-rank job inside one group of ``nvl_groups`` beats the same job across the groups.

It also checks that figure 4 (``speed_vs_ddp.png``) was drawn and that the database holds the
emulated conditions' runs it draws. The wall time of the pipeline is printed beside the target
(issue 17: under 15 minutes with emulated on). Exit status 1 when a check fails::

    nice .venv/bin/python benchmarks/emulated_finding.py [--cores 2] [--keep DIR] [--json OUT]
    .venv/bin/python benchmarks/emulated_finding.py --results DIR/results
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: The (preset, placement) of each emulated condition, as the planner labels training placements.
CONDITIONS = {"fast": "all@fast", "pcie_like": "all@pcie_like", "in_group": "in_group@nvl_groups",
              "across_groups": "across_groups@nvl_groups"}
SHARDED = ("fsdp", "zero3", "fsdp_grad_op", "zero2", "hsdp", "zero3_hpz")
TARGET_S = 15 * 60


def run_pipeline(cores: int, workdir: Path) -> tuple[float, Path]:
    """The pipeline with emulated fabrics on, results under ``workdir``; (wall seconds, results folder)."""
    results = workdir / "results"
    override = workdir / "emulated_on.yaml"
    override.write_text(json.dumps({"results": str(results), "db": str(results / "shardscope.duckdb"),
                                    "emulated": {"enabled": True}}))
    command = [sys.executable, "-m", "snakemake", "--cores", str(cores), "--configfile", "config/config.yaml", str(override)]
    start = time.monotonic()
    with open(workdir / "snakemake.log", "w", encoding="utf-8") as log:
        proc = subprocess.run(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - start
    if proc.returncode:
        sys.exit(f"emulated_finding: snakemake failed ({proc.returncode}); see {workdir / 'snakemake.log'}")
    return wall, results


def emulated_runs(results: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(condition, strategy) -> the numbers of its training result, for every emulated condition's run."""
    by_placement = {v: k for k, v in CONDITIONS.items()}
    out = {}
    for path in sorted((results / "training").glob("*.json")):
        doc = json.loads(path.read_text())
        job, summary = doc.get("job", {}), doc.get("summary") or {}
        condition = by_placement.get(f"{job.get('fabric_placement')}@{str(job.get('fabric', '')).removeprefix('emulated:')}")
        if condition is None:
            continue
        windows = [summary["tokens_per_step"] / t for t in _window_medians(doc)] if doc.get("outcome") == "ok" else []
        out[condition, job["strategy"]] = {
            "outcome": doc.get("outcome"), "tokens_per_s": summary.get("tokens_per_s"),
            "ci95": [summary.get("ci95_low_tokens_per_s"), summary.get("ci95_high_tokens_per_s")],
            "windows_tokens_per_s": windows, "median_step_time_s": summary.get("median_step_time_s"),
            "repeats": summary.get("repeats"), "bottleneck_mbit": job.get("fabric_bottleneck_mbit"),
            "comm_volume_bytes": ((summary.get("comm_bytes") or {}).get("measured") or {}).get("volume_bytes"),
            "file": str(path)}
    return out


def _window_medians(doc: dict[str, Any]) -> list[float]:
    """Median step time of each timed window (repeat)."""
    windows: dict[int, list[float]] = {}
    for step in doc.get("steps", []):
        windows.setdefault(int(step.get("repeat") or 0), []).append(float(step["step_time_s"]))
    return [statistics.median(v) for _, v in sorted(windows.items())]


def checks(runs: dict[tuple[str, str], dict[str, Any]]) -> list[tuple[str, bool, str]]:
    """The finding's two checks: (name, holds, the numbers behind it)."""
    def tps(condition: str, strategy: str) -> float | None:
        run = runs.get((condition, strategy))
        return run["tokens_per_s"] if run and run["outcome"] == "ok" else None

    out = []
    sharded = sorted({s for _, s in runs if s in SHARDED})
    for strategy in sharded:
        ratios = {}
        for condition in ("fast", "pcie_like"):
            mine, ddp = tps(condition, strategy), tps(condition, "ddp")
            ratios[condition] = mine / ddp if mine and ddp else None
        ok = None not in ratios.values() and ratios["pcie_like"] < ratios["fast"]
        out.append((f"{strategy}/ddp lower on pcie_like than on fast", ok,
                    f"fast {_fmt(ratios['fast'])}, pcie_like {_fmt(ratios['pcie_like'])}"))
    for strategy in sorted({s for c, s in runs if c == "in_group"}):
        inside, across = tps("in_group", strategy), tps("across_groups", strategy)
        ok = bool(inside and across and inside > across)
        out.append((f"{strategy} inside one nvl_groups group beats it across groups", ok,
                    f"in_group {_fmt(inside, '.0f')} tokens/s, across_groups {_fmt(across, '.0f')} tokens/s"
                    + (f", x{inside / across:.2f}" if inside and across else "")))
    return out


def figure_checks(results: Path) -> list[tuple[str, bool, str]]:
    """Figure 4 exists, and the database holds the emulated conditions' training runs it draws."""
    import duckdb

    png = next(iter(results.glob("**/speed_vs_ddp.png")), None)
    out = [("figure 4 drawn", png is not None and png.stat().st_size > 0, str(png))]
    db = results / "shardscope.duckdb"
    if db.exists():
        con = duckdb.connect(str(db), read_only=True)
        rows = con.execute("SELECT DISTINCT placement FROM training_runs WHERE placement LIKE '%@%' AND outcome = 'ok'").fetchall()
        con.close()
        placements = sorted(p for (p,) in rows)
        out.append(("database: at least two emulated conditions measured", len(placements) >= 2, ", ".join(placements)))
    return out


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def report(runs: dict[tuple[str, str], dict[str, Any]], found: list[tuple[str, bool, str]], wall: float | None) -> str:
    """The table and the checks as text."""
    lines = [f"{'condition':<15}{'strategy':<10}{'tokens/s':>10}{'95% CI':>22}{'windows min..max':>22}{'vs DDP':>8}"]
    for (condition, strategy), run in sorted(runs.items(), key=lambda kv: (list(CONDITIONS).index(kv[0][0]), kv[0][1])):
        ddp = runs.get((condition, "ddp"), {}).get("tokens_per_s")
        tps, (lo, hi), win = run["tokens_per_s"], run["ci95"], run["windows_tokens_per_s"]
        ci = f"{_fmt(lo, '.0f')}..{_fmt(hi, '.0f')}" if lo is not None else "-"
        spread = f"{min(win):.0f}..{max(win):.0f}" if win else "-"
        ratio = _fmt(tps / ddp if tps and ddp else None, ".2f")
        lines.append(f"{condition:<15}{strategy:<10}{_fmt(tps, '.0f'):>10}{ci:>22}{spread:>22}{ratio:>8}"
                     + ("" if run["outcome"] == "ok" else f"  ({run['outcome']})"))
    for name, ok, numbers in found:
        lines.append(f"{'holds' if ok else 'FAILS'}: {name} ({numbers})")
    if wall is not None:
        lines.append(f"pipeline with emulated on: {wall:.0f} s (target under {TARGET_S} s, ratio {wall / TARGET_S:.2f})")
    return "\n".join(lines)


def main() -> int:
    """Run (or read) and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="folder for the run (default: a temporary one, removed)")
    parser.add_argument("--results", type=Path, help="read this results folder of an emulated run instead of running")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    wall = None
    if args.results:
        results = args.results
        runs = emulated_runs(results)
        found = checks(runs) + figure_checks(results)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            workdir = args.keep or Path(tmp)
            workdir.mkdir(parents=True, exist_ok=True)
            wall, results = run_pipeline(args.cores, workdir)
            runs = emulated_runs(results)
            found = checks(runs) + figure_checks(results)
    print(report(runs, found, wall))
    if args.json:
        args.json.write_text(json.dumps({"wall_s": wall, "runs": {f"{c}/{s}": v for (c, s), v in runs.items()},
                                         "checks": [{"check": n, "holds": ok, "numbers": x} for n, ok, x in found]}, indent=1))
    return 0 if found and all(ok for _, ok, _ in found) else 1


if __name__ == "__main__":
    raise SystemExit(main())
