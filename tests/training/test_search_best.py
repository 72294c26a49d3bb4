"""Fastest within memory: the search at one global batch, the best-micro-batch runs, the stored trials (pure Python).

The trials here are the launcher's stand-in (a rule of what fits); the real runs are the pipeline's
(benchmarks/best_microbatch.py runs one and prints its trials and best runs).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
import yaml

from shardscope.config import validate_config
from shardscope.contracts.jobs import TrainingJob, job_from_dict
from shardscope.errors import UserError
from shardscope.plan.machine import MachineProbe
from shardscope.plan.planner import make_plan
from shardscope.plan.summary import estimate
from shardscope.results.store import collect, validate_inputs
from shardscope.topology.detect import detect_cpu_only
from shardscope.plan.microbatch_search import search_largest
from shardscope.training.search import best_spec, run_best, run_search
from factories import default_config

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
NO_PEER = MachineProbe(which=lambda name: None)


@pytest.fixture()
def config() -> dict[str, Any]:
    return default_config()


def cpu_plan(config: dict[str, Any]) -> dict[str, Any]:
    return make_plan(detect_cpu_only().topology.to_dict(), config, NO_PEER)


def test_the_search_tries_only_micro_batches_that_reach_the_global_batch() -> None:
    asked: list[int] = []

    def trial(m: int) -> str:
        asked.append(m)
        return "ok" if m <= 5 else "over_budget"

    found = search_largest(trial, [1, 2, 3, 4, 6, 12])  # divisors of a per-rank batch of 12
    assert asked == [1, 2, 4, 12, 6] and found["best_micro_batch"] == 4  # 5 is no divisor: 4 x 3 is the best
    with pytest.raises(ValueError, match="ascending positive integers"):
        search_largest(trial, [4, 2])


def test_the_plan_sizes_each_search_from_one_global_batch(config: dict[str, Any]) -> None:
    config["training"]["search"] = {"limit": 8, "strategies": ["ddp", "fsdp"], "global_batch": 24,
                                    "activation_checkpointing": "full"}
    plan = cpu_plan(config)
    assert [(e["strategy"], e["per_rank_batch"], e["micro_batches"], e["activation_checkpointing"]) for e in plan["search"]] == [
        ("ddp", 12, [1, 2, 3, 4, 6], "full"), ("fsdp", 12, [1, 2, 3, 4, 6], "full")]  # up to the limit 8
    assert len(plan["training"]) == len(cpu_plan(default_config())["training"])
    est = estimate(plan)
    assert est.search_jobs == 2 * (4 + 1) and "at most 10 micro-batch search trials and best-micro-batch runs" in est.sentence()


@pytest.mark.parametrize(("key", "value", "message"), [
    ("global_batch", 15, "training.search.global_batch: 15 sequences do not split evenly over the 2 ranks"),
    ("global_batch", 0, "training.search.global_batch: 0 is not valid; expected a positive integer"),
    ("limit", 2.5, "training.search.limit: 2.5 is not valid; expected a positive integer"),
    ("activation_checkpointing", "some", "training.search.activation_checkpointing: 'some' is not a known value"),
])
def test_a_bad_search_key_stops_the_plan_naming_it(config: dict[str, Any], key: str, value: Any, message: str) -> None:
    config["training"]["search"] = {"limit": 8, key: value}
    with pytest.raises(UserError, match=f"^config key {message}"):
        cpu_plan(config)


@pytest.mark.parametrize(("section", "value", "key"), [
    ("training", {"search": {"limit": 4, "global_batch": 0}}, "training.search.global_batch"),
    ("training", {"search": {"limit": 4, "global_batch": 2.5}}, "training.search.global_batch"),
    ("cpu", {"repeats": 0}, "cpu.repeats"), ("cpu", {"repeats": "3"}, "cpu.repeats"),
    ("training", {"optimizer": "sgd"}, "training.optimizer"),
    ("training", {"activation_checkpointing": "half"}, "training.activation_checkpointing"),
    ("training", {"search": {"limit": 4, "activation_checkpointing": "half"}}, "training.search.activation_checkpointing"),
])
def test_the_pipeline_config_refuses_them_before_any_job(config: dict[str, Any], section: str, value: dict[str, Any],
                                                         key: str) -> None:
    config[section].update(value)
    with pytest.raises(UserError, match=rf"^invalid config key {key.replace('.', '[.]')}:"):
        validate_config(config, SCHEMA)


def test_repeats_that_are_not_a_positive_integer_stop_the_plan(config: dict[str, Any]) -> None:
    config["cpu"]["repeats"] = 0
    with pytest.raises(UserError, match=r"^config key cpu\.repeats: 0 is not valid; expected a positive integer"):
        cpu_plan(config)


def test_checkpointing_and_the_optimizer_go_from_the_config_to_the_worker(config: dict[str, Any],
                                                                       monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert all("activation_checkpointing" not in j and "optimizer" not in j for j in cpu_plan(config)["training"])
    config["training"]["activation_checkpointing"] = "full"
    job = job_from_dict(cpu_plan(config)["training"][0])
    assert job.activation_checkpointing == "full" and job.optimizer == "adamw"
    seen: list[TrainingJob] = []
    monkeypatch.setattr("shardscope.training.launch.launch", lambda spec, *a, **k: seen.append(spec) or 0)
    from shardscope.jobs.run import run_training

    run_training(job, str(tmp_path / "out.json"), str(tmp_path / "log"), "plan.json")
    assert seen == [job]  # the worker gets the spec whole (training.launch.write_spec), not flags rebuilt from it


def test_an_unknown_or_unfitting_optimizer_is_one_sentence_naming_the_key(config: dict[str, Any], tmp_path: Path) -> None:
    config["training"]["optimizer"] = "sgd"
    with pytest.raises(UserError, match="^config key training.optimizer: 'sgd' is not a known value; expected one of adamw"):
        cpu_plan(config)
    config["training"]["optimizer"] = "adamw_bf16_states"
    with pytest.raises(UserError, match="^config key training.optimizer: planned job 'ddp-tiny-ws2-local': adamw_bf16_states "
                                        "runs only under zero1, zero2, zero3 with dtype bfloat16"):
        cpu_plan(config)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(dict(config, training=dict(config["training"], optimizer="sgd"))))
    topo = tmp_path / "t.json"
    topo.write_text(json.dumps(detect_cpu_only().topology.to_dict()))
    proc = subprocess.run([sys.executable, "-m", "shardscope", "plan", "--topology", str(topo), "--config", str(tmp_path / "c.yaml")],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "training.optimizer: 'sgd'" in proc.stderr and "Traceback" not in proc.stderr


def _searched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict[str, Any], fits: dict[str, int]) -> dict[str, Any]:
    """Plan with a search of ddp and fsdp under a budget; run both searches with a stand-in launcher (``fits``: the
    largest micro-batch each strategy fits at its accumulation; 0 fits none: an oom). Returns paths and runs."""
    config["training"].update(search={"limit": 8, "strategies": ["ddp", "fsdp"]}, memory_budget_gib=0.01)
    plan = cpu_plan(config)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    launched: list[Any] = []

    def fake_run(spec: Any, out: str, log: str, where: str) -> int:
        launched.append(spec)
        ok = spec.micro_batch <= fits[spec.strategy]
        outcome = "ok" if ok else ("oom" if fits[spec.strategy] == 0 else "over_budget")
        Path(out).write_text(json.dumps({
            "kind": "training", "outcome": outcome, "error": None if ok else f"{outcome} at micro-batch {spec.micro_batch}",
            "env": {"host": "h", "measured_at": "2026-12-02T00:00:00+00:00", "backend": "gloo"},
            "summary": {"tokens_per_s": 1000.0 * spec.micro_batch if ok else None, "peak_memory_bytes": 2**20},
            "ranks": [{"tracked_peak_bytes": 2**20 * spec.micro_batch * spec.grad_accum}]}))
        return 0

    monkeypatch.setattr("shardscope.jobs.run.run_training", fake_run)
    out = {}
    for entry in plan["search"]:
        path = tmp_path / f"{entry['job_id']}.json"
        run_search(str(tmp_path / "plan.json"), entry["job_id"], str(path), str(tmp_path / "trials"), str(tmp_path / "log"))
        out[entry["strategy"]] = path
    return {"plan": plan, "summaries": out, "launched": launched}


def test_each_strategy_runs_at_its_own_best_with_accumulation_to_one_global_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict[str, Any]) -> None:
    done = _searched(tmp_path, monkeypatch, config, {"ddp": 2, "fsdp": 4})
    assert {(s.strategy, s.micro_batch, s.grad_accum) for s in done["launched"]} >= {("ddp", 2, 4), ("ddp", 4, 2), ("fsdp", 4, 2)}
    done["launched"].clear()
    for strategy, best, accum in (("ddp", 2, 4), ("fsdp", 4, 2)):
        job_id = f"{strategy}-tiny-ws2-local"
        run_best(str(tmp_path / "plan.json"), job_id, str(done["summaries"][strategy]), str(tmp_path / "b.json"), "log")
        spec = done["launched"][-1]
        assert (spec.job_id, spec.placement, spec.micro_batch, spec.grad_accum) == (
            f"{job_id}-best", "local@best_microbatch", best, accum)
        assert spec.repeats == config["cpu"]["repeats"] and spec.comm_profile  # measured as any training job
    with pytest.raises(UserError, match="not the micro-batch search of job 'fsdp-tiny-ws2-local'"):
        run_best(str(tmp_path / "plan.json"), "fsdp-tiny-ws2-local", str(done["summaries"]["ddp"]), "b.json", "log")


def test_every_trial_is_stored_ooms_included(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict[str, Any]) -> None:
    done = _searched(tmp_path, monkeypatch, config, {"ddp": 0, "fsdp": 4})
    ddp = json.loads(done["summaries"]["ddp"].read_text())
    assert ddp["best_micro_batch"] is None and "even micro-batch 1 does not fit" in ddp["reason"]
    entry = done["plan"]["search"][0]
    none_fits = best_spec(job_from_dict(done["plan"]["training"][0]), entry, ddp)
    assert (none_fits.micro_batch, none_fits.grad_accum) == (1, 8)  # the row that shows the oom and its reason
    db = tmp_path / "s.duckdb"
    collect(str(db), [str(p) for p in done["summaries"].values()])
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT strategy, micro_batch, grad_accum, global_batch, outcome, is_best, tracked_peak_bytes, "
                           "memory_budget_bytes FROM search_trials ORDER BY strategy, trial_order").fetchall()
        kinds = con.execute("SELECT DISTINCT kind, world_size FROM runs").fetchall()
    budget = int(0.01 * 2**30)
    assert rows == [("ddp", 1, 8, 16, "oom", False, 8 * 2**20, budget),
                    ("fsdp", 1, 8, 16, "ok", False, 8 * 2**20, budget), ("fsdp", 2, 4, 16, "ok", False, 8 * 2**20, budget),
                    ("fsdp", 4, 2, 16, "ok", True, 8 * 2**20, budget), ("fsdp", 8, 1, 16, "over_budget", False, 8 * 2**20, budget)]
    assert kinds == [("search", 2)]


def test_a_damaged_search_summary_is_refused_naming_the_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              config: dict[str, Any]) -> None:
    done = _searched(tmp_path, monkeypatch, config, {"ddp": 2, "fsdp": 4})
    doc = json.loads(done["summaries"]["fsdp"].read_text())
    bad = copy.deepcopy(doc)
    bad["trials"][1]["grad_accum"] = 3
    bad["best_micro_batch"] = 8
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    _, errors = validate_inputs([str(tmp_path / "bad.json")])
    assert any("trials[1].grad_accum: micro-batch 2 x accumulation 3 is not the per-rank batch 8" in e for e in errors)
    assert any("best_micro_batch: 8 is not a micro-batch whose trial finished ok" in e for e in errors)
    bad = dict(doc, trials=[dict(doc["trials"][0], outcome="exploded")])
    (tmp_path / "bad2.json").write_text(json.dumps(bad))
    _, errors = validate_inputs([str(tmp_path / "bad2.json")])
    assert any("search_trials" in e and "outcome" in e for e in errors)


def test_the_recommendation_names_the_strategy_and_micro_batch_of_the_best_runs() -> None:
    from shardscope.figures.plots_training import _batch_label
    from shardscope.paper.context import _recommendations

    def row(strategy: str, placement: str, mb: int, accum: int, step_s: float) -> dict[str, Any]:
        return {"fabric": "cpu", "host": "h", "model": "tiny", "world_size": 2, "placement": placement, "strategy": strategy,
                "outcome": "ok", "micro_batch": mb, "grad_accum": accum, "median_step_time_s": step_s, "held_bytes": 1.0,
                "held_bytes_vs_ddp": 1.0, "tokens_per_s_vs_ddp": 1.0, "ci95_low_tokens_per_s": None,
                "ci95_high_tokens_per_s": None}

    speed = pd.DataFrame([row("ddp", "local", 2, 1, 0.1), row("fsdp", "local", 2, 1, 0.2),
                          row("ddp", "local@best_microbatch", 2, 4, 0.5), row("fsdp", "local@best_microbatch", 4, 2, 0.4)])
    (sentence,) = _recommendations(speed)
    assert "FSDP" in sentence.split(" was fastest")[0] and "at micro-batch 4 x 2 accumulated (global batch 16" in sentence
    assert _batch_label(pd.Series(speed.iloc[3])) == "\nmb 4x2" and _batch_label(pd.Series(speed.iloc[1])) == ""
    (plain,) = _recommendations(speed.iloc[:2])
    assert "DDP was fastest (0.1000 s per step)" in plain


def test_another_conditions_job_trains_at_the_best_of_the_search_that_serves_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict[str, Any]) -> None:
    """pcie_like's DDP job has no search of its own: it runs at the best micro-batch fast's DDP search found, over its
    own fabric, accumulating to the same global batch."""
    config["emulated"].update(enabled=True, presets=["fast", "pcie_like"])
    config["training"].update(search={"limit": 8, "strategies": ["ddp", "fsdp"]}, memory_budget_gib=0.01)
    plan = make_plan(detect_cpu_only().topology.to_dict(), config,
                     MachineProbe(which=lambda name: None, emulated_problem=lambda delay, prefix: None))
    assert "ddp-tiny-ws2-all-pcie_like" not in {s["job_id"] for s in plan["search"]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    launched: list[Any] = []

    def fake_run(spec: Any, out: str, log: str, where: str) -> int:
        launched.append(spec)
        ok = spec.micro_batch <= 2
        Path(out).write_text(json.dumps({"kind": "training", "outcome": "ok" if ok else "over_budget", "error": None,
                                         "env": {"host": "h"}, "summary": {}, "ranks": []}))
        return 0

    monkeypatch.setattr("shardscope.jobs.run.run_training", fake_run)
    summary = tmp_path / "fast.json"
    run_search(str(tmp_path / "plan.json"), "ddp-tiny-ws2-all-fast", str(summary), str(tmp_path / "trials"), "log")
    assert {s.emulated["preset"] for s in launched} == {"fast"}  # the trials ran under the serving job's condition
    launched.clear()
    run_best(str(tmp_path / "plan.json"), "ddp-tiny-ws2-all-pcie_like", str(summary), str(tmp_path / "b.json"), "log")
    (spec,) = launched
    assert (spec.job_id, spec.placement, spec.micro_batch, spec.grad_accum, spec.seq_len, spec.emulated["preset"]) == (
        "ddp-tiny-ws2-all-pcie_like-best", "all@pcie_like@best_microbatch", 2, 4, 128, "pcie_like")
    with pytest.raises(UserError, match="not the micro-batch search of job 'fsdp-tiny-ws2-all-fast'"):
        run_best(str(tmp_path / "plan.json"), "fsdp-tiny-ws2-all-pcie_like", str(summary), "b.json", "log")
    with pytest.raises(UserError, match="job 'zero3-tiny-ws2-local' has no best-micro-batch run planned"):
        run_best(str(tmp_path / "plan.json"), "zero3-tiny-ws2-local", str(summary), "b.json", "log")
