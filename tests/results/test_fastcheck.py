"""results.fastcheck: pandera's checks run without pandera's per-column cost, never more lenient than pandera.

The frames are the rows collect builds from real documents: the factories' collective and
training documents, the H200 plan's predictions, the #293 verdicts, the doctor's findings
and the H200 topology (tests/results/conftest.py). A damaged frame is one of those with one
value replaced; whenever the fast path accepts it, pandera must accept it too, with the
same coerced frame.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pandera.errors
import pytest
from factories import collective_doc, training_doc, write_docs, write_json

from shardscope.results.documents import tables_from_document
from shardscope.results.documents_derived import link_judged_runs
from shardscope.results.fastcheck import passing, table_rule, validate
from shardscope.results.schemas import TABLES, columns
from shardscope.results.store import read_document

BAD_VALUES: tuple[Any, ...] = (None, math.nan, math.inf, -1, 0, "", "x" * 3, 1.5, True, -math.inf, 10**20)


@pytest.fixture
def frames(tmp_path: Path, predictions_doc, verdicts_doc, doctor_doc, h200_topology, verdict_inputs) -> dict[str, pd.DataFrame]:
    """Every table's rows as collect builds them from one document of each kind, before validation."""
    docs = [collective_doc("all_reduce"), collective_doc("all_gather"), training_doc("ddp"), training_doc("zero3")]
    paths = write_docs(tmp_path / "in", docs) + [write_json(tmp_path / f"{name}.json", doc) for name, doc in (
        ("predictions", predictions_doc), ("doctor", doctor_doc), ("verdicts", verdicts_doc), ("topology", h200_topology))]
    paths.append(verdict_inputs["gdr"])
    parsed = [(p, tables_from_document(read_document(p), p)) for p in paths]
    link_judged_runs(parsed)
    rows: dict[str, list[dict[str, Any]]] = {}
    for _, tables in parsed:
        for table, found in tables.items():
            rows.setdefault(table, []).extend(found)
    return {table: pd.DataFrame(found, columns=columns(table)) for table, found in rows.items() if found}


def _pandera(table: str, frame: pd.DataFrame) -> pd.DataFrame | None:
    try:
        return TABLES[table].validate(frame, lazy=True)
    except pandera.errors.SchemaErrors:
        return None


def test_every_table_is_read_into_rules():
    assert all(table_rule(table) is not None for table in TABLES)


def test_valid_frames_pass_and_come_out_as_pandera_returns_them(frames):
    assert len(frames) >= 15, sorted(frames)
    for table, frame in frames.items():
        fast = passing(table, frame)
        assert fast is not None, table
        pd.testing.assert_frame_equal(fast, TABLES[table].validate(frame, lazy=True))


def test_a_damaged_frame_the_fast_path_accepts_is_one_pandera_accepts(frames):
    """One bad value per column (the values cycle over the columns), and every table with its rows doubled."""
    accepted = refused = 0
    for table, frame in frames.items():
        frame = frame.head(2)  # two rows keep it fast; every check still sees the damaged row
        cases = [pd.concat([frame, frame], ignore_index=True)]
        for i, column in enumerate(frame.columns):
            damaged = frame.astype({column: object})
            damaged.at[0, column] = BAD_VALUES[i % len(BAD_VALUES)]
            cases.append(damaged)
        for case in cases:
            fast = passing(table, case)
            if fast is None:
                refused += 1
                continue
            accepted += 1
            expected = _pandera(table, case)
            assert expected is not None, (table, case.iloc[0].to_dict())
            pd.testing.assert_frame_equal(fast, expected)
    print(f"fast path: {accepted} damaged frames accepted (pandera agreed), {refused} refused")
    assert refused > 100 and accepted > 20  # both sides of the comparison are exercised


def test_validate_raises_pandera_errors_for_a_bad_frame(frames):
    frame = frames["collectives"].copy()
    frame.loc[0, "time_s"] = -1.0
    with pytest.raises(pandera.errors.SchemaErrors) as info:
        validate("collectives", frame)
    assert "time_s" in set(info.value.failure_cases["column"])
    with pytest.raises(pandera.errors.SchemaErrors):
        validate("collectives", frame.drop(columns=["time_s"]))
