"""The results store: validation of every input at once, one-transaction loads, idempotence."""

from __future__ import annotations

import json
import multiprocessing
import re
from pathlib import Path

import duckdb
import pytest
from factories import collective_doc, file_digest, query_db, training_doc, write_docs

from shardscope.errors import UserError
from shardscope.results.store import collect, ddl


def test_collect_loads_every_table(tmp_path, sample_docs):
    db = tmp_path / "r.duckdb"
    summary = collect(db, write_docs(tmp_path / "in", sample_docs))
    assert summary["new_runs"] == len(sample_docs)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 8
        assert con.execute("SELECT count(*) FROM collectives").fetchone()[0] == 12
        assert sorted(r[0] for r in con.execute("SELECT strategy FROM training_runs").fetchall()) == ["ddp", "fsdp", "zero1", "zero2", "zero3"]
        assert con.execute("SELECT count(*) FROM training_memory").fetchone()[0] == 10
        assert con.execute("SELECT count(*) FROM training_steps").fetchone()[0] == 15


def test_collecting_the_same_files_twice_adds_nothing(tmp_path, sample_docs):
    db = tmp_path / "r.duckdb"
    paths = write_docs(tmp_path / "in", sample_docs)
    collect(db, paths)
    second = collect(db, paths)
    assert second["new_runs"] == 0 and second["skipped_runs"] == len(sample_docs)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM collectives").fetchone()[0] == 12


def test_new_runs_accumulate_next_to_old_ones(tmp_path):
    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "a", [training_doc("ddp", measured_at="2026-01-01T00:00:00+00:00")]))
    collect(db, write_docs(tmp_path / "b", [training_doc("ddp", measured_at="2026-02-01T00:00:00+00:00"),
                                             training_doc("ddp", host="hostB")]))
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT host, measured_at FROM runs ORDER BY host, measured_at").fetchall()
    assert len(rows) == 3 and {h for h, _ in rows} == {"hostA", "hostB"}


def test_every_error_is_reported_at_once_and_the_database_is_untouched(tmp_path, sample_docs):
    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "good", sample_docs))
    before = file_digest(db)
    bad_bw = collective_doc("all_gather", host="hostC")
    bad_bw["rows"][1]["busbw_gbps"] *= 3  # inconsistent with algbw and the factor
    bad_time = training_doc("zero2", host="hostC")
    bad_time["steps"][0]["step_time_s"] = -1.0
    bad_strategy = training_doc("ddp", host="hostD")
    bad_strategy["job"]["strategy"] = "zero9"
    paths = write_docs(tmp_path / "bad", [bad_bw, bad_time, bad_strategy, collective_doc("broadcast", host="hostC")])
    (tmp_path / "bad" / "junk.json").write_text("{not json")
    with pytest.raises(UserError) as info:
        collect(db, [*paths, str(tmp_path / "bad" / "junk.json")])
    message = str(info.value)
    assert f"{paths[0]}: table collectives, row 1, column (row check): failed busbw_gbps must equal" in message
    assert f"{paths[1]}: table training_steps, row 0, column step_time_s: failed greater_than(0) (value -1.0)" in message
    assert "strategy" in message and paths[2] in message
    assert "junk.json: not valid JSON" in message
    assert message.startswith("4 problem(s)")
    assert file_digest(db) == before


def test_a_failure_inside_the_load_leaves_the_database_as_it_was(tmp_path, sample_docs, monkeypatch):
    from shardscope.results import store

    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "good", sample_docs[:2]))
    before = file_digest(db)

    def explode(con, frames, *looked_up):
        con.execute("DELETE FROM runs")
        raise RuntimeError("disk full")

    monkeypatch.setattr(store, "_load", explode)
    with pytest.raises(RuntimeError):
        collect(db, write_docs(tmp_path / "more", sample_docs[2:]))
    assert file_digest(db) == before
    assert sorted(p.name for p in db.parent.iterdir()) == sorted(["r.duckdb", "r.duckdb.lock", "good", "more"])


def test_loads_in_one_process_leave_nothing_behind_after_a_failure(tmp_path, sample_docs, monkeypatch):
    """A failed load leaves neither its copy nor its rows nor a temp table behind for the next load of the process."""
    from shardscope.results import store

    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "good", sample_docs[:2]))
    real_load = store._load

    def explode(con, frames, *looked_up):
        real_load(con, frames, *looked_up)
        con.execute("CREATE TEMP TABLE leftover (x INTEGER)")
        raise RuntimeError("disk full")

    monkeypatch.setattr(store, "_load", explode)
    with pytest.raises(RuntimeError):
        collect(db, write_docs(tmp_path / "more", sample_docs[2:4]))
    monkeypatch.setattr(store, "_load", real_load)
    assert query_db(db, "SELECT count(*) FROM runs")[0][0] == 2
    summary = collect(db, write_docs(tmp_path / "again", sample_docs[2:4]))
    assert summary["new_runs"] == 2 and query_db(db, "SELECT count(*) FROM runs")[0][0] == 4
    assert sorted(p.name for p in db.parent.iterdir()) == sorted(["r.duckdb", "r.duckdb.lock", "good", "more", "again"])


def test_two_writers_at_once_both_land(tmp_path):
    db = str(tmp_path / "r.duckdb")
    a = write_docs(tmp_path / "a", [training_doc(s, host="hostA") for s in ("ddp", "zero1", "zero3")])
    b = write_docs(tmp_path / "b", [training_doc(s, host="hostB") for s in ("ddp", "fsdp", "zero2")])
    ctx = multiprocessing.get_context("spawn")
    # The package's own function as the target: a spawned child imports it from the installed
    # package (a function of this test module would need the repository on the child's path).
    procs = [ctx.Process(target=collect, args=(db, paths)) for paths in (a, b)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    with duckdb.connect(db, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM training_runs").fetchone()[0] == 6


def test_failed_runs_are_rows_with_their_error(tmp_path):
    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "in", [training_doc("ddp"), training_doc("zero0", outcome="oom")]))
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT strategy, outcome, error, median_step_time_s FROM training_runs ORDER BY strategy").fetchall()
    assert rows[1][:2] == ("zero0", "oom") and "out of memory" in rows[1][2] and rows[1][3] is None


def test_strategy_summary_is_normalised_to_ddp_on_the_same_host(sample_db):
    with duckdb.connect(str(sample_db), read_only=True) as con:
        rows = dict(con.execute("SELECT strategy, step_time_vs_ddp FROM strategy_summary").fetchall())
        held = dict(con.execute("SELECT strategy, held_bytes_vs_ddp FROM strategy_summary").fetchall())
    assert rows["ddp"] == pytest.approx(1.0) and rows["fsdp"] == pytest.approx(1.5) and rows["zero3"] == pytest.approx(1.6)
    assert held["zero3"] == pytest.approx(10 / 16) and held["zero1"] == pytest.approx(12 / 16)


def test_collective_peaks_view(sample_db):
    with duckdb.connect(str(sample_db), read_only=True) as con:
        peak = con.execute("SELECT peak_busbw_gbps, peak_at_size_bytes FROM collective_peaks WHERE op = 'all_reduce'").fetchone()
        direct = con.execute("SELECT max(busbw_gbps) FROM collectives WHERE op = 'all_reduce'").fetchone()[0]
    assert peak == (pytest.approx(direct), 1048576)


def test_ddl_documents_units():
    statements = "\n".join(ddl())
    for column, unit in (("collectives.size_bytes", "bytes"), ("collectives.busbw_gbps", "GB/s (1e9 bytes per second, as nccl-tests)"),
                         ("training_steps.step_time_s", "seconds")):
        assert re.search(rf"COMMENT ON COLUMN {re.escape(column)} IS '.+; unit: {re.escape(unit)}'", statements), column


def test_imported_nccl_tests_rows_land_in_the_same_table(tmp_path):
    from shardscope.cli import main

    src = Path(__file__).resolve().parents[1] / "data" / "nccl-tests" / "all_reduce_perf-gen2-2x8-h100-16ranks.txt"
    rows_file = tmp_path / "import.json"
    assert main(["collectives", "import", str(src), "--out", str(rows_file)]) == 0
    db = tmp_path / "r.duckdb"
    collect(db, [str(rows_file)])
    collect(db, [str(rows_file)])
    with duckdb.connect(str(db), read_only=True) as con:
        source, ws, n = con.execute("SELECT r.source, any_value(c.world_size), count(*) FROM collectives c JOIN runs r USING (run_id) GROUP BY r.source").fetchone()
        peak = con.execute("SELECT max(peak_busbw_gbps) FROM collective_peaks").fetchone()[0]
    assert (source, ws, n) == ("nccl-tests", 16, 62)
    assert peak == pytest.approx(338.82, rel=0.01)
    assert json.loads(rows_file.read_text())["peak_busbw_gbps"] == pytest.approx(338.82)


def test_a_run_already_stored_with_other_contents_is_a_conflict_and_nothing_changes(tmp_path, capsys):
    from shardscope.cli import main

    db = tmp_path / "r.duckdb"
    first = write_docs(tmp_path / "a", [training_doc("ddp")])
    collect(db, first)
    again = collect(db, write_docs(tmp_path / "same", [training_doc("ddp")]))  # the same run, copied elsewhere
    assert (again["new_runs"], again["skipped_runs"]) == (0, 1)
    before = file_digest(db)
    changed = write_docs(tmp_path / "b", [training_doc("ddp", step_time_s=0.05)])  # same job, host and time, other numbers
    assert main(["collect", "--db", str(db), *changed]) == 2
    message = capsys.readouterr().err.strip()
    assert changed[0] in message and "conflict" in message and message.count("\n") == 0, message
    run_id = query_db(db, "SELECT run_id FROM runs")[0][0]
    assert run_id in message
    assert file_digest(db) == before


def test_runs_stored_without_a_digest_still_count_as_present(tmp_path):
    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "a", [training_doc("ddp")]))
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE runs SET content_digest = NULL")  # as an older shardscope wrote it
    again = collect(db, write_docs(tmp_path / "b", [training_doc("ddp", step_time_s=0.05)]))
    assert (again["new_runs"], again["skipped_runs"]) == (0, 1)
    assert len(query_db(db, "SELECT content_digest FROM runs WHERE content_digest IS NOT NULL")) == 0


def test_one_pass_validation_names_each_bad_file_and_row(tmp_path):
    good = [training_doc("ddp", measured_at=f"2026-11-29T00:00:{i:02d}+00:00") for i in range(5)]
    bad = training_doc("zero2", measured_at="2026-11-29T00:01:00+00:00")
    bad["steps"][2]["step_time_s"] = -1.0
    paths = write_docs(tmp_path / "in", [*good, bad])
    with pytest.raises(UserError) as info:
        collect(tmp_path / "r.duckdb", paths)
    assert f"{paths[-1]}: table training_steps, row 2, column step_time_s: failed greater_than(0)" in str(info.value)
    assert str(info.value).startswith("1 problem(s)")
    assert not (tmp_path / "r.duckdb").exists()


def test_a_reader_in_another_process_neither_blocks_a_collect_nor_sees_half_of_it(tmp_path):
    """The property the copy-and-rename write is for.

    A process holding the database open read-only keeps reading the whole file it opened, while
    a collect in this process loads new runs without waiting for it; a reader opening afterwards
    sees every new run.
    """
    import subprocess
    import sys

    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "first", [training_doc("ddp")]))
    reader = subprocess.Popen(
        [sys.executable, "-c", "import sys, duckdb\n"
         "con = duckdb.connect(sys.argv[1], read_only=True)\n"
         "count = lambda: con.execute('SELECT count(*) FROM runs').fetchone()[0]\n"
         "print(count(), flush=True)\n"
         "sys.stdin.readline()\n"
         "print(count(), flush=True)", str(db)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "1"  # the reader holds the file open from here on
        summary = collect(db, write_docs(tmp_path / "more", [training_doc(s) for s in ("zero1", "fsdp")]))
        assert summary["new_runs"] == 2
        out, _ = reader.communicate("\n", timeout=60)
    finally:
        reader.kill()
    assert out.strip() == "1"
    assert query_db(db, "SELECT count(*) FROM runs")[0][0] == 3
