"""How planning, collect, figures and merge grow with jobs, documents and machines (issue 22's targets).

    nice .venv/bin/python benchmarks/scale.py [--from RESULTS] [--work DIR] [--only dag|collect|merge|figures]

Builds every input from one real pipeline run's result files (``--from``: a results folder
the default pipeline wrote; without it the default pipeline is run once into a temporary
folder with ``snakemake --cores 2``):

- a plan inflated to K jobs (the run's own jobs repeated under new job ids) for a dry-run DAG,
- N copies of the run's measured documents as new runs (a new measurement time each),
- H copies of the whole run as other machines (another host name in every document and in
  the topology), each collected into its own database; those databases are merged for the
  merge and figure measurements.

Each measurement runs in its own process and prints its wall time and that process's peak
resident memory, then the growth per 10x of the size and the target. Nothing is faked: every
number comes from running the project's own code here, in this run.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
MEASURED_DIRS = ("collectives", "training")


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("DS_ACCELERATOR", "cpu")
    return env


def measure(argv: list[str], cwd: Path = REPO) -> tuple[float, float, float]:
    """Run ``argv`` as one process: (wall seconds, CPU seconds, peak resident MB) of that process. Raises on failure.

    CPU seconds (user + system) are reported beside wall time because on a shared machine
    the wall time mostly measures the other processes.
    """
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=_child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{out.decode(errors='replace')[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def run_pipeline(work: Path) -> Path:
    """Run the default pipeline once into ``work/pipeline/results``; that folder."""
    results = work / "pipeline" / "results"
    config = work / "pipeline" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"results: {results}\ndb: {results / 'shardscope.duckdb'}\n")
    print(f"running the default pipeline into {results} (a few minutes) ...", flush=True)
    measure([PYTHON, "-m", "snakemake", "--cores", "2", "--configfile", str(config)])
    return results


def _shift(iso: str, seconds: int) -> str:
    return (datetime.fromisoformat(iso) + timedelta(seconds=seconds)).isoformat()


def measured_docs(results: Path) -> list[dict]:
    """The run's collective and training documents, as the workers wrote them."""
    docs = [json.loads(p.read_text()) for d in MEASURED_DIRS for p in sorted((results / d).glob("*.json"))]
    if not docs:
        raise SystemExit(f"{results}: no collectives/*.json or training/*.json; pass the results folder of a pipeline run")
    return docs


def as_new_runs(docs: list[dict], n: int, folder: Path) -> list[str]:
    """``n`` documents: the run's documents cycled, each copy measured ``i`` seconds later (a new run id)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        doc = copy.deepcopy(docs[i % len(docs)])
        doc["env"]["measured_at"] = _shift(doc["env"]["measured_at"], 1 + i // len(docs))
        path = folder / f"{i:05d}-{doc['job']['job_id']}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    return paths


def as_machine(results: Path, host: str, folder: Path) -> list[str]:
    """Every collectable file of the run as machine ``host`` (``node-NN``) wrote it: host names replaced, probed NN s later."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    topology = json.loads((results / "topology" / "topology.json").read_text())
    topology["source"]["host"] = host
    number = int(host.rsplit("-", 1)[-1])
    if topology["source"].get("probed_at"):  # each machine is probed by itself, at its own time
        topology["source"]["probed_at"] = _shift(topology["source"]["probed_at"], number)
    (folder / "topology.json").write_text(json.dumps(topology))
    paths.append(str(folder / "topology.json"))
    for doc in measured_docs(results):
        doc["env"]["host"] = host
        path = folder / f"{doc['kind']}-{doc['job']['job_id']}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    return paths


def inflated_results(results: Path, k: int, folder: Path) -> Path:
    """A copy of the run's plan with ``k`` planned jobs (its jobs repeated under new ids), their spec files and its topology."""
    plan = json.loads((results / "plan" / "plan.json").read_text())
    base = [("collectives", j) for j in plan["collectives"]] + [("training", j) for j in plan["training"]]
    inflated: dict[str, list[dict]] = {"collectives": [], "training": []}
    for i in range(k):
        kind, job = base[i % len(base)]
        job = copy.deepcopy(job)
        if i >= len(base):
            job["job_id"] = f"{job['job_id']}.k{i // len(base)}"
        inflated[kind].append(job)
    out = folder / "results"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(results / "topology", out / "topology")
    (out / "plan").mkdir(parents=True)
    for name in ("topology", "plan"):
        for p in (out / name).rglob("*"):
            os.utime(p)
    (out / "plan" / "plan.json").write_text(json.dumps({**plan, **inflated}))
    from shardscope.plan.jobs import write_job_files

    write_job_files({**plan, **inflated}, out / "plan" / "jobs")  # as the plan rule does: the job rules' inputs
    return out


def growth(points: list[tuple[int, float]]) -> str:
    """Factor per 10x of size between the smallest and largest point (1.0 flat, 10 linear, 100 quadratic)."""
    (n0, t0), (n1, t1) = points[0], points[-1]
    if t0 <= 0 or n1 == n0:
        return "n/a"
    return f"{(t1 / t0) ** (1 / math.log10(n1 / n0)):.1f}x per 10x"


def report(title: str, rows: list[tuple[int, float, float, float]], unit: str, target: str) -> None:
    print(f"\n{title}")
    for n, wall, cpu, rss in rows:
        print(f"  {n:>6} {unit:<10} wall {wall:8.2f} s   cpu {cpu:8.2f} s   peak {rss:7.0f} MB")
    print(f"  growth: wall {growth([(r[0], r[1]) for r in rows])}, cpu {growth([(r[0], r[2]) for r in rows])}, "
          f"memory {growth([(r[0], r[3]) for r in rows])}; target: {target}", flush=True)


def bench_dag(results: Path, work: Path, sizes: list[int]) -> None:
    rows = []
    for k in sizes:
        folder = work / f"dag{k}"
        out = inflated_results(results, k, folder)
        config = folder / "config.yaml"
        config.write_text(f"results: {out}\ndb: {out / 'shardscope.duckdb'}\n")
        rows.append((k, *measure([PYTHON, "-m", "snakemake", "-n", "--quiet", "--nolock", "--cores", "2", "--configfile", str(config)])))
    report("dry-run DAG (snakemake -n) of a plan with K jobs", rows, "jobs", "2000 jobs under 20 s")


def collect_cmd(db: Path, paths: list[str]) -> list[str]:
    """A process collecting ``paths`` into ``db`` in one call (what the pipeline does; the per-call target is retired)."""
    listing = db.with_suffix(".inputs")
    listing.write_text("\n".join(paths))
    code = ("import sys; from shardscope.results.store import collect; "
            "collect(sys.argv[1], open(sys.argv[2]).read().split())")
    return [PYTHON, "-c", code, str(db), str(listing)]


def bench_collect(results: Path, work: Path, sizes: list[int]) -> None:
    docs = measured_docs(results)
    rows = []
    for n in sizes:
        paths = as_new_runs(docs, n, work / f"docs{n}")
        rows.append((n, *measure(collect_cmd(work / f"collect{n}.duckdb", paths))))
    report("collect of N documents in one call (a fresh database)", rows, "documents", "1000 documents under 15 s")


def machine_databases(results: Path, work: Path, count: int) -> list[Path]:
    """One database per machine (the run copied under host ``node-NN``), collected by the project's own collect."""
    jobs = {}
    for i in range(count):
        db = work / "machines" / f"node-{i:02d}.duckdb"
        if not db.exists():
            jobs[str(db)] = as_machine(results, f"node-{i:02d}", work / "machines" / f"node-{i:02d}")
    if jobs:
        listing = work / "machines" / "inputs.json"
        listing.write_text(json.dumps(jobs))
        code = ("import json, sys; from shardscope.results.store import collect\n"
                "for db, paths in json.load(open(sys.argv[1])).items():\n    collect(db, paths)")
        measure([PYTHON, "-c", code, str(listing)])
    return [work / "machines" / f"node-{i:02d}.duckdb" for i in range(count)]


def bench_merge(dbs: list[Path], work: Path, sizes: list[int]) -> dict[int, Path]:
    rows, merged = [], {}
    for n in sizes:
        out = work / f"merged{n}.duckdb"
        out.unlink(missing_ok=True)
        rows.append((n, *measure([PYTHON, "-m", "shardscope", "db", "merge", str(out), *map(str, dbs[:n])])))
        merged[n] = out
    report("db merge of M databases (one machine each) into a new one", rows, "databases", "32 databases under 10 s")
    return merged


def bench_figures(merged: dict[int, Path], work: Path, reference: Path) -> None:
    rows = []
    for h, db in sorted(merged.items()):
        out = work / f"figures{h}"
        shutil.rmtree(out, ignore_errors=True)
        code = ("import sys; from pathlib import Path; from shardscope.figures.plots import draw_all; "
                "from shardscope.paper.render import render_report\n"
                "draw_all(sys.argv[1], Path(sys.argv[2]), reference_db=sys.argv[3])\n"
                "render_report(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[4]) / 'paper' / 'report.md', "
                "Path(sys.argv[2]) / 'report.html', reference_db=sys.argv[3])")
        rows.append((h, *measure([PYTHON, "-c", code, str(db), str(out), str(reference), str(REPO)])))
        widths = _png_widths(out)
        print(f"  {h} machines: widest figure {max(widths.values())} px ({max(widths, key=widths.get)})", flush=True)
    report("figures and report of a database of H machines", rows, "machines", "64 machines under 20 s and 600 MB; figures at most ~4000 px wide")


def _png_widths(folder: Path) -> dict[str, int]:
    import struct

    widths = {}
    for png in sorted(folder.glob("*.png")):
        with open(png, "rb") as handle:
            widths[png.name] = struct.unpack(">I", handle.read(24)[16:20])[0]
    return widths


@contextlib.contextmanager
def work_folder(given: str | None, prefix: str) -> Iterator[Path]:
    """The folder ``--work`` names (kept), else a temporary one removed afterwards, also on failure."""
    work = Path(given or tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    try:
        yield work
    finally:
        if not given:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Build the inputs, run every measurement, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="results", help="results folder of a default pipeline run (else one is run)")
    parser.add_argument("--work", help="folder for the generated inputs (default: a temporary one, removed)")
    parser.add_argument("--only", choices=["dag", "collect", "merge", "figures"], action="append")
    args = parser.parse_args(argv)
    only = set(args.only or ["dag", "collect", "merge", "figures"])
    with work_folder(args.work, "shardscope-scale.") as work:
        results = Path(args.results) if args.results else run_pipeline(work)
        print(f"inputs from {results}; work folder {work}", flush=True)
        if "dag" in only:
            bench_dag(results, work, [50, 500, 2000])
        if "collect" in only:
            bench_collect(results, work, [10, 100, 1000])
        if only & {"merge", "figures"}:
            dbs = machine_databases(results, work, 64)
            merged = bench_merge(dbs, work, [2, 8, 32])
            if "figures" in only:
                for h in (16, 64):
                    if h not in merged:
                        merged[h] = work / f"merged{h}.duckdb"
                        merged[h].unlink(missing_ok=True)
                        measure([PYTHON, "-m", "shardscope", "db", "merge", str(merged[h]), *map(str, dbs[:h])])
                reference = results / "reference" / "reference.duckdb"
                bench_figures({h: merged[h] for h in (2, 16, 64)}, work, reference)
    return 0


if __name__ == "__main__":
    sys.exit(main())
