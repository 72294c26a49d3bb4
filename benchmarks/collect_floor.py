"""What loading documents one collect call at a time costs, by three ways of writing the DuckDB file (issue 22).

    nice .venv/bin/python benchmarks/collect_floor.py [--from RESULTS] [--documents 100] [--repeats 5] [--work DIR]

Issue 22 asks that loading files one call at a time stays within 2x of one call with all of
them. This measures, side by side in one run, one process per line (CPU seconds of that
process, interpreter start and imports included, as ``benchmarks/scale.py`` counts them):

- one ``collect`` of all N documents (the reference);
- N ``collect`` calls of one document each (what the project ships: each call validates,
  then loads into a private copy of the database, commits and checkpoints it, syncs it and
  renames it over the database, so a reader in another process always opens a whole file
  and a failure leaves the database byte for byte as it was);
- N calls that validate as ``collect`` does (``validate_inputs``) and then write the same rows
  the same way except for how the file is written:

  * ``in place``: attach the database itself, commit, checkpoint, detach (no copy; but while
    a call runs no other process can open the file: DuckDB locks it);
  * ``kept attached``: the database stays attached between calls and a call only commits
    to DuckDB's write-ahead log (the file is locked for the whole life of the process and
    holds the rows only once the process ends);
  * ``validation only``: no write at all, the floor under every way of writing.

Each repeat runs the reference and every way once, in turn, each on a fresh copy of the
starting database, so a machine that drifts slows them alike; a way's ratio is taken against
the reference of its own repeat. Each line prints the median ratio over the repeats with its
range (one run on a shared machine moved ratios by a third), and the median CPU milliseconds
per call of validation and of the write. The alternatives exist only here, to show what the 2x target
would cost; the project does not use them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import PYTHON, collect_cmd, as_new_runs, measure, measured_docs, run_pipeline, work_folder  # noqa: E402

METHODS = ("collect", "in_place", "kept_attached", "validation_only")
LABELS = {"collect": "collect per call (copy and rename; shipped)", "in_place": "validate + write in place",
          "kept_attached": "validate + write, kept attached", "validation_only": "validate only (no write)"}


def _write_rows(con, frames: dict) -> None:
    """The rows of one validated document in one transaction, with the run-id lookup collect makes first."""
    from shardscope.results import store

    con.execute("BEGIN TRANSACTION")
    store.stored_keys(con, "runs", "run_id", set(frames["runs"].column("run_id").to_pylist()), "content_digest")
    for table, rows in frames.items():
        store.insert_frame(con, table, rows)
    con.execute("COMMIT")


def child(method: str, db: str, listing: str) -> None:
    """Load every document of ``listing`` into ``db`` one call at a time by ``method``; per-call CPU ms to ``db``.per_call.json."""
    import duckdb

    from shardscope.results import store

    paths = Path(listing).read_text().split()
    validate_s = write_s = 0.0
    host = duckdb.connect() if method in ("in_place", "kept_attached") else None  # collect has its own
    if host is not None:
        host.execute("SET threads = 1")
    if method == "kept_attached":
        host.execute(f"ATTACH '{db}' AS target")
        host.execute("USE target")
    for path in paths:
        start = time.process_time()
        if method == "collect":
            store.collect(db, [path])
            write_s += time.process_time() - start
            continue
        frames, errors = store.validate_inputs([path])
        if errors:
            raise SystemExit("\n".join(errors))
        validated = time.process_time()
        validate_s += validated - start
        if method == "in_place":
            host.execute(f"ATTACH '{db}' AS target")
            host.execute("USE target")
            _write_rows(host, frames)
            host.execute("CHECKPOINT target")
            host.execute("USE memory")
            host.execute("DETACH target")
        elif method == "kept_attached":
            _write_rows(host, frames)
        write_s += time.process_time() - validated
    if host is not None:
        host.close()
    n = len(paths)
    Path(db + ".per_call.json").write_text(json.dumps({"validate_ms": 1000 * validate_s / n, "write_ms": 1000 * write_s / n}))


def _child_cmd(*args: str) -> list[str]:
    return [PYTHON, str(Path(__file__).resolve()), "--child", *args]


def main(argv: list[str] | None = None) -> int:
    """Build the documents and a starting database, run each way in its own process, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="results", help="results folder of a default pipeline run (else one is run)")
    parser.add_argument("--documents", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5, help="runs of the reference and of every way, in turn")
    parser.add_argument("--work", help="folder for the generated inputs (default: a temporary one, removed)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    with work_folder(args.work, "shardscope-collect-floor.") as work:
        results = Path(args.results) if args.results else run_pipeline(work)
        paths = as_new_runs(measured_docs(results), args.documents + 1, work / "docs")
        base = work / "base.duckdb"
        base.unlink(missing_ok=True)
        measure(collect_cmd(base, paths[:1]) + ["all"])
        listing = work / "inputs.txt"
        listing.write_text("\n".join(paths[1:]))
        print(f"{args.documents} documents from {results}, each loaded into a database that starts with one run; CPU seconds"
              f" of each process (interpreter start and imports included), median [range] over {args.repeats} repeats",
              flush=True)
        one_call: list[float] = []
        ratios: dict[str, list[float]] = {m: [] for m in METHODS}
        per_call: dict[str, list[dict[str, float]]] = {m: [] for m in METHODS}
        for _ in range(args.repeats):
            reference_db = work / "one-call.duckdb"
            shutil.copy2(base, reference_db)
            one_call.append(measure(collect_cmd(reference_db, paths[1:]) + ["all"])[1])
            for method in METHODS:
                db = work / f"{method}.duckdb"
                shutil.copy2(base, db)
                ratios[method].append(measure(_child_cmd(method, str(db), str(listing)))[1] / one_call[-1])
                per_call[method].append(json.loads(Path(f"{db}.per_call.json").read_text()))
        print(f"  {'one collect of all documents (reference)':46s} cpu {median(one_call):5.2f} s "
              f"[{min(one_call):.2f}-{max(one_call):.2f}]", flush=True)
        for method in METHODS:
            ms = {k: median(run[k] for run in per_call[method]) for k in ("validate_ms", "write_ms")}
            split = (f"{ms['write_ms']:5.1f} ms in all" if method == "collect" else
                     f"{ms['validate_ms']:5.1f} ms validation + {ms['write_ms']:5.1f} ms writing")
            r = ratios[method]
            print(f"  {LABELS[method]:46s} {median(r):4.1f}x [{min(r):.1f}-{max(r):.1f}]   per call: {split}", flush=True)
        print("  target: within 2x of the reference", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
