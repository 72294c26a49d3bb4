"""Reference runs: bundled public logs, loaded verbatim, labelled, and drawn beside the user's runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from shardscope.collectives.nccl_tests import read_nccl_tests
from shardscope.results.links import NOMINAL_LINKS
from shardscope.results.queries import MODELED_TEXT
from shardscope.results.reference_manifest import REFERENCE_DIR, load_manifest, load_modeled
from shardscope.reference.build import build_reference_db
from shardscope.reference.documents import reference_document
from shardscope.reference.steps import modeled_name

RUNS = load_manifest()
MODELED = load_modeled()


def _document(run):
    """The reference import document of one bundled run, as `collectives import --reference` writes it."""
    return reference_document(run, read_nccl_tests(REFERENCE_DIR / run.file))


#: A source is a file at a fixed commit, or an issue thread.
SOURCE_URL = re.compile(r"https://github\.com/[^/]+/[^/]+/(blob/[0-9a-f]{40}/|issues/\d+$)")


def test_every_bundled_log_and_topology_is_listed_with_a_source_and_documented():
    sources = (REFERENCE_DIR / "SOURCES.md").read_text()
    listed = {run.file for run in RUNS} | {t for t in [r.topology for r in RUNS] + [m.topology for m in MODELED]
                                           if t and not t.startswith("preset:")}
    assert listed == {p.name for p in REFERENCE_DIR.glob("*.txt")}
    for run in RUNS:
        assert run.file in sources and run.source_url in sources
        assert SOURCE_URL.match(run.source_url), run.source_url
        assert run.link is None or run.link in NOMINAL_LINKS
        assert run.topology_note, run.file  # why this topology (or none) is assumed
        if run.topology:
            assert run.topology in sources


def test_the_known_low_reference_is_a_verbatim_copy_of_the_diagnose_fixture():
    """nccl-tests#293: the same bytes as tests/data/diagnose (whose SOURCES.md documents the copy)."""
    from diagnose.fixtures import RUN_293_GDR, TOPO_293

    run = next(r for r in RUNS if "#293" in r.label)
    assert (REFERENCE_DIR / run.file).read_bytes() == RUN_293_GDR.read_bytes()
    assert (REFERENCE_DIR / run.topology).read_bytes() == TOPO_293.read_bytes()
    assert run.source_url == "https://github.com/NVIDIA/nccl-tests/issues/293" and "NIC0 SYS" in run.documented_cause


def test_reference_runs_are_judged_against_their_topology_and_linked(reference_db):
    with duckdb.connect(str(reference_db), read_only=True) as con:
        rows = con.execute("""
            SELECT r.label, r.job_id, v.verdict, v.percent_of_expected, v.reason, v.hints_json, v.topology_hash, vr.env_json
            FROM verdicts v JOIN runs r ON r.run_id = v.judged_run_id JOIN runs vr ON vr.run_id = v.run_id""").fetchall()
    assert sorted(job for _, job, *_ in rows) == sorted(f"nccl-tests:reference/{run.file}" for run in RUNS)
    by_label = {}
    for label, _, verdict, pct, reason, hints, topo_hash, env in rows:
        by_label.setdefault(label, []).append((verdict, pct, reason, json.loads(hints), topo_hash, json.loads(env)))
    (low,) = by_label["2 nodes x 1 A100 PCIe, HDR 200G (nccl-tests#293)"]
    assert low[0] == "low" and low[1] == pytest.approx(26.8, abs=0.5)  # as tests/diagnose judges the same log
    assert any("NIC only through the CPU (SYS)" in h for h in low[3])
    assert Path(low[5]["topology"]).name == "nccl-tests-293-topo.txt" and low[4] is not None  # the file verdict was given
    (h100,) = by_label["2 nodes x 8 H100 SXM"]
    assert h100[0] == "ok" and h100[5]["topology"] == "preset:gcp-a3-mega"  # the preset assumed is recorded
    for verdict, pct, reason, hints, topo_hash, env in by_label["2 x RTX 2080 Ti, PCIe 3.0"]:
        # the post's own topo -m (one PCIe 3.0 switch, PIX), on a GeForce board without PCIe peer-to-peer (the
        # cause the post documents): the model expects the host-staged rate, and the log reaches it
        assert verdict == "ok" and topo_hash
        assert Path(env["topology"]).name == "all_reduce_perf-2x-rtx2080ti-pcie3-topo.txt"
        assert 90 < pct < 110 and "host-staged: RTX 2080 Ti has no PCIe peer-to-peer" in reason and not hints
    (h100_290,) = by_label["8 x H100 SXM, NVSwitch (nccl-tests#290, node005)"]
    assert h100_290[0] == "ok" and h100_290[1] > 90  # the maintainer: 476 GB/s is in the expected range
    (h100_290_2n,) = by_label["2 nodes x 8 H100 SXM, NDR 400G (nccl-tests#290, node005+node007)"]
    assert h100_290_2n[0] == "low"  # the same nodes reach less than half across the network
    for label in ("4 x H100 SXM, NVSwitch (Lambda)", "8 x V100 SXM2, NVLink hybrid cube mesh (DGX-1 class)",
                  "8 x RTX 4090, PCIe 4.0, no P2P"):
        (run,) = by_label[label]
        assert run[0] == "ok" and run[5]["topology"].endswith("-topo.txt"), label  # judged on its own topo -m


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.file)
def test_bundled_logs_are_consistent_with_their_own_footer(run):
    """Copied verbatim: every printed bandwidth matches size/time, and the footer's average matches the rows."""
    result = read_nccl_tests(REFERENCE_DIR / run.file)
    rows = [r for r in result.rows if r["size_bytes"] > 0]
    assert all(r["busbw_consistent"] for r in rows)
    mean = sum(r["busbw_gbps"] for r in result.rows) / len(result.rows)
    assert mean == pytest.approx(result.reported_avg_busbw_gbps, abs=0.01)


def test_reference_documents_are_labelled_and_drop_only_empty_rows():
    for run in RUNS:
        doc = _document(run)
        parsed = read_nccl_tests(REFERENCE_DIR / run.file)
        assert doc["kind"] == "collectives_import" and doc["source"] == "reference"
        assert (doc["label"], doc["fabric"]) == (run.label, run.fabric)
        assert doc["reference"]["source_url"] == run.source_url
        assert len(doc["rows"]) == sum(r["size_bytes"] > 0 for r in parsed.rows)


def test_reference_database_holds_every_row_with_source_label_and_fabric(reference_db):
    with duckdb.connect(str(reference_db), read_only=True) as con:
        runs = con.execute("SELECT source, label, fabric, job_id, world_size FROM runs WHERE kind = 'collectives_import' "
                           "ORDER BY job_id").fetchall()
        rows = con.execute("SELECT count(*) FROM collectives").fetchone()[0]
        modeled = con.execute("SELECT source, label, fabric FROM runs WHERE kind = 'predictions'").fetchall()
    assert sorted(modeled) == sorted(("modeled", m.label, m.fabric) for m in MODELED)
    assert {r[0] for r in runs} == {"reference"}
    assert sorted((r[1], r[2], r[3]) for r in runs) == sorted(
        (run.label, run.fabric, f"nccl-tests:reference/{run.file}") for run in RUNS)
    assert rows == sum(len(_document(run)["rows"]) for run in RUNS)


def test_rebuilding_the_reference_database_gives_the_same_runs_and_verdicts(reference_db, tmp_path):
    """Reference run ids are content digests; verdict runs name the judged file's path, so they are
    compared by what they say, not by id."""
    build_reference_db(tmp_path / "again.duckdb", tmp_path)
    ids, verdicts = [], []
    for db in (reference_db, tmp_path / "again.duckdb"):
        with duckdb.connect(str(db), read_only=True) as con:
            ids.append(con.execute("SELECT run_id FROM runs WHERE source = 'reference' ORDER BY run_id").fetchall())
            verdicts.append(con.execute("SELECT judged_run_id, verdict, plateau_busbw_gbps, reason FROM verdicts "
                                        "ORDER BY judged_run_id").fetchall())
    assert ids[0] == ids[1] and len(ids[0]) == len(RUNS)
    assert verdicts[0] == verdicts[1] and len(verdicts[0]) == len(RUNS)
    assert not list(tmp_path.glob(".*building*"))


def test_figures_draw_reference_runs_beside_ours_with_the_nominal_link(reference_db, drawn_with_reference):
    plotted = pd.read_csv(drawn_with_reference / "busbw_vs_size.csv")
    ref = plotted[plotted["source"] == "reference"]
    with duckdb.connect(str(reference_db), read_only=True) as con:
        truth = con.execute("""SELECT c.op, c.size_bytes, c.busbw_gbps FROM collectives c
                               WHERE NOT c.in_place ORDER BY c.op, c.size_bytes, c.busbw_gbps""").df()
    got = ref[["op", "size_bytes", "busbw_gbps"]].sort_values(["op", "size_bytes", "busbw_gbps"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, truth, check_dtype=False)  # out-of-place rows, exactly as loaded
    assert ref["series"].str.endswith("(reference)").all()
    pcie3 = ref[ref["label"] == "2 x RTX 2080 Ti, PCIe 3.0"]
    assert len(pcie3) and (pcie3["nominal_link_gbps"] == NOMINAL_LINKS["pcie3_x16"].per_direction_gbps).all()
    pcie4 = ref[ref["label"] == "8 x RTX 4090, PCIe 4.0, no P2P"]
    assert len(pcie4) and (pcie4["nominal_link_gbps"] == NOMINAL_LINKS["pcie4_x16"].per_direction_gbps).all()
    hdr = ref[ref["fabric"] == "IB HDR, 2 nodes"]
    assert len(hdr) and (hdr["nominal_link_gbps"] == NOMINAL_LINKS["ib_hdr_4x"].per_direction_gbps).all()
    assert ref.loc[ref["fabric"] == "nvswitch, 2 nodes", "nominal_link_gbps"].isna().all()
    assert plotted.loc[plotted["source"] == "measured", "nominal_link_gbps"].isna().all()


def test_allreduce_peaks_include_reference_machines(drawn_with_reference):
    peaks = pd.read_csv(drawn_with_reference / "allreduce_peak_vs_gpus.csv")
    ref = peaks[peaks["source"] == "reference"]
    # every fabric class of the finding, with the GPU counts the bundled machines were run at
    assert sorted(ref.loc[ref["fabric"] == "nvswitch", "world_size"]) == [4, 8]
    assert sorted(ref.loc[ref["fabric"] == "nvswitch, 2 nodes", "world_size"]) == [16, 16]
    assert list(ref.loc[ref["fabric"] == "nvlink mesh", "world_size"]) == [8]
    assert sorted(ref.loc[ref["fabric"] == "pcie", "world_size"]) == [2, 4, 8]
    single_node = ref[ref["fabric"] == "nvswitch"].set_index("world_size")["peak_busbw_gbps"]
    assert single_node[8] == pytest.approx(4294967296 / 15870e-6 / 1e9 * 2 * 7 / 8)  # out-of-place, nccl-tests#290
    assert ref.loc[ref["fabric"] == "pcie", "peak_busbw_gbps"].max() < ref.loc[ref["fabric"] == "nvlink mesh", "peak_busbw_gbps"].min()
    h100 = peaks[peaks["fabric"] == "nvswitch, 2 nodes"].iloc[0]
    assert (h100["world_size"], h100["source"]) == (16, "reference")
    assert h100["peak_busbw_gbps"] == pytest.approx(8589934592 / 47535e-6 / 1e9 * 2 * 15 / 16)  # from size and time
    answer = (drawn_with_reference / "allreduce_peak_vs_gpus.answer.rst").read_text()
    assert "338.8 GB/s at 16 ranks" in answer


def test_reference_command_and_figures_flag(module_db, tmp_path, capsys):
    from shardscope.cli import main

    assert main(["reference", "--db", str(tmp_path / "ref" / "r.duckdb"), "--manifest", str(tmp_path / "m.json")]) == 0
    summary = json.loads((tmp_path / "m.json").read_text())
    assert (summary["reference_runs"], summary["verdicts"], summary["modeled_fabrics"], summary["new_runs"]) == (
        len(RUNS), len(RUNS), len(MODELED), 2 * len(RUNS) + len(MODELED))
    assert sorted(p.name for p in (tmp_path / "ref" / "r.documents").glob("*.json")) == sorted(  # its own folder
        [name for r in RUNS for name in (f"{Path(r.file).stem}.json", f"{Path(r.file).stem}.verdicts.json")]
        + [modeled_name(m) for m in MODELED])
    assert main(["figures", "--db", str(module_db), "--out", str(tmp_path / "f"),
                 "--reference-db", str(tmp_path / "ref" / "r.duckdb")]) == 0
    assert "reference" in set(pd.read_csv(tmp_path / "f" / "busbw_vs_size.csv")["source"])
    assert main(["reference", "--db", str(tmp_path / "x.duckdb"), "--source", str(tmp_path / "nowhere")]) == 2
    assert "reference manifest not found" in capsys.readouterr().err
    assert not (tmp_path / "x.duckdb").exists()


def test_modeled_fabrics_are_drawn_as_modeled_from_their_predictions(reference_db, drawn_with_reference):
    """Figure 2's modeled lines: the cost model's busbw on each modeled fabric, peak per GPU count as stored,
    never a verdict, and the fabric class no bundled log covers (NVLink-bridged pairs) among them."""
    peaks = pd.read_csv(drawn_with_reference / "allreduce_peak_vs_gpus.csv")
    modeled = peaks[peaks["source"] == "modeled"]
    with duckdb.connect(str(reference_db), read_only=True) as con:
        truth = con.execute("""SELECT r.label, p.world_size, max(p.busbw_gbps) FROM collective_predictions p
                               JOIN runs r USING (run_id) WHERE p.op = 'all_reduce' GROUP BY ALL""").fetchall()
    got = {(s, n): b for s, n, b in zip(modeled["series"], modeled["world_size"], modeled["peak_busbw_gbps"])}
    assert got == pytest.approx({(label, n): b for label, n, b in truth})
    assert set(modeled["series"]) == {m.label for m in MODELED} and set(modeled["verdict_text"]) == {MODELED_TEXT}
    assert modeled["verdict"].isna().all()
    fabric = {m.fabric: m.label for m in MODELED}
    assert "nvlink bridge pairs" in fabric and "nvlink bridge pairs" not in {r.fabric for r in RUNS}
    by = modeled.set_index(["series", "world_size"])["peak_busbw_gbps"]
    pairs, switch = fabric["nvlink bridge pairs"], fabric["nvswitch"]
    assert by[(pairs, 2)] > 5 * by[(pairs, 8)]  # the model: bridged pairs lose most of it once a job leaves a pair
    assert by[(switch, 8)] >= by[(switch, 2)]  # and NVSwitch does not
    answer = (drawn_with_reference / "allreduce_peak_vs_gpus.answer.rst").read_text()
    assert "Modeled by the cost model, not measured: nvlink bridge pairs" in answer


def test_collectives_import_labels_a_listed_log_as_its_reference_run_and_refuses_an_unlisted_one(tmp_path, capsys):
    """The reference rules reuse `collectives import`: --reference names the runs.json that labels the log."""
    from shardscope.cli import main

    run, manifest = RUNS[0], str(REFERENCE_DIR / "runs.json")
    out = tmp_path / "doc.json"
    assert main(["collectives", "import", str(REFERENCE_DIR / run.file), "--reference", manifest, "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == json.loads(json.dumps(_document(run)))
    stray = tmp_path / "all_reduce_perf-unlisted.txt"
    stray.write_bytes((REFERENCE_DIR / run.file).read_bytes())
    capsys.readouterr()
    assert main(["collectives", "import", str(stray), "--reference", manifest, "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "runs.json: no run has file 'all_reduce_perf-unlisted.txt'" in err and not (tmp_path / "x.json").exists()
