"""A corpus of bad inputs: each gets one clear message naming file, row and column, and the database stays byte-for-byte."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest
from factories import collective_doc, file_digest, training_doc, write_docs

from shardscope.cli import main
from shardscope.errors import UserError
from shardscope.results.store import collect


@pytest.fixture(scope="module")
def good_db(tmp_path_factory) -> Path:
    """A database already holding runs, which no bad input may change."""
    tmp = tmp_path_factory.mktemp("good")
    db = tmp / "r.duckdb"
    collect(db, write_docs(tmp / "in", [collective_doc("all_reduce"), training_doc("ddp"), training_doc("zero3")]))
    return db


def _coll(edit: Callable[[dict[str, Any]], Any]) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        doc = collective_doc("all_gather", host="hostBad")
        edit(doc)
        return doc
    return build


def _train(edit: Callable[[dict[str, Any]], Any]) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        doc = training_doc("zero2", host="hostBad")
        edit(doc)
        return doc
    return build


def _set(container: Callable[[dict[str, Any]], dict[str, Any]], key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda doc: container(doc).__setitem__(key, value)


def _row(i: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda doc: doc["rows"][i]


def _dup_row(doc: dict[str, Any]) -> None:
    doc["rows"][2] = copy.deepcopy(doc["rows"][1])


def _all_ops(op: str) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        doc["job"]["op"] = op
        for row in doc["rows"]:
            row["op"] = op
    return edit


# (case id, document builder, text expected in the error); {path} is replaced by the file's path.
DOCUMENT_CASES: list[tuple[str, Callable[[], dict[str, Any]], str]] = [
    ("size as string", _coll(_set(_row(1), "size_bytes", "16384")),
     "{path}: field rows[1].size_bytes: '16384' is not of type 'integer'"),
    ("fractional size", _coll(_set(_row(1), "size_bytes", 16384.5)),
     "{path}: field rows[1].size_bytes: 16384.5 is not of type 'integer'"),
    ("boolean as string", _coll(_set(_row(0), "in_place", "yes")),
     "{path}: field rows[0].in_place: 'yes' is not of type 'boolean'"),
    ("time null", _coll(_set(_row(2), "time_s", None)),
     "{path}: field rows[2].time_s: None is not of type 'number'"),
    ("NaN time", _coll(_set(_row(2), "time_s", math.nan)),
     "{path}: table collectives, row 2, column time_s: failed not_nullable"),
    ("infinite time", _coll(_set(_row(2), "time_s", math.inf)),
     "{path}: table collectives, row 2, column time_s: failed must be a finite number (value inf)"),
    ("negative time", _coll(_set(_row(3), "time_s", -1e-3)),
     "{path}: table collectives, row 3, column time_s: failed greater_than(0) (value -0.001)"),
    ("zero time", _coll(_set(_row(0), "time_s", 0.0)),
     "{path}: table collectives, row 0, column time_s: failed greater_than(0) (value 0.0)"),
    ("zero size", _coll(_set(_row(0), "size_bytes", 0)),
     "{path}: table collectives, row 0, column size_bytes: failed greater_than(0) (value 0)"),
    ("missing row field", _coll(lambda doc: doc["rows"][0].pop("time_s")),
     "{path}: field rows[0]: 'time_s' is a required property"),
    ("missing rows", _coll(lambda doc: doc.pop("rows")),
     "{path}: field (top level): 'rows' is a required property"),
    ("missing job field", _train(lambda doc: doc["job"].pop("strategy")),
     "{path}: field job: 'strategy' is a required property"),
    ("extra column", _coll(_set(_row(1), "bogus_s", 1.0)),
     "{path}: field rows[1]: Additional properties are not allowed ('bogus_s' was unexpected)"),
    ("rows not a list", _coll(lambda doc: doc.__setitem__("rows", 5)),
     "{path}: field rows: 5 is not of type 'array'"),
    ("no rows", _coll(lambda doc: doc.__setitem__("rows", [])),
     "{path}: field rows: is empty; expected at least one row"),
    ("job not an object", _train(lambda doc: doc.__setitem__("job", "ddp")),
     "{path}: field job: 'ddp' is not of type 'object'"),
    ("unsupported version", _coll(lambda doc: doc.__setitem__("schema", "shardscope.collectives/9")),
     "{path}: field schema: 'shardscope.collectives/9' is not a supported version; expected 'shardscope.collectives/1'"),
    ("duplicated size", _coll(_dup_row),
     "{path}: table collectives, row 2, columns run_id, size_bytes, in_place: duplicated key (another row has the same values)"),
    ("busbw inconsistent", _coll(lambda doc: doc["rows"][3].__setitem__("busbw_gbps", doc["rows"][3]["busbw_gbps"] * 2)),
     "{path}: table collectives, row 3, column (row check): failed busbw_gbps must equal algbw_gbps times the op's nccl-tests factor"),
    ("algbw inconsistent", _coll(lambda doc: doc["rows"][0].__setitem__("algbw_gbps", 1000.0)),
     "{path}: table collectives, row 0, column (row check): failed algbw_gbps must equal size_bytes / time_s / 1e9"),
    ("slowest rank faster than mean", _coll(lambda doc: doc["rows"][1].__setitem__("time_max_s", doc["rows"][1]["time_s"] / 2)),
     "{path}: table collectives, row 1, column (row check): failed time_max_s (slowest rank) must not be below time_s"),
    ("unknown op", _coll(_all_ops("all_reduce_v2")),
     "{path}: table collectives, row 0, column op: failed isin("),
    ("row world size differs from job", _coll(_set(_row(0), "world_size", 4)),
     "{path}: field rows[0].world_size: 4 differs from job.world_size 2"),
    ("unknown strategy", _train(_set(lambda doc: doc["job"], "strategy", "zero9")),
     "{path}: table training_runs, row 0, column strategy: failed isin("),
    ("unknown outcome", _train(lambda doc: doc.__setitem__("outcome", "exploded")),
     "{path}: table training_runs, row 0, column outcome: failed isin("),
    ("world size zero", _train(_set(lambda doc: doc["job"], "world_size", 0)),
     "{path}: table runs, row 0, column world_size: failed greater_than_or_equal_to(1) (value 0)"),
    ("ok run without measurements", _train(lambda doc: doc.__setitem__("summary", {})),
     "{path}: table training_runs, row 0, column (row check): failed a run with outcome ok must have a step time"),
    ("throughput inconsistent", _train(lambda doc: doc["summary"].__setitem__("tokens_per_s", 1.0)),
     "{path}: table training_runs, row 0, column (row check): failed tokens_per_s must equal micro_batch * grad_accum * seq_len * world_size / median_step_time_s"),
    ("negative step time", _train(lambda doc: doc["steps"][1].__setitem__("step_time_s", -0.5)),
     "{path}: table training_steps, row 1, column step_time_s: failed greater_than(0) (value -0.5)"),
    ("duplicated step", _train(lambda doc: doc["steps"][2].__setitem__("step", 0)),
     "{path}: table training_steps, row 2, columns run_id, step: duplicated key"),
    ("rank outside the job", _train(lambda doc: doc["ranks"][1].__setitem__("rank", 2)),
     "{path}: field ranks[1].rank: 2 is not a rank of a job on 2 ranks"),
    ("negative bytes", _train(lambda doc: doc["ranks"][0].__setitem__("grad_bytes", -4)),
     "{path}: table training_memory, row 0, column grad_bytes: failed greater_than_or_equal_to(0) (value -4)"),
    ("mfu above one", _train(lambda doc: doc["summary"].__setitem__("mfu", 1.5)),
     "{path}: table training_runs, row 0, column mfu: failed less_than_or_equal_to(1) (value 1.5)"),
    ("time that is not a time", _train(lambda doc: doc["env"].__setitem__("measured_at", "yesterday")),
     "{path}: table runs, row 0, column measured_at: failed must be an ISO 8601 time"),
    ("unknown training dtype", _train(_set(lambda doc: doc["job"], "dtype", "float8")),
     "{path}: table training_runs, row 0, column dtype: failed isin("),
]


def _dump(folder: Path, docs: list[Any]) -> list[str]:
    """Write documents as they are (even ones without a job), one numbered file each."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, doc in enumerate(docs):
        path = folder / f"{i:02d}-bad.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    return paths


def _assert_refused(db: Path, paths: list[str], expected: list[str]) -> str:
    before = file_digest(db)
    with pytest.raises(UserError) as info:
        collect(db, paths)
    message = str(info.value)
    for text in expected:
        assert text in message, message
    assert "nothing was loaded" in message.splitlines()[0]
    assert file_digest(db) == before
    assert sorted(p.name for p in db.parent.iterdir() if p.name.startswith(".")) == []  # no temporary copy left
    return message


@pytest.mark.parametrize(("build", "expected"), [c[1:] for c in DOCUMENT_CASES], ids=[c[0] for c in DOCUMENT_CASES])
def test_a_bad_document_is_refused_with_a_clear_message(good_db, tmp_path, build, expected):
    (path,) = _dump(tmp_path, [build()])
    _assert_refused(good_db, [path], [expected.format(path=path)])


FILE_CASES: list[tuple[str, Callable[[Path], Path], str]] = [
    ("truncated JSON", lambda d: _write(d / "t.json", json.dumps(collective_doc())[:-40]), "{path}: not valid JSON (line 1"),
    ("empty file", lambda d: _write(d / "e.json", ""), "{path}: not valid JSON (line 1, column 1"),
    ("not results at all", lambda d: _write(d / "x.json", '{"hello": "world"}'), "{path}: not a shardscope result file"),
    ("a JSON list", lambda d: _write(d / "l.json", "[1, 2, 3]"), "{path}: not a shardscope result file"),
    ("unknown kind", lambda d: _write(d / "k.json", '{"kind": "weather", "rows": []}'), "{path}: not a shardscope result file"),
    ("binary file", lambda d: _write_bytes(d / "b.json", b"\x89PNG\r\n\x1a\n\xff\xfe\x00"), "{path}: not a text file"),
    ("a directory", lambda d: _mkdir(d / "folder.json"), "{path}: is a directory"),
    ("a missing file", lambda d: d / "missing.json", "{path}: file not found"),
]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in FILE_CASES], ids=[c[0] for c in FILE_CASES])
def test_a_file_that_is_not_a_result_is_refused(good_db, tmp_path, make, expected):
    path = make(tmp_path)
    _assert_refused(good_db, [str(path)], [expected.format(path=path)])


def test_every_problem_of_every_file_comes_in_one_pass(good_db, tmp_path):
    docs = [case[1]() for case in DOCUMENT_CASES]
    paths = _dump(tmp_path / "bad", docs) + [str(case[1](tmp_path)) for case in FILE_CASES]
    expected = [case[2].format(path=p) for case, p in zip(DOCUMENT_CASES + FILE_CASES, paths)]
    message = _assert_refused(good_db, paths, expected)
    count = int(message.split(" ", 1)[0])
    assert count >= len(paths)


def test_the_same_run_with_different_contents_is_refused(good_db, tmp_path):
    first = training_doc("ddp", host="hostTwin")
    second = copy.deepcopy(first)
    second["summary"]["peak_memory_bytes"] += 1
    a, b = write_docs(tmp_path, [first, second])
    _assert_refused(good_db, [a, b], [f"{b}: describes the same run as {a}"])


def test_identical_copies_of_one_result_load_once(tmp_path):
    doc = training_doc("ddp", host="hostTwin")
    db = tmp_path / "r.duckdb"
    summary = collect(db, write_docs(tmp_path / "a", [doc]) + write_docs(tmp_path / "b", [doc]))
    assert summary["new_runs"] == 1
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM training_steps").fetchone()[0] == 3


def test_a_database_path_that_is_not_a_database_is_refused_untouched(tmp_path):
    not_db = tmp_path / "results.json"
    not_db.write_text('{"a": 1}')
    before = file_digest(not_db)
    with pytest.raises(UserError, match=r"results.json: exists but is not a DuckDB database file"):
        collect(not_db, write_docs(tmp_path / "in", [training_doc()]))
    assert file_digest(not_db) == before


def test_a_foreign_duckdb_database_is_refused_untouched(tmp_path):
    foreign = tmp_path / "other.duckdb"
    with duckdb.connect(str(foreign)) as con:
        con.execute("CREATE TABLE customers (id INTEGER, name VARCHAR)")
        con.execute("CREATE TABLE runs (run_id VARCHAR, colour VARCHAR)")
    before = file_digest(foreign)
    with pytest.raises(UserError) as info:
        collect(foreign, write_docs(tmp_path / "in", [training_doc()]))
    message = str(info.value)
    assert message.startswith(f"{foreign}: not a shardscope results database this version reads:")
    assert "table 'customers' is not a shardscope table" in message
    assert "table runs has column 'colour', which the shardscope schema does not have" in message
    assert file_digest(foreign) == before


def test_the_command_line_prints_one_error_and_exits_2(good_db, tmp_path, capsys):
    bad = DOCUMENT_CASES[0][1]()
    (path,) = _dump(tmp_path, [bad])
    before = file_digest(good_db)
    assert main(["collect", "--db", str(good_db), path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("shardscope: error: 1 problem(s) in the inputs; nothing was loaded:")
    assert f"{path}: field rows[1].size_bytes" in err and "Traceback" not in err
    assert file_digest(good_db) == before


def test_a_file_with_many_problems_is_summarised(good_db, tmp_path):
    doc = collective_doc("all_reduce", host="hostMany")
    doc["rows"] = [dict(doc["rows"][0], size_bytes=1024 * (i + 1), time_s=-1.0) for i in range(40)]
    (path,) = _dump(tmp_path, [doc])
    message = _assert_refused(good_db, [path], [f"{path}: … and"])
    assert len(message.splitlines()) <= 2 + 25
