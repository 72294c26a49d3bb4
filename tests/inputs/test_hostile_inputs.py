"""Huge and deeply nested inputs to every reader (issue 35): one sentence and exit 2, before the cost grows."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardscope.cli import main
from shardscope.fileio import MAX_JSON_DEPTH, loads_bounded
from shardscope.errors import UserError
from shardscope.results.store import MAX_DOCUMENT_ROWS

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "config" / "config.yaml"
TOPOLOGY = REPO / "tests" / "data" / "topo" / "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt"

#: Every command that reads a JSON file it is given, as (name, argv for that file, tmp folder).
READERS = {
    "collect": lambda f, tmp: ["collect", "--db", str(tmp / "r.duckdb"), str(f)],
    "plan": lambda f, tmp: ["plan", "--topology", str(f), "--config", str(CONFIG)],
    "topology show": lambda f, tmp: ["topology", "show", str(f)],
    "topology parse": lambda f, tmp: ["topology", "parse", str(f), "--out", str(tmp / "t.json")],
    "verdict": lambda f, tmp: ["verdict", str(f)],
    "collectives report": lambda f, tmp: ["collectives", "report", str(f)],
    "collectives import": lambda f, tmp: ["collectives", "import", str(f), "--out", str(tmp / "c.json")],
}


def _one_sentence(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err and err.startswith("shardscope: error:")
    return err


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("opening", ["[", '{"kind": '])
def test_deep_nesting_is_one_sentence_in_every_reader(reader: str, opening: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / "deep.json"
    closing = "]" if opening == "[" else "}"
    deep.write_text(opening * 100_000 + "1" + closing * 100_000, encoding="utf-8")
    err = _one_sentence(capsys, READERS[reader](deep, tmp_path))
    assert str(deep) in err


def test_nesting_just_over_the_bound_is_refused_and_at_it_read() -> None:
    at = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert loads_bounded(at, "x") is not None
    with pytest.raises(UserError, match="nested more than"):
        loads_bounded("[" + at + "]", "x")


@pytest.mark.parametrize("row", ["{}", "1"])
def test_collect_refuses_more_rows_than_a_job_writes(row: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    rows = tmp_path / "rows.json"
    rows.write_text('{"kind": "training", "steps": [' + ",".join([row] * (MAX_DOCUMENT_ROWS + 1)) + "]}")
    err = _one_sentence(capsys, READERS["collect"](rows, tmp_path))
    assert f"more than {MAX_DOCUMENT_ROWS:,} rows" in err and not (tmp_path / "r.duckdb").exists()


def test_collect_refuses_an_over_size_file_before_reading_it(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as handle:
        handle.truncate(33 * 2**20)  # sparse: nothing is written, and reading it would take 33 MiB
    err = _one_sentence(capsys, READERS["collect"](huge, tmp_path))
    assert "over the 32 MiB limit" in err
