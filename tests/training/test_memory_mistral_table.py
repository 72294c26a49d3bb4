"""The report's Mistral-7B table: the predictions stage stores the seed's case, the report only queries it."""

from __future__ import annotations

import json

import pytest
import yaml
from factories import REPO, training_doc, write_docs, write_json, default_config

from shardscope.results.store import collect
from shardscope.costmodel.memory_peak import whole_peak

H200 = REPO / "tests" / "data" / "topo" / "01-hgx-h200-nvswitch-nv18-12nics.txt"
STRATEGIES = ("ddp", "fsdp", "fsdp_grad_op", "hsdp", "zero0", "zero1", "zero2", "zero3")


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory):
    from shardscope.costmodel.documents import plan_predictions
    from shardscope.plan.planner import make_plan
    from shardscope.topology.parse import parse_file

    tmp = tmp_path_factory.mktemp("mistral")
    topology = json.loads(json.dumps(parse_file(H200).to_dict()))
    plan = make_plan(topology, default_config())
    predictions = plan_predictions(topology, plan, "01-hgx-h200", created_at="2026-12-01T00:00:00+00:00")
    measured = training_doc("zero3")
    measured["job"].update(model="mistral-7b", param_count=7241732096, world_size=8, micro_batch=1, seq_len=4096,
                           dtype="bfloat16", job_id="zero3-mistral-7b-ws8-local")
    measured["summary"].update(tokens_per_step=8 * 4096, tokens_per_s=8 * 4096 / measured["summary"]["median_step_time_s"])
    measured["ranks"] = [dict(r, tracked_peak_bytes=52_000_000_000 + r["rank"]) for r in measured["ranks"]]
    db = tmp / "r.duckdb"
    collect(db, [write_json(tmp / "predictions.json", predictions), *write_docs(tmp / "runs", [measured])])
    return db, predictions


def test_the_predictions_stage_stores_the_seed_case_and_the_planned_jobs(database) -> None:
    _, predictions = database
    seed = [r for r in predictions["memory"] if r["memory_case"] == "seed_mistral"]
    assert {(r["strategy"], r["checkpointing"]) for r in seed} == {(s, c) for s in STRATEGIES for c in ("none", "full")}
    zero3_full = next(r for r in seed if (r["strategy"], r["checkpointing"]) == ("zero3", "full"))
    # the seed case's 80 GB: the allocator's cache grows into the room it leaves
    assert zero3_full["peak_bytes"] == whole_peak("zero3", "mistral-7b", 8, 4096, 1, "full",
                                                  capacity_bytes=80e9).peak_bytes
    planned = [r for r in predictions["memory"] if r["memory_case"] == "planned"]
    assert planned and all(r["capacity_bytes"] and r["fits"] is not None for r in planned)  # the H200's memory


def test_the_report_table_is_modeled_per_strategy_and_measured_where_a_run_exists(database) -> None:
    from shardscope.results.sources import open_results
    from shardscope.results.memory_case_queries import mistral_peak_table

    db, _ = database
    with open_results(db) as con:
        table = mistral_peak_table(con).set_index("strategy")
    assert sorted(table.index) == sorted(STRATEGIES)
    for strategy in STRATEGIES:
        none = whole_peak(strategy, "mistral-7b", 8, 4096, 1, "none", capacity_bytes=80e9)
        full = whole_peak(strategy, "mistral-7b", 8, 4096, 1, "full", capacity_bytes=80e9)
        assert table.loc[strategy, "peak_none_gb"] == pytest.approx(none.peak_bytes / 1e9)
        assert table.loc[strategy, "peak_full_gb"] == pytest.approx(full.peak_bytes / 1e9)
        assert table.loc[strategy, "fits_none"] == ("yes" if none.fits(80e9) else "no")
        assert table.loc[strategy, "fits_full"] == ("yes" if full.fits(80e9) else "no")
    assert table.loc["ddp", "fits_none"] == "no" and table.loc["zero3", "fits_full"] == "yes"
    assert table.loc["zero3", "measured_peak_gb"] == pytest.approx(52.000000001)
    assert table.loc["zero3", "measured_method"] == "tracked tensors"
    assert table.loc["ddp", "measured_peak_gb"] is None or table["measured_peak_gb"].isna()["ddp"]
