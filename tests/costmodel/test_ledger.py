"""``shardscope accuracy``: stored predictions paired with the measurements of the same jobs, per op and strategy."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from factories import collective_doc, training_doc, write_docs
from shardscope.cli import main
from shardscope.costmodel.advise import advise
from shardscope.costmodel.documents import predictions_document, rows_for_sweep, strategy_rows, topology_hash
from shardscope.costmodel.ledger import format_ledger, ledger, ranking_agreement
from shardscope.costmodel.machine import build_machine
from shardscope.costmodel.presets import preset
from shardscope.costmodel.sweep import predict_sweep
from shardscope.results.store import collect

CPU_TOPOLOGY = {"gpus": [], "links": [], "fabric": "cpu"}


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ledger")
    measured = [collective_doc("all_reduce", seconds_per_byte=1e-9), collective_doc("all_gather", seconds_per_byte=2e-9),
                training_doc("ddp", step_time_s=0.02), training_doc("zero3", step_time_s=0.05), training_doc("fsdp", step_time_s=0.021)]
    paths = write_docs(folder / "jobs", measured)
    machine = build_machine(CPU_TOPOLOGY)
    sizes = [1024, 16384, 262144, 1048576]
    collectives = rows_for_sweep(predict_sweep(machine, ["all_reduce", "all_gather"], [2], sizes), topology_hash(CPU_TOPOLOGY))
    # CONSTRUCTED: step predictions of an H100 preset for the tiny model on 2 GPUs, only to pair with the CPU runs above
    # (the step model predicts GPU machines only); what is checked is the pairing and the arithmetic, not the values.
    gpu = preset("hgx-h100")
    steps = strategy_rows(advise(gpu, "tiny", 2, strategies=("ddp", "fsdp", "zero3")), topology_hash(gpu))
    docs = [predictions_document(CPU_TOPOLOGY, machine, collectives, created_at="2026-11-29T00:00:00+00:00"),
            predictions_document(gpu, build_machine(gpu), (), steps, created_at="2026-11-29T00:00:00+00:00")]
    for i, doc in enumerate(docs):
        (folder / f"predictions-{i}.json").write_text(json.dumps(doc))
        paths.append(str(folder / f"predictions-{i}.json"))
    database = folder / "results.duckdb"
    collect(database, paths)
    return database


def test_every_measured_row_is_paired_with_its_stored_prediction(db: Path) -> None:
    with duckdb.connect(str(db), read_only=True) as con:
        book = ledger(con)
        measured = dict(con.execute("SELECT c.op, count(*) FROM collectives c GROUP BY c.op").fetchall())
        modeled = con.execute("SELECT busbw_gbps FROM collective_predictions WHERE op = 'all_reduce' AND size_bytes = 1048576").fetchone()[0]
        real = con.execute("SELECT busbw_gbps FROM collectives WHERE op = 'all_reduce' AND size_bytes = 1048576").fetchone()[0]
    by_op = {g.group: g for g in book.collectives}
    assert {op: by_op[op].pairs for op in measured} == measured and by_op["overall"].pairs == sum(measured.values())
    worst = by_op["all_reduce"]
    assert worst.worst_error >= abs(modeled / real - 1) - 1e-12  # the 1 MiB row is among the pairs
    assert any("gloo placeholders" in n for n in book.notes)
    strategies = {g.group: g for g in book.training}
    assert set(strategies) == {"ddp", "fsdp", "zero3", "overall"} and strategies["ddp"].pairs == 1


def test_ranking_counts_only_gaps_above_the_noise() -> None:
    rows = [{"model": "m", "world_size": 2, "strategy": s, "measured": t, "modeled": p}
            for s, t, p in (("ddp", 1.0, 1.0), ("fsdp", 1.05, 0.9), ("zero3", 2.0, 3.0), ("zero1", 1.5, 0.5))]
    r = ranking_agreement(rows)
    # ddp/fsdp within 10%: not ranked; ddp<zero3, fsdp<zero3, zero1<zero3 agree; ddp<zero1 and fsdp<zero1 disagree
    assert (r["within_noise"], r["agree"], len(r["disagree"])) == (1, 3, 2)


def test_accuracy_command_prints_the_ledger(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["accuracy", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "collectives (bus bandwidth)" in out and "all_gather" in out and "strategy ranking:" in out
    assert main(["accuracy", "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["collectives"]


def test_accuracy_on_a_missing_database_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["accuracy", "--db", str(tmp_path / "none.duckdb")]) == 2
    assert "database not found" in capsys.readouterr().err


def test_the_pipelines_predictions_document_pairs_with_its_measurements(gpu_db: dict) -> None:
    # The database a GPU node's pipeline writes (tests/conftest.py, constructed measurements): the predictions
    # document of `shardscope predict plan` keys every planned job as the measured runs do.
    with duckdb.connect(str(gpu_db["db"]), read_only=True) as con:
        book = ledger(con)
        measured_ops = {op for (op,) in con.execute(
            "SELECT DISTINCT c.op FROM collectives c JOIN runs r USING (run_id) WHERE r.source = 'measured'").fetchall()}
    assert {g.group for g in book.collectives} >= measured_ops and all(g.pairs > 0 for g in book.collectives)
    print(format_ledger(book))


def _rows(op: str, seconds_per_byte: float, run: str, alpha_s: float = 10e-6) -> list[dict]:
    from shardscope.contracts.factors import busbw_factor

    out = []
    for size in (1024, 16384, 262144, 1048576, 4194304):
        t = alpha_s + size * seconds_per_byte
        out.append({"op": op, "world_size": 2, "size_bytes": size, "time_s": t, "busbw_gbps": size / t / 1e9 * busbw_factor(op, 2),
                    "run_id": run})
    return out


def test_calibration_on_one_sweep_predicts_the_others_on_the_same_link() -> None:
    from shardscope.costmodel.ledger import calibrated_check

    # CONSTRUCTED alpha-beta sweeps on one link: all_gather moves half of all_reduce's bytes per rank on 2 ranks.
    same_link = _rows("all_reduce", 1e-9, "a") + _rows("all_gather", 0.5e-9, "b") + _rows("reduce_scatter", 0.5e-9, "c")
    groups, on = calibrated_check(same_link)
    by = {g.group: g for g in groups}
    assert on.startswith("all_reduce on 2 ranks") and set(by) == {"all_reduce (fitted)", "all_gather", "reduce_scatter", "held out"}
    assert by["held out"].worst_error < 0.01 and by["held out"].pairs == 10
    slower = _rows("all_reduce", 1e-9, "a") + _rows("all_gather", 1e-9, "b")  # all_gather twice as slow as the link allows
    groups, _ = calibrated_check(slower)
    assert {g.group: g for g in groups}["all_gather"].worst_ratio == pytest.approx(2.0, rel=0.05)
    assert calibrated_check(_rows("all_reduce", 1e-9, "a")) == ([], None)  # one sweep: nothing held out


def test_a_pair_whose_confidence_intervals_overlap_is_within_the_noise() -> None:
    from shardscope.results.ledger import ranking_agreement

    rows = [{"model": "tiny", "world_size": 2, "strategy": "ddp", "measured": 0.10, "modeled": 0.30, "ci95": (0.08, 0.20)},
            {"model": "tiny", "world_size": 2, "strategy": "zero2", "measured": 0.15, "modeled": 0.20, "ci95": (0.12, 0.18)},
            {"model": "tiny", "world_size": 2, "strategy": "zero3", "measured": 0.40, "modeled": 0.50, "ci95": (0.35, 0.45)}]
    r = ranking_agreement(rows)
    # ddp-zero2: 50% apart but their intervals overlap (not ranked); both are ranked against zero3; the model agrees there
    assert (r["within_noise"], r["pairs_ranked"], r["agree"], r["disagree"]) == (1, 2, 2, [])
    assert ranking_agreement([{**row, "ci95": None} for row in rows])["disagree"] == [
        "tiny on 2: measured ddp faster than zero2, modeled the reverse"]


def test_the_reports_ledger_pairs_only_the_current_plans_runs(tmp_path: Path) -> None:
    """Issue 32 item 3: a strategy removed from the config leaves the report's ledger as it leaves its figures. An
    earlier plan measured ddp and zero3, the current one ddp and fsdp: with the collect manifest, zero3 is not
    paired; without a selection (or --runs all) every stored run is."""
    from shardscope.paper.ledger import ledger_section
    from shardscope.results.ledger import stored_ledger
    from shardscope.results.selection import select_runs
    from shardscope.results.sources import open_results

    gpu = preset("hgx-h100")
    steps = strategy_rows(advise(gpu, "tiny", 2, strategies=("ddp", "fsdp", "zero3")), topology_hash(gpu))
    prediction = tmp_path / "predictions.json"
    prediction.write_text(json.dumps(predictions_document(gpu, build_machine(gpu), (), steps,
                                                          created_at="2026-11-29T00:00:00+00:00")))
    db, manifest = tmp_path / "results" / "shardscope.duckdb", tmp_path / "results" / "db" / "collect.json"
    old = write_docs(tmp_path / "old", [training_doc("ddp", step_time_s=0.02), training_doc("zero3", step_time_s=0.05)])
    collect(db, [*old, str(prediction)], manifest=str(manifest))
    new = write_docs(tmp_path / "new", [training_doc("ddp", step_time_s=0.03, measured_at="2026-12-01T00:00:00+00:00"),
                                        training_doc("fsdp", step_time_s=0.04)])
    collect(db, [*new, str(prediction)], manifest=str(manifest))
    current = select_runs(db).inputs
    assert current is not None
    with open_results(db, None, current) as con:
        now = {g.group: g.pairs for g in stored_ledger(con, "all_runs").training}
    with open_results(db) as con:
        ever = {g.group: g.pairs for g in stored_ledger(con, "all_runs").training}
    assert now == {"ddp": 1, "fsdp": 1, "overall": 2} and ever == {"ddp": 2, "fsdp": 1, "zero3": 1, "overall": 4}
    assert "zero3" not in ledger_section(db, current)["training"]
    assert "zero3" in ledger_section(db)["training"]
    with pytest.raises(ValueError, match="runs must be one of"):
        stored_ledger(None, "runs; DROP TABLE runs")
