"""Which runs the figures and the report draw: those of the current plan (default), or every run (history).

The database keeps every run ever collected, so a strategy removed from the config, or a result measured
before a re-plan, would otherwise be drawn beside this plan's (issue 32). The current plan's runs are those
of the result files the latest collect was given (its manifest, results/db/collect.json, lists them: the
plan's every result file, measured, modeled and diagnosed), the newest load of each file. ``--runs all``
draws the whole history instead; a database without a manifest beside it is drawn whole, and the page says so.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from shardscope.errors import UserError

#: The values of ``--runs`` of ``shardscope figures`` and ``shardscope paper``.
RUN_CHOICES = ("current", "all")


@dataclass(frozen=True)
class RunSelection:
    """The runs to draw: ``inputs`` are the source files of the current plan's runs (None: every run), and
    ``description`` the sentence the figures index and the report print about it."""

    inputs: tuple[str, ...] | None
    description: str


def default_manifest(db: str | os.PathLike[str]) -> Path:
    """Where the pipeline's collect writes its manifest for ``db`` (config ``db`` results/shardscope.duckdb:
    results/db/collect.json)."""
    return Path(db).parent / "db" / "collect.json"


def select_runs(db: str | os.PathLike[str], runs: str = "current",
                manifest: str | os.PathLike[str] | None = None) -> RunSelection:
    """The runs of ``runs`` (one of :data:`RUN_CHOICES`) in ``db``: the current plan's from ``manifest`` (default
    :func:`default_manifest`), or all of them; a missing default manifest selects all, and says so."""
    if runs not in RUN_CHOICES:
        raise UserError(f"--runs {runs}: expected one of {', '.join(RUN_CHOICES)}")
    if runs == "all":
        return RunSelection(None, "Every run in the database is drawn (history, --runs all), older runs and runs of "
                                  "strategies no longer configured included.")
    path = Path(manifest) if manifest is not None else default_manifest(db)
    if not path.is_file():
        if manifest is not None:
            raise UserError(f"{path}: collect manifest not found; run the pipeline, or pass --runs all")
        return RunSelection(None, f"Every run in the database is drawn: no collect manifest ({path}) says which runs "
                                  "the current plan has.")
    try:
        inputs = json.loads(path.read_text())["inputs"]
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{path}: not a collect manifest (expected JSON with a list 'inputs')") from None
    return RunSelection(tuple(str(p) for p in inputs),
                        f"The runs of the current plan are drawn: the newest run of each of the {len(inputs)} result "
                        f"files the latest collect loaded ({path}); `--runs all` draws every run in the database.")
