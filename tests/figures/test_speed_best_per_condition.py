"""Figure 4 per fabric condition at each strategy's own best micro-batch: relative to that condition's DDP, OOM marked,
each bar labelled with its micro-batch x accumulation (runs collected into a database, then queried and drawn)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from factories import training_doc, write_docs  # noqa: E402

from shardscope.figures.plots_training import draw_speed_vs_ddp  # noqa: E402
from shardscope.results import queries  # noqa: E402
from shardscope.results.sources import open_results  # noqa: E402
from shardscope.results.store import collect  # noqa: E402


def _run(strategy: str, step_s: float, placement: str, micro: int = 2, accum: int | None = None,
         outcome: str = "ok") -> dict:
    doc = training_doc(strategy, step_time_s=step_s, outcome=outcome)
    doc["job"].update(job_id=f"{strategy}-tiny-ws2-{placement.replace('@', '-')}", placement=placement, micro_batch=micro)
    if accum is not None:
        doc["job"]["grad_accum"] = accum
    if outcome == "ok":
        tokens = micro * (accum or 1) * doc["job"]["seq_len"] * doc["job"]["world_size"]
        doc["summary"].update(tokens_per_step=tokens, tokens_per_s=tokens / step_s)
    return doc


@pytest.fixture(scope="module")
def speed(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("best")
    docs = [_run("ddp", 0.020, "all@fast"), _run("fsdp", 0.030, "all@fast"),
            _run("ddp", 0.040, "all@fast@best_microbatch", 2, 4), _run("fsdp", 0.025, "all@fast@best_microbatch", 4, 2),
            _run("ddp", 0.050, "all@pcie_like"), _run("fsdp", 0.150, "all@pcie_like"),
            _run("ddp", 0.100, "all@pcie_like@best_microbatch", 2, 4),
            _run("fsdp", 0.200, "all@pcie_like@best_microbatch", 4, 2),
            _run("ddp", 0.010, "local"), _run("zero3", 0.010, "local"),
            _run("ddp", 0.010, "local@best_microbatch", 1, 8, outcome="over_budget"),
            _run("zero3", 0.020, "local@best_microbatch", 2, 4)]
    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "in", docs))
    with open_results(db) as con:
        return queries.strategy_speed(con)


def test_the_data_says_per_condition_which_runs_are_at_their_best(speed) -> None:
    best = speed[speed["at_best_microbatch"]].set_index(["condition", "strategy"])
    assert set(best.index) == {("all@fast", "ddp"), ("all@fast", "fsdp"), ("all@pcie_like", "ddp"),
                               ("all@pcie_like", "fsdp"), ("local", "ddp"), ("local", "zero3")}
    # each condition's best runs against that condition's DDP best run, not the configured one
    assert best.loc[("all@fast", "fsdp"), "tokens_per_s_vs_ddp"] == pytest.approx(0.040 / 0.025)
    assert best.loc[("all@pcie_like", "fsdp"), "tokens_per_s_vs_ddp"] == pytest.approx(0.100 / 0.200)
    assert (best.loc[("all@fast", "fsdp"), "micro_batch"], best.loc[("all@fast", "fsdp"), "grad_accum"]) == (4, 2)
    assert best.loc[("local", "ddp"), "outcome"] == "over_budget" and best["tokens_per_s_vs_ddp"].loc["local"].isna().all()
    configured = speed[~speed["at_best_microbatch"]].set_index(["condition", "strategy"])
    assert configured.loc[("all@pcie_like", "fsdp"), "tokens_per_s_vs_ddp"] == pytest.approx(0.050 / 0.150)


def test_figure_4_draws_a_row_per_condition_with_its_best_panel(speed) -> None:
    fig = draw_speed_vs_ddp(speed)
    titled = [ax for ax in fig.axes if ax.get_title()]
    assert len(titled) == 6  # 3 conditions x (configured, at best)
    best = [ax for ax in titled if "own best micro-batch" in ax.get_title()]
    assert len(best) == 3 and all("global batch 16" in ax.get_title() for ax in best)
    pcie = next(ax for ax in best if "condition all@pcie_like" in ax.get_title())
    labels = [t.get_text() for t in pcie.texts]
    assert "1.00x\nmb 2x4" in labels and "0.50x\nmb 4x2" in labels  # ratio and micro-batch x accumulation
    local = next(ax for ax in best if "condition local" in ax.get_title())
    texts = [t.get_text() for t in local.texts]
    assert any(t.startswith("over\nbudget\nmb 1x8") for t in texts)  # DDP over budget: marked, no bar; no baseline
    assert any(t.startswith("no DDP\nbaseline\nmb 2x4") for t in texts)
    configured = next(ax for ax in titled if "condition all@fast" in ax.get_title() and ax not in best)
    assert "configured micro-batch 2" in configured.get_title()


def test_a_condition_without_best_runs_says_so(speed) -> None:
    sub = speed[~((speed["condition"] == "all@pcie_like") & speed["at_best_microbatch"])]
    fig = draw_speed_vs_ddp(sub)
    assert any("no best-micro-batch run under this condition" in t.get_text() for ax in fig.axes for t in ax.texts)


def test_the_answer_names_each_conditions_best_runs(speed) -> None:
    from shardscope.figures.captions import answer_speed

    text = answer_speed(speed)
    assert "Each strategy at its own best micro-batch" in text
    assert "all@pcie_like · default (tiny on 2 ranks, hostA): DDP 1.00x (mb 2x4), FSDP 0.50x (mb 4x2)" in text
    assert "local · default (tiny on 2 ranks, hostA): DDP over_budget (mb 1x8), ZeRO-3 no DDP baseline (mb 2x4)" in text
