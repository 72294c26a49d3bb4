"""The memory model's terms are computed once, by the predictions stage, and figure 3 only reads them."""

from __future__ import annotations

import pytest
from factories import query_db, training_doc, with_run_predictions, write_docs

from shardscope.contracts.models import PRESETS
from shardscope.results.store import collect
from shardscope.costmodel.memory_check import memory_terms_rows, modeled_for_job
from shardscope.costmodel.memory_peak import StepShape, predict_peak
from shardscope.costmodel.modeled import implementation_memory

TERMS = "param_bytes, grad_bytes, optim_bytes, activation_bytes, buffer_bytes, overhead_bytes, peak_bytes, peak_phase"


def test_the_predictions_stage_stores_every_term_of_both_models_and_figure_3_reads_them(tmp_path) -> None:
    from shardscope.results.queries import memory_measured_and_modeled
    from shardscope.results.sources import open_results

    zero2 = training_doc("zero2")
    zero2["settings"] = {"reduce_dtype_requested": "auto", "bucket_policy": "equal_bytes", "overlap_comm": False}
    db = tmp_path / "r.duckdb"
    collect(db, with_run_predictions(write_docs(tmp_path / "in", [training_doc("ddp"), zero2])))
    rows = query_db(db, f"SELECT p.strategy, p.memory_model, p.method, {TERMS} FROM memory_peak_predictions p "
                        "JOIN training_runs t ON t.run_id = p.measured_run_id ORDER BY 1, 2")
    assert [(r[0], r[1], r[2]) for r in rows] == [("ddp", "ZeRO paper", "modeled"), ("ddp", "implementation", "modeled"),
                                                  ("zero2", "ZeRO paper", "modeled"), ("zero2", "implementation", "modeled")]
    # the stored implementation row is the model for the run's own shape and recorded settings
    want = modeled_for_job(zero2)
    stored = dict(zip(TERMS.split(", "), rows[3][3:]))
    assert stored == {k: getattr(want, k) for k in TERMS.split(", ")}
    assert stored["buffer_bytes"] < 100e6  # --buckets equal: 25 MiB buckets, not DeepSpeed's 2 GB default
    assert sum(v for k, v in stored.items() if k not in ("peak_bytes", "peak_phase")) == stored["peak_bytes"]

    with open_results(db) as con:
        figure = memory_measured_and_modeled(con)
    modeled = figure[(figure["method"] == "modeled") & (figure["strategy"] == "zero2")].set_index("memory_model")
    assert modeled.loc["implementation", "tracked_peak_bytes"] == stored["peak_bytes"]
    assert modeled.loc["implementation", "buffer_bytes"] == stored["buffer_bytes"]
    paper = dict(zip(TERMS.split(", "), rows[2][3:]))
    assert modeled.loc["ZeRO paper", "held_bytes"] == paper["param_bytes"] + paper["grad_bytes"] + paper["optim_bytes"]


def test_a_run_whose_shape_is_unknown_gets_no_terms() -> None:
    doc = training_doc("ddp")
    del doc["job"]["seq_len"]
    assert memory_terms_rows("r1", doc) == []
    doc = training_doc("ddp")
    doc["job"]["model"] = "no-such-preset"
    assert memory_terms_rows("r1", doc) == []


def test_stored_rows_use_the_recorded_model_config() -> None:
    doc = training_doc("zero1")
    cfg = PRESETS["tiny"]
    doc["job"].update(model="custom", model_config=cfg.to_dict())
    (paper, impl) = memory_terms_rows("r1", doc)
    states = implementation_memory(cfg.param_count(), "zero1", 2, "float32")
    assert impl["peak_bytes"] == predict_peak("zero1", cfg, 2, StepShape(2, 64), held=states, device="cpu").peak_bytes
    assert paper["memory_model"] == "ZeRO paper" and paper["optim_bytes"] < impl["optim_bytes"]  # DeepSpeed's fp32 master


@pytest.mark.parametrize("strategy", ["ddp", "zero3"])
def test_stored_terms_pass_the_schema(strategy: str) -> None:
    import pandas as pd

    from shardscope.results.schemas import TABLES

    frame = pd.DataFrame(memory_terms_rows("r1", training_doc(strategy))).assign(measured_run_id="m1")
    TABLES["memory_peak_predictions"].validate(frame)
    broken = frame.assign(peak_bytes=frame["peak_bytes"] + 1)
    with pytest.raises(Exception, match="sum of the states"):
        TABLES["memory_peak_predictions"].validate(broken)


def test_a_database_from_before_the_table_draws_no_modeled_rows(tmp_path) -> None:
    import duckdb

    from shardscope.results.queries import memory_measured_and_modeled
    from shardscope.results.sources import open_results

    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "in", [training_doc("ddp")]))
    with duckdb.connect(str(db)) as con:
        con.execute("DROP TABLE memory_peak_predictions")
    with open_results(db) as con:
        figure = memory_measured_and_modeled(con)
    assert list(figure["method"]) == ["measured"]
