"""Times are TIMESTAMP WITH TIME ZONE and JSON text is JSON (issue 33), and a database of the layout before keeps
every value when it is upgraded."""

from __future__ import annotations

import csv
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest
from factories import REPO, collective_doc, file_digest, query_db, training_doc, write_docs, write_json

from shardscope.errors import UserError
from shardscope.results.ddl import SCHEMA_VERSION, column_types, ddl
from shardscope.results.export import export_database
from shardscope.results.merge import merge
from shardscope.results.schemas import TABLES
from shardscope.results.store import collect, validate_frame

TIME, JSON = "TIMESTAMP WITH TIME ZONE", "JSON"
#: Every time and JSON column, named here (not derived from the schemas the code reads): the issue's list.
TIMES = {("runs", "measured_at"), ("doctor_findings", "checked_at"), ("step_calibrations", "created_at"),
         ("collective_calibration_checks", "created_at")}
JSONS = {("runs", "env_json"), ("training_runs", "settings_json"), ("training_runs", "deepspeed_config"),
         ("topologies", "source_json"), ("topologies", "topology_json"), ("verdicts", "hints_json"),
         ("verdicts", "notes_json"), ("verdicts", "nccl_env_json"), ("verdicts", "nccl_flags_json"),
         ("verdicts", "nccl_log_json"), ("doctor_findings", "details_json")}


def _inputs(tmp: Path, predictions: dict, verdicts: dict[str, str], doctor: dict) -> list[str]:
    """Documents that fill every table with a time or JSON column (calibrations are stored by hand)."""
    return [write_json(tmp / "predictions.json", predictions), verdicts["topology"], verdicts["gdr"], verdicts["nps4"],
            verdicts["verdicts"], write_json(tmp / "doctor.json", doctor),
            *write_docs(tmp / "jobs", [collective_doc(), training_doc("ddp"), training_doc("zero3", step_time_s=0.03)])]


def test_times_and_json_columns_have_their_types(tmp_path, predictions_doc, verdict_inputs, doctor_doc):
    db = tmp_path / "r.duckdb"
    collect(db, _inputs(tmp_path, predictions_doc, verdict_inputs, doctor_doc))
    found = dict(((t, c), d) for t, c, d in query_db(
        db, "SELECT table_name, column_name, data_type FROM information_schema.columns"))
    assert {key: found[key] for key in TIMES} == dict.fromkeys(TIMES, TIME)
    assert {key: found[key] for key in JSONS} == dict.fromkeys(JSONS, JSON)
    typed = {key for key, data_type in found.items() if data_type in (TIME, JSON)}
    assert typed == TIMES | JSONS
    named = {key for key in found if key[1].endswith(("_at", "_json"))}
    assert named <= TIMES | JSONS  # no time or JSON column left as text
    # DuckDB answers with times (datetime) and JSON (text that its JSON functions read)
    (at, host), = query_db(db, "SELECT measured_at, env_json->>'host' FROM runs WHERE kind = 'training' LIMIT 1")
    assert at == datetime(2026, 11, 29, tzinfo=UTC) and host == "hostA"
    out = tmp_path / "pq"
    export_database(db, out)
    runs = pq.read_schema(out / "runs.parquet")
    assert str(runs.field("measured_at").type) == "timestamp[us, tz=UTC]"
    assert str(runs.field("env_json").type) == "extension<arrow.json>"
    assert runs.field("env_json").metadata[b"description"]
    with duckdb.connect() as con:
        assert con.execute(f"SELECT typeof(env_json) FROM '{out / 'runs.parquet'}' LIMIT 1").fetchall() == [("JSON",)]
    export_database(db, tmp_path / "csv", "csv")  # CSV has no time type: the ISO text the documents carry
    with open(tmp_path / "csv" / "runs.csv", newline="") as handle:
        assert {row["measured_at"] for row in csv.DictReader(handle) if row["kind"] == "training"} == {
            "2026-11-29T00:00:00+00:00"}


@pytest.mark.parametrize("bad", ["yesterday", "2026-11-29T00:00:00", "2026-13-01T00:00:00+00:00"])
def test_a_time_without_its_zone_or_no_time_at_all_is_refused_in_one_sentence(tmp_path, bad):
    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "a", [training_doc("ddp")]))
    before = file_digest(db)
    doc = training_doc("zero2")
    doc["env"]["measured_at"] = bad
    (path,) = write_docs(tmp_path / "b", [doc])
    with pytest.raises(UserError) as info:
        collect(db, [path])
    assert str(info.value).splitlines()[1:] == [
        f"  {path}: table runs, row 0, column measured_at: failed must be an ISO 8601 time with its time zone, "
        f"such as 2026-11-29T00:00:00+00:00 (value {bad!r})"]
    assert file_digest(db) == before


def test_text_that_is_not_json_is_refused():
    _, problems = validate_frame("doctor_findings", [
        {"run_id": "r" * 16, "host": "h", "checked_at": "2026-11-29T00:00:00Z", "check_name": "acs", "status": "ok",
         "read": "", "concluded": "fine", "action": None, "explains": None, "details_json": "{not json"}], "where")
    assert problems == ["where: table doctor_findings, row 0, column details_json: failed must be JSON text "
                        "(value '{not json')"]


def _old_layout(db: Path, new: Path) -> None:
    """``db`` as main's code (layout 3) wrote it: the same DDL with every time and JSON column VARCHAR, and the rows
    of ``new`` with times as the ISO text documents carry (a few with other offsets, one without a zone, as layout 3
    accepted), JSON as its text."""
    retyped = re.compile(rf"\b({TIME}|{JSON})(?=[,)])")
    with duckdb.connect(str(db)) as con:
        for statement in ddl():
            if statement.startswith("CREATE TABLE"):
                statement = retyped.sub("VARCHAR", statement)
            con.execute(statement.replace(SCHEMA_VERSION, "shardscope.results/3"))
        con.execute(f"ATTACH '{new}' AS new (READ_ONLY)")
        con.execute("SET TimeZone = 'UTC'")
        for table in TABLES:
            times = [c for c, sql in column_types(table).items() if sql == TIME]
            replace = ", ".join(f"strftime({c}, '%Y-%m-%dT%H:%M:%S') || '+00:00' AS {c}" for c in times)
            con.execute(f"INSERT INTO {table} SELECT *{f' REPLACE ({replace})' if replace else ''} FROM new.{table}")
        training = con.execute("SELECT run_id FROM runs WHERE kind = 'training' ORDER BY run_id").fetchall()
        run_ids = [run_id for (run_id,) in training]
        for run_id, text in zip(run_ids, ("2026-11-30T01:02:03.456789+02:00", "2026-11-29T00:00:00Z")):
            con.execute("UPDATE runs SET measured_at = ? WHERE run_id = ?", [text, run_id])
        con.execute("UPDATE runs SET measured_at = '2026-11-28 05:00:00' WHERE kind = 'collectives'")
        con.execute("INSERT INTO collective_calibration_checks VALUES ('cal-1', '2026-01-01T00:00:00+00:00', ?, "
                    "'sweep', 'all_reduce', 3, 1.0, 0.1, 0.2, 1.2)", [run_ids[0]])
        assert {t for (t,) in con.execute("SELECT DISTINCT data_type FROM duckdb_columns() "
                                          "WHERE database_name = current_database()").fetchall()} >= {"VARCHAR"}


def _time(text: str | None) -> datetime | None:
    """A time as layout 3 read it: ISO 8601 text, UTC where it names no zone."""
    if text is None:
        return None
    at = datetime.fromisoformat(text)
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _order(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """DuckDB's ORDER BY ALL in Python: column by column, NULLs last."""
    return tuple((v is None, v) for v in row)


def _rows(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    with duckdb.connect(str(db), read_only=True) as con:
        con.execute("SET TimeZone = 'UTC'")
        return {table: con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall() for table in TABLES}


def test_a_database_of_the_layout_before_is_upgraded_in_place_and_keeps_every_value(
        tmp_path, predictions_doc, verdict_inputs, doctor_doc):
    new, old = tmp_path / "new.duckdb", tmp_path / "old.duckdb"
    collect(new, _inputs(tmp_path, predictions_doc, verdict_inputs, doctor_doc))
    _old_layout(old, new)
    before, digest = _rows(old), file_digest(old)
    assert all(before[t] for t in ("runs", "verdicts", "doctor_findings", "collective_calibration_checks"))

    # read-only commands work on it as it is, and leave it so
    from shardscope.figures.plots import draw_all

    from shardscope.paper.render import render_report

    draw_all(old, tmp_path / "figs")
    report = render_report(old, tmp_path / "figs", REPO / "paper" / "report.md", tmp_path / "report.html").read_text()
    assert "2026-11-28T05:00:00+00:00 and 2026-11-29T23:02:03.456789+00:00" in report  # first and last measured
    export_database(old, tmp_path / "pq")
    assert str(pq.read_schema(tmp_path / "pq" / "runs.parquet").field("measured_at").type) == "timestamp[us, tz=UTC]"
    merged = tmp_path / "merged.duckdb"
    assert merge(merged, [str(old)])["new_runs"] == len(before["runs"])  # into a new file, as the older layout is
    times = sorted((run[0], _time(run[5])) for run in before["runs"])
    assert query_db(merged, "SELECT run_id, measured_at FROM runs ORDER BY run_id") == times
    assert file_digest(old) == digest

    # collect upgrades it in place: the types of now, every stored value kept
    summary = collect(old, write_docs(tmp_path / "more", [training_doc("zero2", step_time_s=0.025)]))
    assert summary["new_runs"] == 1
    assert query_db(old, "SELECT value FROM shardscope_meta WHERE key = 'schema'") == [(SCHEMA_VERSION,)]
    types = {(t, c): d for t, c, d in query_db(old, "SELECT table_name, column_name, data_type FROM duckdb_columns()")}
    assert {k: types[k] for k in TIMES | JSONS} == {k: TIME if k in TIMES else JSON for k in TIMES | JSONS}
    after = _rows(old)
    (added,), = query_db(old, "SELECT run_id FROM runs WHERE job_id LIKE 'zero2%'")
    compared = 0
    for table in TABLES:
        kinds = [sql for sql in column_types(table).values()]
        expected = [tuple(_time(v) if sql == TIME else v for v, sql in zip(row, kinds)) for row in before[table]]
        assert [row for row in after[table] if added not in row] == sorted(expected, key=_order), table
        compared += len(expected)
    assert compared == sum(len(rows) for rows in before.values())
    (at,), = query_db(old, "SELECT measured_at FROM runs WHERE kind = 'collectives'")
    assert at == datetime(2026, 11, 28, 5, tzinfo=UTC)


def test_an_old_value_that_is_no_time_stops_the_upgrade_and_leaves_the_file_as_it_was(tmp_path):
    new, old = tmp_path / "new.duckdb", tmp_path / "old.duckdb"
    collect(new, write_docs(tmp_path / "in", [training_doc("ddp")]))
    _old_layout(old, new)
    with duckdb.connect(str(old)) as con:
        con.execute("UPDATE runs SET measured_at = 'yesterday'")
    digest = file_digest(old)
    refused = (r"column runs\.measured_at holds 'yesterday', which is not a time: the database cannot be upgraded to "
               r"shardscope\.results/4 \(nothing was changed\)")
    with pytest.raises(UserError, match=refused):
        collect(old, write_docs(tmp_path / "more", [training_doc("zero2")]))
    assert file_digest(old) == digest


def test_db_schema_shows_the_types(capsys):
    from shardscope.cli import main

    assert main(["db", "schema"]) == 0
    rows = {tuple(line.split()[:2]): line for line in capsys.readouterr().out.splitlines()}
    assert all(TIME in rows[key] for key in TIMES) and all(f" {JSON} " in rows[key] for key in JSONS)
    assert main(["db", "schema", "--sql"]) == 0
    assert "measured_at TIMESTAMP WITH TIME ZONE," in capsys.readouterr().out
