"""A database of many machines: figures stay bounded, plot exactly their query, and rank machines of a kind."""

from __future__ import annotations

import struct
from pathlib import Path

import pandas as pd
import pytest
from factories import collective_doc, training_doc, write_docs

from shardscope.figures import queries
from shardscope.figures.plots import FIGURES, draw_all
from shardscope.figures.sources import open_results

#: 14 machines: 12 of one kind (CPU "AMD EPYC"), 2 of another ("Intel Xeon"); node-07 is slow.
HOSTS = [f"node-{i:02d}" for i in range(14)]
SLOW = "node-07"
MAX_WIDTH_PX = 4000


def _docs(host: str) -> list[dict]:
    slow = 1.5 if host == SLOW else 1.0
    wobble = 1 + 0.01 * (int(host[-2:]) % 5)  # machines of a kind differ a little
    docs = [collective_doc("all_reduce", host=host, seconds_per_byte=1e-9 * slow * wobble),
            training_doc("ddp", host=host, step_time_s=0.02 * slow * wobble),
            training_doc("zero3", host=host, step_time_s=0.03 * slow * wobble)]
    if int(host[-2:]) >= 12:
        for doc in docs:
            doc["env"]["devices"] = ["Intel Xeon"]
    return docs


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from shardscope.results.store import collect

    tmp = tmp_path_factory.mktemp("fleet")
    db = tmp / "fleet.duckdb"
    collect(db, write_docs(tmp / "in", [doc for host in HOSTS for doc in _docs(host)]))
    draw_all(db, tmp / "figs")
    return db, tmp / "figs"


def _png_width(path: Path) -> int:
    return struct.unpack(">I", path.read_bytes()[16:20])[0]


def test_every_figure_stays_within_the_width_bound(fleet):
    _, figs = fleet
    widths = {f.name: _png_width(figs / f"{f.name}.png") for f in FIGURES}
    assert all(w <= MAX_WIDTH_PX for w in widths.values()), widths


def test_the_figures_data_is_exactly_the_query(fleet):
    db, figs = fleet
    with open_results(db, None) as con:
        expected = {"speed_vs_ddp": queries.strategy_speed(con), "memory_by_strategy": queries.memory_measured_and_modeled(con),
                    "machine_ranking": queries.machine_ranking(con)}
    for name, df in expected.items():
        assert (figs / f"{name}.csv").read_text() == df.to_csv(index=False), name
    speed = pd.read_csv(figs / "speed_vs_ddp.csv")
    assert set(speed["host"]) == set(HOSTS) and set(speed["gpu_model"]) == {"cpu", "Intel Xeon"}


def test_machines_of_a_kind_are_ranked_and_the_slow_one_named(fleet):
    _, figs = fleet
    ranking = pd.read_csv(figs / "machine_ranking.csv")
    ddp = ranking[(ranking["measure"] == "DDP tokens/s") & (ranking["gpu_model"] == "cpu")]
    assert len(ddp) == 12 and ddp.iloc[0]["host"] == SLOW and ddp.iloc[0]["rank"] == 1
    assert ddp.set_index("host").loc[SLOW, "verdict"] == "slow"
    assert set(ddp[ddp["host"] != SLOW]["verdict"]) == {"ok"}
    assert ddp["vs_kind_median"].tolist() == pytest.approx((ddp["value"] / ddp["value"].median()).tolist())
    answer = (figs / "machine_ranking.answer.rst").read_text()
    assert f"1 slow: {SLOW}" in answer


def test_captions_summarise_instead_of_listing_every_host(fleet):
    _, figs = fleet
    speed = (figs / "speed_vs_ddp.answer.rst").read_text()
    memory = (figs / "memory_by_strategy.answer.rst").read_text()
    assert "12 machines" in speed and "across machines" in speed
    assert "On 12 machines (cpu, cpu; median per strategy" in memory
    for text in (speed, memory):
        assert sum(host in text for host in HOSTS) <= 2, text  # the two machines of the small kind may be named
