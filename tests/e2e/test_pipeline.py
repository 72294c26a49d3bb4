"""The real pipeline end to end on this machine: torchrun, gloo, DeepSpeed, DuckDB, figures, report.

One reduced-config run (module-scoped) feeds every check; it takes about a minute on 2 cores.
It trains every strategy but :data:`ADDED_LATER`, which the rerun test adds to show that only
its job would run.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from factories import query_db, snakemake_words, workflow_folder

from shardscope.contracts.factors import busbw_factor

#: The strategy the pipeline run leaves out, added by the rerun test (its job alone must then run).
ADDED_LATER = "zero0"
STRATEGIES = ["ddp", "fsdp", "fsdp_grad_op", "zero1", "zero2", "zero3"]
OPS = ["all_reduce", "all_gather", "reduce_scatter"]

pytestmark = pytest.mark.e2e


def reduced_config(results: Path) -> dict:
    return {
        "results": str(results),
        "db": str(results / "shardscope.duckdb"),
        "collectives": {"ops": OPS, "dtype": "float32", "transports": ["default", "pcie"], "check": True},
        "training": {"strategies": STRATEGIES, "world_sizes": "max", "memory_budget_gib": None},
        "cpu": {"ranks": 2, "sweep": {"min_bytes": 1024, "max_bytes": 262144, "factor": 16, "warmup": 1, "iters": 3},
                "model": "tiny", "dtype": "float32", "micro_batch": 2, "seq_len": 32, "warmup": 1, "steps": 3},
    }


#: The folder every Snakemake run of this module runs in (tests/factories.py's workflow_folder: the shipped default
#: config, never the working tree's; one .snakemake/ for the module, so reruns see the earlier runs' records).
WORKDIR: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def workdir(tmp_path_factory) -> Path:
    WORKDIR[:] = [workflow_folder(tmp_path_factory.mktemp("workdir"), {})]
    return WORKDIR[0]


def run_snakemake(configfile: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(snakemake_words("--cores", "2", "--configfile", str(configfile), *extra),
                          cwd=WORKDIR[0], capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pipeline")
    configfile = tmp / "config.yaml"
    configfile.write_text(yaml.safe_dump(reduced_config(tmp / "results")))
    result = run_snakemake(configfile)
    assert result.returncode == 0, result.stderr[-5000:]
    return tmp / "results", configfile


def test_topology_and_plan_come_from_this_machine(pipeline):
    import json

    results, _ = pipeline
    topology = json.loads((results / "topology" / "topology.json").read_text())
    plan = json.loads((results / "plan" / "plan.json").read_text())
    assert topology["fabric"] == "cpu" and topology["numa_nodes"] and topology["cpu"]["logical_cpus"] >= 1
    assert plan["device"] == "cpu" and plan["world_sizes"] == [2]
    assert {j["transport"] for j in plan["collectives"]} == {"default"}  # no NVLink to switch off here


def test_database_has_every_op_and_strategy(pipeline):
    results, _ = pipeline
    db = results / "shardscope.duckdb"
    assert sorted(r[0] for r in query_db(db, "SELECT DISTINCT op FROM collectives")) == sorted(OPS)
    rows = query_db(db, "SELECT strategy, outcome, median_step_time_s, tokens_per_s, world_size FROM training_runs")
    assert sorted(r[0] for r in rows) == sorted(STRATEGIES)
    for strategy, outcome, step_s, tok_s, ws in rows:
        assert outcome == "ok", strategy
        assert step_s > 0 and tok_s > 0 and ws == 2
    assert query_db(db, "SELECT count(*) FROM training_steps WHERE step_time_s <= 0")[0][0] == 0
    # 3 steps in each of config.yaml's cpu.repeats (3) timed windows (issue 17); the median and 95% interval are stored
    assert query_db(db, "SELECT count(*), count(DISTINCT run_id) FROM training_steps")[0] == (3 * 3 * len(STRATEGIES), len(STRATEGIES))
    assert query_db(db, "SELECT min(repeats), max(repeats), count(ci95_low_step_time_s), count(comm_volume_bytes) FROM training_runs")[0] \
        == (3, 3, len(STRATEGIES), len(STRATEGIES))


def test_bus_bandwidth_is_consistent_with_algbw_and_world_size(pipeline):
    results, _ = pipeline
    rows = query_db(results / "shardscope.duckdb", "SELECT op, world_size, size_bytes, time_s, algbw_gbps, busbw_gbps, check_ok FROM collectives")
    assert len(rows) == len(OPS) * 3  # sizes 1 KiB, 16 KiB, 256 KiB
    for op, n, size, t, algbw, busbw, ok in rows:
        assert t > 0 and ok is True
        assert algbw == pytest.approx(size / t / 1e9, rel=1e-9)
        assert busbw == pytest.approx(algbw * busbw_factor(op, n), rel=1e-9)


def test_sharded_strategies_hold_less_of_what_they_shard(pipeline):
    results, _ = pipeline
    held = {s: (p, g, o) for s, p, g, o in query_db(results / "shardscope.duckdb", """
        SELECT t.strategy, max(m.param_bytes), max(m.grad_bytes), max(m.optim_bytes)
        FROM training_memory m JOIN training_runs t USING (run_id) GROUP BY 1""")}
    ddp_p, ddp_g, ddp_o = held["ddp"]
    assert held["zero1"][2] < ddp_o
    assert held["zero2"][1] < ddp_g and held["zero2"][2] < ddp_o
    assert held["fsdp_grad_op"][1] < ddp_g and held["fsdp_grad_op"][2] < ddp_o
    for strategy in ("zero3", "fsdp"):
        p, g, o = held[strategy]
        assert p < ddp_p and g < ddp_g and o < ddp_o, strategy


def test_figures_and_report_exist_and_regenerate_from_the_database_alone(pipeline, tmp_path):
    results, _ = pipeline
    for name in ("busbw_vs_size", "allreduce_peak_vs_gpus", "memory_by_strategy", "speed_vs_ddp"):
        assert (results / "figures" / f"{name}.png").stat().st_size > 10_000
        assert (results / "figures" / f"{name}.pdf").exists()
    assert "<table>" in (results / "paper" / "report.html").read_text()
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "shardscope", "figures", "--db", str(results / "shardscope.duckdb"),
                          "--reference-db", str(results / "reference" / "reference.duckdb"),
                          "--out", str(tmp_path / "again")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert time.perf_counter() - start < 20
    assert (tmp_path / "again" / "busbw_vs_size.csv").read_text() == (results / "figures" / "busbw_vs_size.csv").read_text()


def test_predictions_verdicts_and_doctor_findings_are_stored(pipeline):
    results, _ = pipeline
    db = results / "shardscope.duckdb"
    for table in ("collective_predictions", "verdicts", "verdict_rows", "doctor_findings"):
        assert query_db(db, f"SELECT count(*) FROM {table}")[0][0] > 0, table
    # Every collective job is judged, and the verdict names the run it judged.
    judged = query_db(db, "SELECT v.judged_run_id, r.kind FROM verdicts v LEFT JOIN runs r ON r.run_id = v.judged_run_id")
    assert len(judged) == len(OPS) and {kind for _, kind in judged} == {"collectives"}


def test_verdicts_on_this_cpu_machine_are_unknown_with_a_reason(pipeline):
    results, _ = pipeline
    rows = query_db(results / "shardscope.duckdb", "SELECT verdict, reason, expected_busbw_gbps FROM verdicts")
    assert rows and all(verdict == "unknown" and expected is None for verdict, _, expected in rows)
    assert all(reason and reason.startswith("CPU processes over gloo") for _, reason, _ in rows)
    # The cost model's gloo numbers are stored as placeholders (fabric cpu) and never drawn as a modeled curve.
    assert {f for (f,) in query_db(results / "shardscope.duckdb", "SELECT DISTINCT fabric FROM collective_predictions")} == {"cpu"}
    plotted = (results / "figures" / "busbw_vs_size.csv").read_text()
    assert ",modeled," not in plotted and "unknown: CPU processes over gloo" in plotted
    assert "no physical link model exists for gloo on CPU" in (results / "figures" / "busbw_vs_size.answer.rst").read_text()


def test_step_model_calibrated_on_this_machine_covers_every_strategy(pipeline):
    """Issue 19's CPU check: compute rate, overlap and per-call overhead fitted on this run's training jobs (collectives
    timed by the alpha-beta fit of its gloo sweep, bytes as each run recorded them). The 20% target is printed by
    benchmarks/step_calibration.py, not asserted here: on a shared 2-core machine one run's step times move by more
    than that; this asserts the fit covers every strategy and stays within a sanity bound, measured from each run's
    own 95% interval of its median step rather than from the median (a DDP run measured 0.014 s with an interval of
    0.006-0.048 s, where the fit said 0.053: a ratio to the median says more about that run's noise than about the
    model): the median strategy within 2x of its interval, every strategy within 5x. The tiny model's steps on CPU are
    nearly all host and communication overhead, so the fitted rate is poorly determined and one strategy can land far
    off in a CI run beside the Slurm tests (zero3 at 3.6x below its interval of 0.064-0.084 s, the fit's seconds per
    Python call at 0); a fit in wrong units or missing a term for every strategy fails both."""

    from shardscope.costmodel.step_calibration import calibrate_steps, format_calibrations
    from shardscope.results.store import connect_readonly

    results, _ = pipeline
    with connect_readonly(results / "shardscope.duckdb") as con:
        found, notes = calibrate_steps(con)
    assert len(found) == 1, notes
    calibration = found[0]
    print(format_calibrations(found, notes))  # the table, with the ranking agreement
    ratios = {s["strategy"]: s["modeled_s"] / s["measured_s"] for s in calibration.strategies}
    assert set(ratios) == set(STRATEGIES)
    assert all(s["wire_bytes"] == "recorded" for s in calibration.strategies)  # every run counted its collectives
    assert all(s["measured_ci95_s"] for s in calibration.strategies)  # every run recorded its interval

    def outside_its_interval(s):  # the factor by which the fit lies beyond the measured interval; 1 inside it
        low, high = s["measured_ci95_s"]
        return max(low / s["modeled_s"], s["modeled_s"] / high, 1.0)

    outside = sorted(outside_its_interval(s) for s in calibration.strategies)
    assert outside[len(outside) // 2] <= 2 and outside[-1] <= 5, (ratios, outside)
    ranking = calibration.ranking
    assert ranking["pairs_ranked"] + ranking["within_noise"] == len(STRATEGIES) * (len(STRATEGIES) - 1) // 2
    # rule step_calibration stored the calibration after collect, so the report shows the step ledger
    assert query_db(results / "shardscope.duckdb", "SELECT count(DISTINCT strategy) FROM step_calibrations")[0][0] == len(STRATEGIES)
    assert "The step model calibrated on this machine" in (results / "paper" / "report.html").read_text()


def test_report_has_the_computed_memory_numbers_and_the_reference_low_verdict(pipeline):
    results, _ = pipeline
    html = (results / "paper" / "report.html").read_text()
    assert "<strong>87 GB</strong>" in html and "<strong>116 GB</strong>" in html
    assert "Reference diagnosed low:" in html and "nccl-tests/issues/293" in html
    ref = query_db(results / "reference" / "reference.duckdb",
                "SELECT r.label, v.verdict FROM verdicts v JOIN runs r ON r.run_id = v.judged_run_id")
    assert ("2 nodes x 1 A100 PCIe, HDR 200G (nccl-tests#293)", "low") in ref


def test_figures_and_report_regenerate_from_the_database_in_a_sane_time(pipeline, tmp_path):
    results, _ = pipeline
    db, ref = str(results / "shardscope.duckdb"), str(results / "reference" / "reference.duckdb")
    start = time.perf_counter()
    for command in (["figures", "--db", db, "--reference-db", ref, "--out", str(tmp_path / "figs")],
                    ["paper", "--db", db, "--reference-db", ref, "--figures", str(tmp_path / "figs"),
                     "--out", str(tmp_path / "report.html")]):
        out = subprocess.run([sys.executable, "-m", "shardscope", *command], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
    # a sanity bound (CI runs the Slurm and deploy tests beside this one); benchmarks/figures_regen.py measures
    # the 20 s budget on an idle machine
    assert time.perf_counter() - start < 60


def test_second_run_has_nothing_to_do_and_is_fast(pipeline):
    _, configfile = pipeline
    start = time.perf_counter()
    result = run_snakemake(configfile)
    elapsed = time.perf_counter() - start
    assert result.returncode == 0
    assert "Nothing to be done" in result.stdout + result.stderr
    assert elapsed < 30  # a sanity bound; the DAG's cost is measured in benchmarks/scale.py


#: Rules that measure: a config edit must not schedule any of them unless it changes their job's spec.
MEASURING = {"collective", "train", "nccl_tests_peer"}
JOB_BLOCK = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):\n(?:[ \t]+.*\n)*?[ \t]+output: (.*)$", re.M)


def dry_run_jobs(configfile: Path) -> list[tuple[str, str]]:
    """(rule, output files) of every job a dry run of the whole pipeline would run."""
    result = run_snakemake(configfile, "--dry-run")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return JOB_BLOCK.findall(result.stdout + "\n" + result.stderr)


def edited(configfile: Path, path: Path, edit) -> Path:
    config = yaml.safe_load(configfile.read_text())
    edit(config)
    path.write_text(yaml.safe_dump(config))
    return path


def replan(configfile: Path) -> None:
    """Run the plan checkpoint (cheap) so that the dry run after it sees every job, not only `plan`."""
    result = subprocess.run(snakemake_words(str(Path(yaml.safe_load(configfile.read_text())["results"]) / "plan" /
                                                 "plan.json"), "--cores", "1", "--configfile", str(configfile)),
                            cwd=WORKDIR[0], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]


def test_a_job_reruns_when_and_only_when_its_own_spec_changes(pipeline, tmp_path):
    """(a) an unrelated edit re-plans nothing; (b) removing strategies re-plans but measures nothing;
    (c) adding a strategy runs its training job alone. Leaves the fixture's plan as it found it."""
    results, configfile = pipeline

    def unrelated(config):
        config["emulated"] = {"enabled": False, "timeout_s": 60, "sweep": {"min_bytes": 1024, "max_bytes": 4096,
                                                                           "factor": 2, "warmup": 1, "iters": 1}}

    jobs = dry_run_jobs(edited(configfile, tmp_path / "a.yaml", unrelated))
    assert not {rule for rule, _ in jobs} & (MEASURING | {"plan", "topology"}), jobs

    removed = edited(configfile, tmp_path / "b.yaml",
                     lambda config: config["training"].update(strategies=STRATEGIES[2:]))
    plan_before = (results / "plan" / "plan.json").read_text()
    replan(removed)
    assert (results / "plan" / "plan.json").read_text() != plan_before  # the plan did change
    jobs = dry_run_jobs(removed)
    assert not {rule for rule, _ in jobs} & (MEASURING | {"plan"}), jobs

    added = edited(configfile, tmp_path / "c.yaml",
                   lambda config: config["training"].update(strategies=[*STRATEGIES, ADDED_LATER]))
    try:
        replan(added)
        jobs = dry_run_jobs(added)
        measuring = sorted((rule, out) for rule, out in jobs if rule in MEASURING)
        assert measuring == [("train", str(results / "training" / f"{ADDED_LATER}-tiny-ws2-local.json"))], jobs
    finally:  # the fixture's plan again, for any test that runs after this one (the README test does)
        replan(configfile)
    assert (results / "plan" / "plan.json").read_text() == plan_before


@pytest.mark.parametrize(("override", "key"), [
    ({"training": {"strategies": ["ddp", "ddpp"]}}, "training.strategies[1]"),
    ({"cpu": {"ranks": 0}}, "cpu.ranks"),
    ({"cpu": {"steps": "ten"}}, "cpu.steps"),
    ({"world_sizes": [0]}, "world_sizes"),
])
def test_bad_config_stops_before_any_job_with_the_key_named(tmp_path, override, key):
    config = reduced_config(tmp_path / "results")
    for section, value in override.items():
        config[section] = {**config[section], **value} if isinstance(value, dict) else value
    configfile = tmp_path / "bad.yaml"
    configfile.write_text(yaml.safe_dump(config))
    result = run_snakemake(configfile)
    assert result.returncode != 0
    assert f"invalid config key {key}" in result.stderr
    assert not (tmp_path / "results").exists()


def test_workflow_lints_clean():
    result = subprocess.run(snakemake_words("--lint"), cwd=WORKDIR[0], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    assert "Congratulations, your workflow is in a good condition!" in result.stdout + result.stderr


def test_readme_commands_work_as_written(pipeline, tmp_path):
    """Every command of README.md, on this module's pipeline run (tests/test_readme.py says how)."""
    from test_readme import run_readme

    results, configfile = pipeline
    print("\n".join(run_readme(tmp_path, results, yaml.safe_load(configfile.read_text()))))


def test_snakemake_report_opens_every_category_in_a_browser(pipeline, tmp_path):
    """Issue 32: the Collectives category was blank (TypeError reading 'mime_type': two labels, two results)."""
    from browser import chromium_or_skip, snakemake_report_categories

    chromium_or_skip()
    _, configfile = pipeline
    report = tmp_path / "snakemake-report.html"
    result = run_snakemake(configfile, "--report", str(report))
    assert result.returncode == 0, result.stderr[-3000:]
    errors = snakemake_report_categories(report, tmp_path)
    assert {"Collectives", "Memory", "Training", "Report", "Topology", "Model"} <= set(errors)
    assert not any(errors.values()), errors
