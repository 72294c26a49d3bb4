"""Load -> reload -> merge -> export, end to end, and the refusals of `shardscope db merge`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest
from factories import (
    REPO,
    collective_doc,
    file_digest,
    query_db,
    training_doc,
    with_run_predictions,
    write_docs,
)
from shardscope.cli import main
from shardscope.errors import UserError
from shardscope.results.ddl import SCHEMA_VERSION
from shardscope.results.merge import merge
from shardscope.results.schemas import TABLES
from shardscope.results.store import collect
from shardscope.topology.parse import parse_file

NVL_PAIRS = REPO / "tests" / "data" / "topo" / "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt"


def _machine_a(tmp: Path) -> Path:
    """Machine A: its topology, two collectives and three strategies, loaded, reloaded, then a later run added."""
    db = tmp / "a.duckdb"
    topo = tmp / "a-in" / "topology.json"
    topo.parent.mkdir(parents=True)
    topo.write_text(json.dumps(parse_file(NVL_PAIRS).to_dict()))
    first = [str(topo), *write_docs(tmp / "a-in", [collective_doc("all_reduce", seconds_per_byte=2e-9), collective_doc("all_gather"),
                                                 training_doc("ddp"), training_doc("zero1", step_time_s=0.021),
                                                 training_doc("zero3", step_time_s=0.03)])]
    assert collect(db, first)["new_runs"] == 5
    reload = collect(db, first)
    assert (reload["new_runs"], reload["skipped_runs"], reload["skipped_topologies"]) == (0, 5, 1)
    later = write_docs(tmp / "a-later", [training_doc("ddp", step_time_s=0.019, measured_at="2026-12-01T00:00:00+00:00")])
    assert collect(db, later)["new_runs"] == 1
    return db


def _machine_b(tmp: Path) -> Path:
    db = tmp / "b.duckdb"
    collect(db, write_docs(tmp / "b-in", [collective_doc("all_reduce", host="hostB", seconds_per_byte=0.5e-9),
                                          training_doc("ddp", host="hostB"), training_doc("fsdp", host="hostB", step_time_s=0.025)]))
    return db


def test_load_reload_merge_export(tmp_path):
    a, b = _machine_a(tmp_path), _machine_b(tmp_path)
    merged = tmp_path / "merged.duckdb"
    summary = merge(merged, [str(a), str(b)])
    assert (summary["new_runs"], summary["new_topologies"]) == (6 + 3, 1)
    again = merge(merged, [str(a), str(b)])
    assert (again["new_runs"], again["skipped_runs"], again["skipped_topologies"]) == (0, 9, 1)

    for table in TABLES:  # every row of every input is there exactly once
        expected = sum(query_db(db, f"SELECT count(*) FROM {table}")[0][0] for db in (a, b))
        assert query_db(merged, f"SELECT count(*) FROM {table}")[0][0] == expected, table
    assert query_db(merged, "SELECT count(*) FROM runs") == [(9,)]
    assert query_db(merged, "SELECT count(*) FROM collectives") == [(12,)]
    provenance = query_db(merged, "SELECT host, origin_db, count(*), count(DISTINCT source_file) FROM runs GROUP BY ALL ORDER BY 1")
    assert provenance == [("hostA", str(a.resolve()), 6, 6), ("hostB", str(b.resolve()), 3, 3)]
    assert query_db(a, "SELECT count(*) FROM runs WHERE origin_db IS NOT NULL") == [(0,)]  # direct loads have no origin
    assert query_db(merged, "SELECT origin_db FROM topologies") == [(str(a.resolve()),)]
    source_files = {r[0] for r in query_db(a, "SELECT source_file FROM runs")}
    assert {r[0] for r in query_db(merged, "SELECT source_file FROM runs WHERE host = 'hostA'")} == source_files
    same = "SELECT run_id, size_bytes, time_s, busbw_gbps FROM collectives ORDER BY ALL"
    assert query_db(merged, same.replace("ORDER", "WHERE run_id IN (SELECT run_id FROM runs WHERE host = 'hostA') ORDER")) == query_db(a, same)

    # a merged database merges on: the runs keep the database they first came from
    onward = tmp_path / "onward.duckdb"
    merge(onward, [str(merged)])
    assert query_db(onward, "SELECT DISTINCT origin_db FROM runs ORDER BY 1") == [(str(a.resolve()),), (str(b.resolve()),)]

    out = tmp_path / "export"
    assert main(["db", "export", "--db", str(merged), "--out", str(out), "--format", "parquet"]) == 0
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted([*(f"{t}.parquet" for t in TABLES), "collective_peaks.parquet", "strategy_summary.parquet",
                                "modeled_run_memory.parquet", "modeled_run_peaks.parquet", "schema.sql"])
    with duckdb.connect() as con:
        for table in TABLES:
            parquet = str(out / f"{table}.parquet")
            assert con.execute(f"SELECT count(*) FROM '{parquet}'").fetchone()[0] == query_db(merged, f"SELECT count(*) FROM {table}")[0][0]
        assert con.execute(f"SELECT * FROM '{out / 'collectives.parquet'}' ORDER BY ALL").fetchall() == \
            query_db(merged, "SELECT * FROM collectives ORDER BY ALL")
        peaks = con.execute(f"SELECT host, fabric, label, op, round(peak_busbw_gbps, 6) FROM '{out / 'collective_peaks.parquet'}' "
                            "WHERE op = 'all_reduce' ORDER BY host").fetchall()
        speed = dict(con.execute(f"SELECT strategy, step_time_vs_ddp FROM '{out / 'strategy_summary.parquet'}' "
                                 "WHERE host = 'hostB'").fetchall())
        described = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM '{out / 'training_steps.parquet'}'").fetchall()}
    direct = {h: round(v, 6) for h, v in query_db(merged, "SELECT r.host, max(c.busbw_gbps) FROM collectives c JOIN runs r USING (run_id) "
                                                      "WHERE c.op = 'all_reduce' GROUP BY 1")}
    assert peaks == [("hostA", "nvlink_islands", None, "all_reduce", direct["hostA"]), ("hostB", None, None, "all_reduce", direct["hostB"])]
    assert direct["hostB"] > direct["hostA"]  # hostB's link was four times faster per byte
    assert speed == {"ddp": pytest.approx(1.0), "fsdp": pytest.approx(1.25)}
    assert described == {"run_id": "VARCHAR", "step": "BIGINT", "step_time_s": "DOUBLE", "loss": "DOUBLE", "repeat": "BIGINT",
                         "peak_memory_bytes": "BIGINT"}
    assert re.search(r"COMMENT ON COLUMN collectives\.busbw_gbps IS '.*unit: GB/s", (out / "schema.sql").read_text())


def test_export_as_csv_and_the_schema_command(tmp_path, capsys):
    db = _machine_b(tmp_path)
    assert main(["db", "export", "--db", str(db), "--out", str(tmp_path / "csv"), "--format", "csv"]) == 0
    header = (tmp_path / "csv" / "runs.csv").read_text().splitlines()[0]
    assert header.split(",")[:3] == ["run_id", "kind", "source"]
    assert len((tmp_path / "csv" / "training_steps.csv").read_text().splitlines()) == 1 + 6
    assert not [p for p in (tmp_path / "csv").iterdir() if p.name.startswith(".")]  # no temporary folder left
    capsys.readouterr()
    assert main(["db", "schema", "--sql"]) == 0
    script = capsys.readouterr().out
    assert re.search(r"COMMENT ON COLUMN training_steps\.step_time_s IS '.*unit: seconds';", script)
    assert re.search(r"COMMENT ON COLUMN gpus\.memory_bytes IS '.*unit: bytes';", script)
    with duckdb.connect() as con:  # the printed DDL is a script that builds an empty database
        con.execute(script)
        assert con.execute("SELECT value FROM shardscope_meta").fetchall() == [(SCHEMA_VERSION,)]
        assert con.execute("SELECT count(*) FROM strategy_summary").fetchone()[0] == 0


def test_export_refuses_a_missing_or_foreign_database(tmp_path):
    from shardscope.results.export import export_database

    with pytest.raises(UserError, match="nothing.duckdb: database not found"):
        export_database(tmp_path / "nothing.duckdb", tmp_path / "x")
    foreign = tmp_path / "foreign.duckdb"
    with duckdb.connect(str(foreign)) as con:
        con.execute("CREATE TABLE orders (id INTEGER)")
    with pytest.raises(UserError, match="table 'orders' is not a shardscope table"):
        export_database(foreign, tmp_path / "y")
    assert not (tmp_path / "y").exists() and not list(tmp_path.glob(".y.*"))


def _merge_refused(out: Path, inputs: list[Path], expected: list[str]) -> None:
    before = file_digest(out)
    with pytest.raises(UserError) as info:
        merge(out, [str(p) for p in inputs])
    message = str(info.value)
    assert "nothing was merged" in message.splitlines()[0]
    for text in expected:
        assert text in message, message
    assert file_digest(out) == before
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]


def test_merge_refuses_unknown_schemas_and_leaves_the_output_unchanged(tmp_path):
    out = _machine_b(tmp_path)
    a = _machine_a(tmp_path)
    extra_table = tmp_path / "extra.duckdb"
    newer = tmp_path / "newer.duckdb"
    retyped = tmp_path / "retyped.duckdb"
    for path in (extra_table, newer, retyped):
        path.write_bytes(a.read_bytes())
    with duckdb.connect(str(extra_table)) as con:
        con.execute("CREATE TABLE invoices (id INTEGER)")
    with duckdb.connect(str(newer)) as con:
        con.execute("UPDATE shardscope_meta SET value = 'shardscope.results/99'")
    with duckdb.connect(str(retyped)) as con:
        con.execute("ALTER TABLE collectives ALTER time_s TYPE VARCHAR")
    empty = tmp_path / "empty.duckdb"
    duckdb.connect(str(empty)).close()
    not_db = tmp_path / "results.json"
    not_db.write_text("{}")
    missing = tmp_path / "missing.duckdb"
    _merge_refused(out, [a, not_db, missing], [f"{not_db}: not a DuckDB database file", f"{missing}: database not found"])
    _merge_refused(out, [a, extra_table, newer, retyped, empty], [
        f"{extra_table}: not a shardscope results database this version reads: table 'invoices' is not a shardscope table",
        f"{newer}: not a shardscope results database this version reads: its layout is 'shardscope.results/99'",
        f"{retyped}: not a shardscope results database this version reads: column collectives.time_s is VARCHAR, expected DOUBLE",
        f"{empty}: not a shardscope results database this version reads: it has no runs table",
    ])
    _merge_refused(out, [out], [f"{out}: is the output database itself"])


def test_merge_revalidates_every_row_it_copies(tmp_path):
    out = _machine_b(tmp_path)
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(_machine_a(tmp_path).read_bytes())
    with duckdb.connect(str(bad)) as con:
        run_id = con.execute("SELECT run_id FROM training_runs WHERE strategy = 'zero1'").fetchone()[0]
        con.execute("UPDATE training_steps SET step_time_s = -1 WHERE run_id = ? AND step = 2", [run_id])
        con.execute("INSERT INTO collectives BY NAME SELECT * REPLACE ('no-such-run' AS run_id) FROM collectives LIMIT 1")
    _merge_refused(out, [bad], [
        f"{bad}: table training_steps, row 5 (run_id {run_id}), column step_time_s: failed greater_than(0) (value -1.0)",
        f"{bad}: table collectives has 1 row(s) whose run_id is not in table runs",
    ])


def test_a_database_of_the_first_layout_is_upgraded_and_merged(tmp_path):
    old = tmp_path / "old.duckdb"
    old.write_bytes(_machine_b(tmp_path).read_bytes())
    with duckdb.connect(str(old)) as con:  # the layout before topologies, predictions and provenance
        for view in ("collective_peaks", "strategy_summary", "modeled_run_memory", "modeled_run_peaks"):
            con.execute(f"DROP VIEW {view}")
        for table in ("shardscope_meta", "memory_predictions", "topologies", "gpus", "links"):
            con.execute(f"DROP TABLE {table}")
        con.execute("ALTER TABLE runs DROP COLUMN topology_hash")
        con.execute("ALTER TABLE runs DROP COLUMN origin_db")
    merged = tmp_path / "merged.duckdb"
    merge(merged, [str(old)])
    assert query_db(merged, "SELECT count(*), count(DISTINCT origin_db), count(topology_hash) FROM runs") == [(3, 1, 0)]
    assert query_db(merged, "SELECT count(*) FROM memory_predictions") == [(0,)]  # the old file had none to copy
    # collect upgrades in place (the run and the predictions stage's document of it: two runs)
    collect(old, with_run_predictions(write_docs(tmp_path / "more", [training_doc("zero2", host="hostB")])))
    assert query_db(old, "SELECT value FROM shardscope_meta") == [(SCHEMA_VERSION,)]
    assert query_db(old, "SELECT count(*), count(origin_db) FROM runs") == [(5, 0)]
    assert query_db(old, "SELECT strategy FROM memory_predictions") == [("zero2",)]


def test_databases_of_different_layout_versions_are_refused_in_one_sentence(tmp_path):
    out = _machine_b(tmp_path)
    old = tmp_path / "old.duckdb"
    old.write_bytes(_machine_a(tmp_path).read_bytes())
    with duckdb.connect(str(old)) as con:
        con.execute("UPDATE shardscope_meta SET value = 'shardscope.results/2' WHERE key = 'schema'")
    _merge_refused(out, [old], [f"different layout versions: {out} ({SCHEMA_VERSION}), {old} (shardscope.results/2)"])
    fresh = tmp_path / "fresh.duckdb"
    with pytest.raises(UserError) as info:
        merge(fresh, [str(old), str(tmp_path / "b.duckdb")])
    assert str(old) in str(info.value) and str(tmp_path / "b.duckdb") in str(info.value) and "\n" not in str(info.value)
    assert not fresh.exists()


def test_the_same_machine_under_two_names_is_refused(tmp_path):
    a = _machine_a(tmp_path)
    with duckdb.connect(str(a)) as con:
        con.execute("UPDATE topologies SET host = 'node-07'")
    renamed = tmp_path / "renamed.duckdb"
    renamed.write_bytes(a.read_bytes())
    with duckdb.connect(str(renamed)) as con:  # the same probe (same time, same raw files) filed under another host name
        con.execute("UPDATE topologies SET host = 'node-07.cluster'")
    out = tmp_path / "out.duckdb"
    merge(out, [str(a)])
    _merge_refused(out, [renamed], [f"{out}, {renamed}: the same machine appears under the host names node-07, node-07.cluster"])
    with pytest.raises(UserError) as info:
        merge(tmp_path / "fresh.duckdb", [str(a), str(renamed)])
    assert f"{a}, {renamed}: the same machine" in str(info.value) and not (tmp_path / "fresh.duckdb").exists()
    assert "\n" not in str(info.value) and str(info.value).endswith("; nothing was merged")  # one sentence
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".fresh.duckdb")]


def test_merging_many_databases_validates_once_and_counts_each_run_once(tmp_path):
    a, b = _machine_a(tmp_path), _machine_b(tmp_path)
    copies = []
    for i in range(4):
        copy = tmp_path / f"copy{i}.duckdb"
        copy.write_bytes((a if i % 2 else b).read_bytes())
        copies.append(copy)
    merged = tmp_path / "m.duckdb"
    summary = merge(merged, [str(a), str(b), *map(str, copies)])
    assert (summary["new_runs"], summary["skipped_runs"]) == (9, 2 * 6 + 2 * 3)  # each copy of a or b adds nothing
    assert query_db(merged, "SELECT count(*) FROM training_steps") == query_db(
        merged, "SELECT count(*) FROM (SELECT DISTINCT run_id, step FROM training_steps)")
    assert query_db(merged, "SELECT count(*) FROM runs") == [(9,)]
