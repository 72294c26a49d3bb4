"""The micro-batch search: doubling then bisection, every trial kept and read back, OOMs included."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from shardscope.errors import UserError
from shardscope.plan.machine import MachineProbe
from shardscope.plan.planner import make_plan
from shardscope.topology.detect import detect_cpu_only
from shardscope.contracts.jobs import job_from_dict
from shardscope.plan.microbatch_search import search_largest
from shardscope.training.search import run_search, trial_path, trial_spec
from factories import default_config

REPO = Path(__file__).resolve().parents[2]


def fits_below(largest: int, over: str = "oom") -> tuple[list[int], Any]:
    """A trial that fits up to ``largest`` (a strategy whose memory allows that much), recording what it was asked."""
    asked: list[int] = []

    def trial(m: int) -> str:
        asked.append(m)
        return "ok" if m <= largest else over

    return asked, trial


@pytest.mark.parametrize(("largest", "limit", "order", "best"), [
    (5, 64, [1, 2, 4, 8, 6, 5], 5),          # doubling to 8, then bisection between 4 and 8
    (8, 64, [1, 2, 4, 8, 16, 12, 10, 9], 8),
    (1, 64, [1, 2], 1),
    (100, 24, [1, 2, 4, 8, 16, 24], 24),    # every trial fits: the limit
    (0, 64, [1], None),                      # even 1 does not fit: an oom row, no best
])
def test_doubling_then_bisection(largest: int, limit: int, order: list[int], best: int | None) -> None:
    asked, trial = fits_below(largest)
    found = search_largest(trial, limit)
    assert asked == order and found["best_micro_batch"] == best
    assert [t["micro_batch"] for t in found["trials"]] == order  # every trial kept, the failing ones too
    assert all(t["outcome"] in ("ok", "oom") for t in found["trials"])


def test_a_sharded_strategy_with_more_room_finds_a_larger_micro_batch() -> None:
    assert search_largest(fits_below(3, "over_budget")[1], 64)["best_micro_batch"] == 3   # DDP under a budget
    assert search_largest(fits_below(11, "over_budget")[1], 64)["best_micro_batch"] == 11  # ZeRO-3 under the same


def test_a_search_from_the_modeled_micro_batch_costs_two_trials_when_the_model_is_right() -> None:
    candidates = [1, 2, 4, 8, 16, 32, 64]
    right = search_largest(lambda m: "ok" if m <= 8 else "oom", candidates, start=8)
    assert [t["micro_batch"] for t in right["trials"]] == [8, 16] and right["best_micro_batch"] == 8
    high = search_largest(lambda m: "ok" if m <= 2 else "oom", candidates, start=8)  # the model too optimistic
    assert [t["micro_batch"] for t in high["trials"]] == [8, 2, 4] and high["best_micro_batch"] == 2
    low = search_largest(lambda m: "ok" if m <= 32 else "oom", candidates, start=8)  # too pessimistic
    assert [t["micro_batch"] for t in low["trials"]] == [8, 16, 32, 64] and low["best_micro_batch"] == 32
    top = search_largest(lambda m: "ok", candidates, start=64)
    assert [t["micro_batch"] for t in top["trials"]] == [64]
    none = search_largest(lambda m: "oom", candidates, start=4)
    assert none["best_micro_batch"] is None and [t["micro_batch"] for t in none["trials"]] == [4, 1]
    for k in range(0, 65):  # from any start, the answer of the search from the smallest
        fits = lambda m, k=k: "ok" if m <= k else "oom"  # noqa: E731
        assert all(search_largest(fits, candidates, start=s)["best_micro_batch"]
                   == search_largest(fits, candidates)["best_micro_batch"] for s in candidates)
    with pytest.raises(ValueError, match="one of the candidates"):
        search_largest(lambda m: "ok", candidates, start=3)


def test_a_failed_trial_stops_the_search_and_says_so() -> None:
    found = search_largest(lambda m: "ok" if m < 4 else "failed", 64)
    assert found["best_micro_batch"] == 2 and "micro-batch 4 ended with outcome 'failed'" in found["reason"]
    with pytest.raises(ValueError, match="positive integer"):
        search_largest(lambda m: "ok", 0)


def test_trials_on_disk_are_read_back_not_rerun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = default_config()
    config["training"]["search"] = {"limit": 8, "strategies": ["zero3"]}
    plan = make_plan(detect_cpu_only().topology.to_dict(), config, MachineProbe(which=lambda n: None))
    assert plan["search"] == [{"job_id": "zero3-tiny-ws2-local", "strategy": "zero3", "limit": 8, "global_batch": 16,
                               "per_rank_batch": 8, "micro_batches": [1, 2, 4, 8], "activation_checkpointing": "none",
                               "start_micro_batch": None, "best_job_id": "zero3-tiny-ws2-local-best",
                               "best_placement": "local@best_microbatch",
                               "trials_under": "default", "serves": ["zero3-tiny-ws2-local"]}]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    trials = tmp_path / "trials"
    ran: list[tuple[int, int]] = []

    def fake_run(spec: Any, out: str, log: str, where: str) -> int:  # the launcher's stand-in: fits up to 4 (x 2)
        ran.append((spec.micro_batch, spec.grad_accum))
        assert spec.repeats == 1 and not spec.comm_profile  # a trial only says whether it fits
        Path(out).write_text(json.dumps({"outcome": "ok" if spec.micro_batch <= 4 else "over_budget",
                                         "summary": {"peak_memory_bytes": 1000 * spec.micro_batch}, "error": None,
                                         "ranks": [{"tracked_peak_bytes": 10 * spec.micro_batch + r} for r in (0, 1)]}))
        return 0

    monkeypatch.setattr("shardscope.jobs.run.run_training", fake_run)
    job = job_from_dict(plan["training"][[j["job_id"] for j in plan["training"]].index("zero3-tiny-ws2-local")])
    first = trial_path(trials, trial_spec(job, plan["search"][0], 1))
    first.parent.mkdir(parents=True)
    first.write_text(json.dumps({"outcome": "ok", "summary": {}}))  # a stopped search: micro-batch 1 x 8 is done
    summary = run_search(str(tmp_path / "plan.json"), "zero3-tiny-ws2-local", str(tmp_path / "s.json"), str(trials), "log")
    assert ran == [(2, 4), (4, 2), (8, 1)] and summary["best_micro_batch"] == 4 and summary["best_grad_accum"] == 2
    last = json.loads((tmp_path / "s.json").read_text())["trials"][-1]
    assert last == {"micro_batch": 8, "outcome": "over_budget", "peak_memory_bytes": 8000, "tokens_per_s": None,
                    "error": None, "tracked_peak_bytes": 81, "job_id": "zero3-tiny-ws2-local-mb8x1", "grad_accum": 1,
                    "result": last["result"]}
    assert Path(last["result"]).name.startswith("zero3-tiny-ws2-local-mb8x1-")  # named by the trial's spec digest
    ran.clear()
    run_search(str(tmp_path / "plan.json"), "zero3-tiny-ws2-local", str(tmp_path / "s.json"), str(trials), "log")
    assert ran == []  # every trial cached
    config["training"]["memory_budget_gib"] = 1.0  # another spec: the cached trials are not read back
    replanned = make_plan(detect_cpu_only().topology.to_dict(), config, MachineProbe(which=lambda n: None))
    (tmp_path / "plan.json").write_text(json.dumps(replanned))
    run_search(str(tmp_path / "plan.json"), "zero3-tiny-ws2-local", str(tmp_path / "s.json"), str(trials), "log")
    assert ran == [(1, 8), (2, 4), (4, 2), (8, 1)]
    with pytest.raises(UserError, match="no job 'nope'"):
        run_search(str(tmp_path / "plan.json"), "nope", str(tmp_path / "s.json"), str(trials), "log")
    with pytest.raises(UserError, match="no micro-batch search planned"):
        run_search(str(tmp_path / "plan.json"), "ddp-tiny-ws2-local", str(tmp_path / "s.json"), str(trials), "log")


def test_no_search_unless_configured() -> None:
    config = default_config()
    assert make_plan(detect_cpu_only().topology.to_dict(), copy.deepcopy(config), MachineProbe(which=lambda n: None))["search"] == []


@pytest.mark.parametrize("limit", [0, -3, 2.5, "8"])
def test_a_search_limit_that_is_not_a_positive_integer_stops_before_any_job(limit: Any) -> None:
    from shardscope.config import validate_config

    config = default_config()
    config["training"]["search"] = {"limit": limit}
    with pytest.raises(UserError, match="^invalid config key training.search.limit:"):
        validate_config(config, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
