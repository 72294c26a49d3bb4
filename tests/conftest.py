"""Shared fixtures: a sample set of result documents and a database loaded from it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from factories import collective_doc, training_doc, write_docs


@pytest.fixture
def sample_docs() -> list[dict[str, Any]]:
    """A small but complete set: three ops and five strategies on one host."""
    docs = [collective_doc(op) for op in ("all_reduce", "all_gather", "reduce_scatter")]
    docs += [training_doc(s, step_time_s=0.02 * f) for s, f in
             (("ddp", 1.0), ("fsdp", 1.5), ("zero1", 1.05), ("zero2", 1.1), ("zero3", 1.6))]
    return copy.deepcopy(docs)


@pytest.fixture
def sample_db(tmp_path: Path, sample_docs: list[dict[str, Any]]) -> Path:
    """A database loaded from :func:`sample_docs` with the real collect."""
    from shardscope.results.store import collect

    db = tmp_path / "db" / "shardscope.duckdb"
    collect(db, write_docs(tmp_path / "inputs", sample_docs))
    return db
