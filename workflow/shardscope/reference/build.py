"""The reference database without Snakemake: the stage's commands (:mod:`shardscope.reference.steps`) run in-process."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

from shardscope.errors import UserError
from shardscope.results.reference_manifest import REFERENCE_DIR, load_manifest, load_modeled
from shardscope.fileio import atomic_write_json, loads_bounded
from shardscope.reference import steps


def _run(argv: list[str]) -> None:
    """Run one ``shardscope`` command; its error sentence becomes a UserError.

    What it printed (its summary line and the reader's notes) goes to stderr after the command
    line, so the stage's one log (the reference rule's) keeps what each step's own log used to."""
    import shlex
    import sys

    from shardscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    print(f"$ shardscope {shlex.join(argv)}\n{out.getvalue()}{err.getvalue()}", end="", file=sys.stderr, flush=True)
    if status != 0:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        raise UserError(lines[-1].removeprefix("shardscope: error: ") if lines else f"shardscope {argv[0]} exited {status}")


def build_reference_db(db: str | os.PathLike[str], docs_dir: str | os.PathLike[str],
                       folder: str | os.PathLike[str] = REFERENCE_DIR,
                       manifest: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Import every bundled log, judge it, model each fabric and ``collect`` it all into a fresh database ``db``.

    The same commands as the reference rules, written into ``docs_dir``. The database is built
    beside the target and renamed over it only when complete, so a failure leaves the previous
    one (or none) in place. Returns collect's summary with the counts of runs, verdicts and
    modeled fabrics (also written to ``manifest`` when given).
    """
    target, docs = Path(db), Path(docs_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    docs.mkdir(parents=True, exist_ok=True)
    inputs: list[str] = []
    runs, fabrics = load_manifest(folder), load_modeled(folder)
    for run in runs:
        document, verdicts = docs / steps.import_name(run), docs / steps.verdicts_name(run)
        _run(steps.import_command(run, folder, document))
        _run(steps.verdict_command(run, folder, document, verdicts))
        inputs += [str(document), str(verdicts)]
    for fabric in fabrics:
        modeled = docs / steps.modeled_name(fabric)
        _run(steps.modeled_command(fabric, folder, modeled))
        inputs.append(str(modeled))
    fresh = target.with_name(f".{target.name}.building")
    summary_file = docs / f".{target.name}.collect.json"
    fresh.unlink(missing_ok=True)
    try:
        _run(steps.collect_command(fresh, inputs, summary_file))
        os.replace(fresh, target)
        summary = loads_bounded(summary_file.read_text(encoding="utf-8"), summary_file)
    finally:
        fresh.unlink(missing_ok=True)
        fresh.with_name(fresh.name + ".lock").unlink(missing_ok=True)
        summary_file.unlink(missing_ok=True)
    summary.update(db=str(target), reference_runs=len(runs), verdicts=len(runs), modeled_fabrics=len(fabrics))
    if manifest:
        atomic_write_json(manifest, summary)
    return summary
