"""Verdicts and doctor findings in the store: tables verdicts, verdict_rows and doctor_findings."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from factories import collective_doc, file_digest, query_db, write_docs, write_json

from shardscope.cli import main
from shardscope.errors import UserError
from shardscope.results.store import collect


def test_verdicts_of_a_known_low_run_join_the_runs_they_judge_and_the_topology(tmp_path, verdict_inputs):
    db = tmp_path / "r.duckdb"
    files = verdict_inputs
    summary = collect(db, [files["topology"], files["gdr"], files["nps4"], files["verdicts"]])
    assert (summary["new_runs"], summary["new_topologies"]) == (3, 1)
    assert query_db(db, "SELECT kind, source, world_size FROM runs ORDER BY kind") == [
        ("collectives_import", "nccl-tests", 2), ("collectives_import", "nccl-tests", 2), ("verdicts", "diagnosed", None)]
    # one row per judged file, each tied to the very run collect made of that file
    judged = query_db(db, "SELECT v.source_file, r.source_file, r.kind FROM verdicts v JOIN runs r ON r.run_id = v.judged_run_id ORDER BY 1")
    assert judged == [(files["gdr"], files["gdr"], "collectives_import"), (files["nps4"], files["nps4"], "collectives_import")]
    # the two imports repeat one job: one sweep, numbers pooled over 2 files x (in place, out of place)
    (row,) = set(query_db(db, "SELECT sweep_index, sweep_files, plateau_runs, op, world_size, nodes, hosts, verdict, bottleneck, "
                           "round(expected_busbw_gbps, 3), t.fabric FROM verdicts JOIN topologies t USING (topology_hash)"))
    assert row == (0, 2, 4, "all_reduce", 2, 2, "test1, test2", "low", "net", 24.0, "pcie")
    (pct, plateau, expected, low, high, reason, hints), = set(query_db(
        db, "SELECT percent_of_expected, plateau_busbw_gbps, expected_busbw_gbps, plateau_ci95_low_gbps, "
            "plateau_ci95_high_gbps, reason, hints_json FROM verdicts"))
    assert pct == pytest.approx(100 * plateau / expected) and pct < 70 and low <= plateau <= high
    assert "below 70%" in reason and any("NIC only through the CPU" in h for h in json.loads(hints))
    # per size: 28 sizes, each pooled over 4 measurements, judged where the model has a number
    per_size = query_db(db, "SELECT source_file, count(*), min(repeats), max(repeats), count(expected_busbw_gbps), "
                         "count(*) FILTER (verdict = 'low' AND region = 'bandwidth') FROM verdict_rows GROUP BY 1 ORDER BY 1")
    assert [r[1:5] for r in per_size] == [(28, 4, 4, 28)] * 2 and all(r[5] > 0 for r in per_size)
    big = query_db(db, "SELECT measured_busbw_gbps, expected_busbw_gbps, percent_of_expected FROM verdict_rows "
                    f"WHERE source_file = '{files['gdr']}' AND size_bytes = 1073741824")
    assert big and big[0][2] == pytest.approx(100 * big[0][0] / big[0][1])


def test_verdicts_loaded_without_the_judged_files_keep_the_file_names(tmp_path, verdict_inputs):
    db = tmp_path / "r.duckdb"
    collect(db, [verdict_inputs["verdicts"]])
    assert query_db(db, "SELECT count(*), count(judged_run_id), count(DISTINCT source_file) FROM verdicts") == [(2, 0, 2)]
    later = collect(db, [verdict_inputs["gdr"], verdict_inputs["nps4"], verdict_inputs["verdicts"]])
    assert (later["new_runs"], later["skipped_runs"]) == (2, 1)  # the verdicts are already stored: not linked later
    joined = query_db(db, "SELECT count(*) FROM verdicts v JOIN runs r ON r.source_file = v.source_file")
    assert joined == [(2,)]  # ... but the file names still join


def test_a_cpu_run_has_no_expectation_but_its_sizes_are_summarised(tmp_path):
    inputs = write_docs(tmp_path / "in", [collective_doc("all_reduce"), collective_doc("all_gather")])
    topology = str(tmp_path / "topology.json")
    assert main(["topology", "detect", "--out", topology]) == 0
    verdicts = str(tmp_path / "verdicts.json")
    assert main(["verdict", *inputs, "--topology", topology, "--out", verdicts]) == 0
    db = tmp_path / "r.duckdb"
    collect(db, [topology, *inputs, verdicts])
    rows = query_db(db, "SELECT v.op, v.verdict, v.expected_busbw_gbps, v.percent_of_expected, v.plateau_busbw_gbps > 0, "
                     "v.size_to_90pct_bytes, round(v.latency_floor_us, 6), r.kind FROM verdicts v JOIN runs r ON r.run_id = v.judged_run_id ORDER BY 1")
    # the factory's sweep: 1 KiB .. 1 MiB at 10 us + 1 ns per byte; 90% of the plateau first at 256 KiB
    assert rows == [("all_gather", "unknown", None, None, True, 262144, round(10 + 1024e-3, 6), "collectives"),
                    ("all_reduce", "unknown", None, None, True, 262144, round(10 + 1024e-3, 6), "collectives")]
    assert "gloo" in query_db(db, "SELECT DISTINCT reason FROM verdicts")[0][0]
    assert query_db(db, "SELECT count(*), count(expected_busbw_gbps), count(region), min(verdict), max(verdict) FROM verdict_rows") == [
        (8, 0, 0, "unknown", "unknown")]
    assert query_db(db, "SELECT count(*) FROM verdicts v JOIN topologies USING (topology_hash)") == [(2,)]


def test_doctor_findings_from_recorded_readings(tmp_path, doctor_doc):
    db = tmp_path / "r.duckdb"
    path = write_json(tmp_path / "doctor.json", doctor_doc)
    assert collect(db, [path])["new_runs"] == 1
    assert query_db(db, "SELECT kind, source, host, measured_at, world_size, fabric FROM runs") == [
        ("doctor", "diagnosed", "this-dev-container", datetime.fromisoformat(doctor_doc["checked_at"]), None, "cpu")]
    findings = dict(query_db(db, "SELECT check_name, status FROM doctor_findings"))
    assert findings == {"pcie_acs": "warn", "iommu": "ok", "pcie_link": "skipped", "nccl_env": "ok", "virtualization": "warn"}
    (details, explains), = query_db(db, "SELECT details_json, explains FROM doctor_findings WHERE check_name = 'virtualization'")
    assert json.loads(details)["vm"] and "P2P" in explains
    assert collect(db, [path])["skipped_runs"] == 1  # the same document again adds nothing


def test_a_live_doctor_run_loads_and_ties_to_this_hosts_topology(tmp_path):
    topology, doctor = str(tmp_path / "topology.json"), str(tmp_path / "doctor.json")
    assert main(["topology", "detect", "--out", topology]) == 0
    assert main(["doctor", "--no-peer-check", "--topology", topology, "--out", doctor]) == 0
    db = tmp_path / "r.duckdb"
    collect(db, [topology, doctor])
    assert query_db(db, "SELECT r.kind, t.host = r.host FROM runs r JOIN topologies t USING (topology_hash)") == [("doctor", True)]
    assert query_db(db, "SELECT count(*) FROM doctor_findings WHERE check_name = 'peer_check' AND status = 'skipped'") == [(1,)]


def _sweep(edit: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], None]:
    return lambda doc: edit(doc["sweeps"][0])


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d.__setitem__(key, value)


BAD_VERDICTS = [
    (_sweep(_set("verdict", "fine")), "table verdicts, row 0, column verdict: failed isin"),
    (_sweep(_set("pct_of_expected", 99.0)), "failed percent_of_expected must equal 100 * plateau_busbw_gbps / expected_busbw_gbps"),
    (_sweep(lambda s: s["expected"].update(plateau_gbps=None)), "failed a verdict other than unknown needs expected_busbw_gbps"),
    (_sweep(lambda s: s["rows"][0].update(pct_of_expected=1.0)), ("table verdict_rows, row 0, column (row check): failed "
                                                                  "percent_of_expected must equal 100 * measured_busbw_gbps")),
    (_sweep(lambda s: s["rows"][3].update(size_bytes=3)), "field sweeps[0].rows[3].size_bytes: 3 is not a size of the sweep's"),
    (_sweep(lambda s: s["sources"].append(s["sources"][0])), "field sweeps[0].sources: "),
    (_sweep(_set("sources", [])), "field sweeps[0].sources: is empty"),
    (_sweep(lambda s: s["summary"].update(latency_floor_us="fast")), "field sweeps[0].summary.latency_floor_us: 'fast' is not of type 'number'"),
    (_sweep(_set("op", "all_shuffle")), "table verdicts, row 0, column op: failed isin"),
    (_set("topology_hash", "abc"), "column topology_hash: failed str_length(64, 64)"),
    (_set("sweeps", []), "field sweeps: is empty"),
]


@pytest.mark.parametrize(("edit", "expected"), BAD_VERDICTS)
def test_a_bad_verdicts_document_is_refused_and_the_database_untouched(tmp_path, verdict_inputs, verdicts_doc, edit, expected):
    db = tmp_path / "r.duckdb"
    collect(db, [verdict_inputs["topology"], verdict_inputs["verdicts"]])
    before = file_digest(db)
    edit(verdicts_doc)
    bad = write_json(tmp_path / "bad.json", verdicts_doc)
    with pytest.raises(UserError) as err:
        collect(db, [bad, verdict_inputs["gdr"]])
    assert expected in str(err.value) and bad in str(err.value)
    assert file_digest(db) == before


BAD_DOCTOR = [
    (lambda d: d["findings"][0].update(status="broken"), "table doctor_findings, row 0, column status: failed isin"),
    (lambda d: d["summary"].update(ok=5), "field summary.ok: 5 but the document lists 2 finding(s) with status 'ok'"),
    (lambda d: d["findings"].append(dict(d["findings"][1])), "columns run_id, check_name: duplicated key"),
    (lambda d: d.update(checked_at="yesterday"), "column checked_at: failed must be an ISO 8601 time"),
    (lambda d: d.pop("host"), "field (top level): 'host' is a required property"),
    (lambda d: d["findings"][0].update(surprise=1), "Additional properties are not allowed ('surprise' was unexpected)"),
    (lambda d: d.update(findings=[]), "field findings: is empty"),
]


@pytest.mark.parametrize(("edit", "expected"), BAD_DOCTOR)
def test_a_bad_doctor_document_is_refused_and_the_database_untouched(tmp_path, doctor_doc, edit, expected):
    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "in", [collective_doc()]))
    before = file_digest(db)
    edit(doctor_doc)
    bad = write_json(tmp_path / "bad.json", doctor_doc)
    with pytest.raises(UserError) as err:
        collect(db, [bad])
    assert expected in str(err.value) and bad in str(err.value)
    assert file_digest(db) == before


def test_an_unknown_kind_names_every_kind_collect_reads(tmp_path):
    with pytest.raises(UserError, match="kind 'collectives', 'training', 'collectives_import', 'search', 'predictions', 'run_predictions', 'verdicts', 'doctor'"):
        collect(tmp_path / "r.duckdb", [write_json(tmp_path / "x.json", {"kind": "advice"})])
    assert not (tmp_path / "r.duckdb").exists()
