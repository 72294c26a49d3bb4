"""The report's ledger section shows what ``shardscope accuracy --db`` computes, from the same query."""

from __future__ import annotations

import re

from shardscope.costmodel.ledger import ledger
from shardscope.paper.ledger import ledger_section, ranking_sentence
from shardscope.results.store import connect_readonly


def _rows(table: str) -> dict[str, list[str]]:
    """A Markdown table's body rows keyed by their first cell."""
    lines = table.splitlines()[2:]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return {row[0]: row[1:] for row in cells}


def test_ledger_section_lays_out_the_accuracy_ledger_of_a_gpu_database(gpu_db):
    with connect_readonly(gpu_db["db"]) as con:
        book = ledger(con)
    section = ledger_section(gpu_db["db"])
    assert section["has_pairs"] and book.collectives and book.training
    for table, groups in ((section["collectives"], book.collectives), (section["training"], book.training)):
        assert table.splitlines()[0].count("|") == 7  # six columns: no stray pipe in a header
        rows = _rows(table)
        assert set(rows) == {g.group for g in groups}
        for g in groups:
            assert rows[g.group] == [str(g.pairs), f"{g.median_ratio:.2f}", f"{g.median_error:.1%}",
                                     f"{g.worst_error:.1%}", f"{g.worst_ratio:.2f}"]
    assert "overall" in _rows(section["training"])  # two strategies: the overall row too
    assert section["ranking"] == ranking_sentence(book.ranking)
    pairs = book.ranking["pairs_ranked"]
    assert re.match(rf"The model orders {book.ranking['agree']} of {pairs} strategy pairs as measured", section["ranking"])


def test_ledger_section_of_a_cpu_database_shows_the_stored_calibrated_check_and_the_notes(module_db, tmp_path):
    # The report reads the calibrated check from the database (calibrate-step --store keeps it): it fits nothing.
    import shutil

    from shardscope.costmodel.step_calibration import store_calibrations

    db = tmp_path / "copy.duckdb"
    shutil.copy(module_db, db)
    with connect_readonly(db) as con:
        book = ledger(con)
    section = ledger_section(db)
    assert section["collectives"] is None and section["training"] is None and section["ranking"] is None
    assert section["calibrated"] is None and any("calibrate-step --store" in n for n in section["notes"])
    store_calibrations(str(db), [], created_at="2026-01-01T00:00:00+00:00")
    section = ledger_section(db)
    assert section["calibrated_on"] == book.calibrated_on and section["calibrated_on"].startswith("all_reduce on 2 ranks")
    assert set(_rows(section["calibrated"])) == {g.group for g in book.calibrated} >= {"all_reduce (fitted)", "held out"}
    assert section["notes"] == book.notes and any("no measured training run" in n for n in book.notes)


def test_ranking_sentence_names_the_disagreements():
    ranking = {"agree": 2, "pairs_ranked": 3, "within_noise": 1, "noise": 0.1,
               "disagree": ["tiny on 2: measured ddp faster than zero3, modeled the reverse"]}
    text = ranking_sentence(ranking)
    assert text.startswith("The model orders 2 of 3 strategy pairs as measured (pairs whose measured step times differ by more than 10%")
    assert text.endswith("it disagrees on: tiny on 2: measured ddp faster than zero3, modeled the reverse.")
    assert ranking_sentence({}) is None


def test_ledger_section_shows_the_newest_stored_step_calibration(module_db, tmp_path):
    import shutil

    from shardscope.costmodel.step_calibration import calibrate_steps, store_calibrations

    db = tmp_path / "copy.duckdb"
    shutil.copy(module_db, db)
    assert ledger_section(db)["step_calibration"] is None
    with connect_readonly(db) as con:
        found, _ = calibrate_steps(con)
    store_calibrations(str(db), found, created_at="2026-01-01T00:00:00+00:00")
    shown = ledger_section(db)["step_calibration"]
    assert shown["sentence"].startswith(f"{found[0].model} on {found[0].world_size} ranks")
    assert f"overlap {found[0].overlap:.2f}, " in shown["sentence"]
    assert (f"{found[0].call_overhead_s * 1e3:.2f} ms per collective call and {found[0].host_call_s * 1e6:.2f} us of host "
            f"work per recorded Python call, fitted on {len(found[0].run_ids)} measured runs") in shown["sentence"]
    rows = _rows(shown["table"])
    assert set(rows) == {s["strategy"] for s in found[0].strategies}
    first = found[0].strategies[0]
    assert rows[first["strategy"]][:3] == [f"{first['measured_s']:.4f}", f"{first['modeled_s']:.4f}",
                                           f"{first['modeled_s'] / first['measured_s'] - 1:+.1%}"]
    assert shown["ranking"].startswith("The model orders")
