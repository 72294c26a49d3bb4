"""Module-scoped fixtures of the figure and report tests (the same file is in tests/figures and tests/paper).

Drawing every figure takes seconds, so each module draws the sample database once and its
tests read the files; tests that need a database of their own still draw it themselves.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import collective_doc, training_doc, write_docs


@pytest.fixture(scope="module")
def reference_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference database built from the bundled public nccl-tests logs with the real collect."""
    from shardscope.figures.reference import build_reference_db

    folder = tmp_path_factory.mktemp("reference")
    build_reference_db(folder / "reference.duckdb", folder)
    return folder / "reference.duckdb"


@pytest.fixture(scope="module")
def module_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documents of tests/conftest.py's ``sample_docs`` (three ops, five strategies), loaded once per module."""
    from shardscope.results.store import collect

    docs = [collective_doc(op) for op in ("all_reduce", "all_gather", "reduce_scatter")]
    docs += [training_doc(s, step_time_s=0.02 * f) for s, f in
             (("ddp", 1.0), ("fsdp", 1.5), ("zero1", 1.05), ("zero2", 1.1), ("zero3", 1.6))]
    folder = tmp_path_factory.mktemp("module_db")
    collect(folder / "shardscope.duckdb", write_docs(folder / "inputs", docs))
    return folder / "shardscope.duckdb"


@pytest.fixture(scope="module")
def drawn(module_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every figure of ``module_db``, without reference runs (so every row is the database's own)."""
    from shardscope.figures.plots import draw_all

    out = tmp_path_factory.mktemp("figures")
    draw_all(module_db, out, bundled_reference=False)
    return out


@pytest.fixture(scope="module")
def drawn_with_reference(module_db: Path, reference_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every figure of ``module_db`` with the reference runs beside them."""
    from shardscope.figures.plots import draw_all

    out = tmp_path_factory.mktemp("figures_ref")
    draw_all(module_db, out, reference_db=reference_db)
    return out
