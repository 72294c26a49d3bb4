"""The ``shardscope`` command line, run as a user runs it (``python -m shardscope …``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from factories import default_config_path

REPO = Path(__file__).resolve().parents[1]
TOPO = REPO / "tests" / "data" / "topo"
NCCL = REPO / "tests" / "data" / "nccl-tests"
NVL_PAIRS = TOPO / "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt"
GEN2 = NCCL / "all_reduce_perf-gen2-2x8-h100-16ranks.txt"
GEN1_HEADER_ONLY = NCCL / "alltoall-gen1-header-8x-a100.txt"
CONFIG = default_config_path()
STRATEGIES = ["ddp", "fsdp", "fsdp_grad_op", "zero0", "zero1", "zero2", "zero3"]


def shardscope(*args: str | Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardscope", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False)


def ok_json(*args: str | Path) -> Any:
    proc = shardscope(*args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def assert_user_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("shardscope: error:")
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert proc.stdout == ""


# --------------------------------------------------------------------------- help


@pytest.mark.parametrize(
    "command",
    [[], ["topology"], ["topology", "detect"], ["topology", "parse"], ["plan"], ["collectives"],
     ["collectives", "import"], ["memory"], ["train"], ["collect"], ["figures"], ["paper"]],
    ids=lambda c: " ".join(c) or "shardscope",
)
def test_help_exits_zero(command: list[str]) -> None:
    proc = shardscope(*command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: shardscope")


def test_top_level_help_lists_every_subcommand() -> None:
    out = shardscope("--help").stdout
    for name in ("topology", "plan", "collectives", "memory", "train", "collect", "figures", "paper"):
        assert name in out


def test_no_subcommand_is_a_one_line_usage_error_naming_the_commands() -> None:
    assert_user_error(shardscope(), "choose one of: topology, plan", "shardscope --help")


# --------------------------------------------------------------------------- topology


def _cpu_only_machine() -> bool:
    from shardscope.topology.detect import detect

    return detect().topology.to_dict()["fabric"] == "cpu"


needs_cpu_only = pytest.mark.skipif(not _cpu_only_machine(), reason="this machine has accelerators")


@needs_cpu_only
def test_topology_detect_prints_cpu_topology() -> None:
    doc = ok_json("topology", "detect")
    assert doc["schema"] == "shardscope.topology/1"
    assert doc["fabric"] == "cpu"
    assert doc["gpu_count"] == 0 and doc["gpus"] == [] and doc["islands"] == []
    assert doc["numa_nodes"] and all(n["cores"] >= 1 for n in doc["numa_nodes"])
    assert sum(n["cores"] for n in doc["numa_nodes"]) >= len(os.sched_getaffinity(0))
    assert doc["cpu"]["usable_cpus"] == len(os.sched_getaffinity(0))
    assert doc["cpu"]["logical_cpus"] >= doc["cpu"]["physical_cores"] >= 1
    assert doc["source"]["method"] == "os"


@needs_cpu_only
def test_topology_detect_writes_out_file(tmp_path: Path) -> None:
    out = tmp_path / "topo" / "topology.json"
    proc = shardscope("topology", "detect", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    doc = json.loads(out.read_text())
    assert doc["fabric"] == "cpu"
    raw = doc["source"]["raw_files"]  # the OS's CPU/NUMA text, kept for provenance
    assert "raw/sys-node-cpulists.txt" in raw and all((out.parent / name).is_file() for name in raw)
    assert sorted(os.listdir(out.parent)) == ["raw", "topology.json"]  # no temporary files
    assert sorted(f"raw/{name}" for name in os.listdir(out.parent / "raw")) == raw


def test_topology_parse_nvl_pairs() -> None:
    doc = ok_json("topology", "parse", NVL_PAIRS)
    assert doc["fabric"] == "nvlink_islands"
    assert doc["gpu_count"] == 8
    assert doc["islands"] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_topology_parse_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.txt"
    assert_user_error(shardscope("topology", "parse", missing), str(missing))


def test_topology_parse_not_a_topology(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\nthis is not nvidia-smi output\n")
    assert_user_error(shardscope("topology", "parse", text), str(text))


def test_topology_parse_config_yaml_is_not_a_topology() -> None:
    assert_user_error(shardscope("topology", "parse", CONFIG), str(CONFIG))


# --------------------------------------------------------------------------- collectives import


def test_collectives_import_gen2_json() -> None:
    doc = ok_json("collectives", "import", GEN2, "--json")
    assert doc["world_size"] == 16
    assert doc["op"] == "all_reduce"
    assert doc["generation"] == 2
    assert doc["peak_busbw_gbps"] == pytest.approx(338.8, abs=0.05)
    assert doc["rows"] and max(r["busbw_gbps"] for r in doc["rows"]) == pytest.approx(doc["peak_busbw_gbps"], rel=1e-3)


def test_collectives_import_out_file_and_summary_line(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    proc = shardscope("collectives", "import", GEN2, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.strip().splitlines()) == 1 and "16 ranks" in proc.stdout
    assert json.loads(out.read_text())["world_size"] == 16


def test_collectives_import_header_only_gen1_fails() -> None:
    assert_user_error(shardscope("collectives", "import", GEN1_HEADER_ONLY), str(GEN1_HEADER_ONLY))


# --------------------------------------------------------------------------- memory


def test_memory_mistral_on_8_gpus() -> None:
    rows = ok_json("memory", "--model", "mistral-7b", "--gpus", "8", "--json")
    assert [r["strategy"] for r in rows] == [*STRATEGIES, "hsdp"]  # hsdp: over one shard group of --gpus
    by = {r["strategy"]: r for r in rows}
    psi = by["ddp"]["n_params"]
    assert psi == 7_241_732_096
    assert by["ddp"]["total_bytes"] == 16 * psi
    assert by["zero3"]["total_bytes"] == by["fsdp"]["total_bytes"] == 2 * psi  # 16 psi / 8
    assert all(r["gpus"] == 8 and r["model"] == "mistral-7b" for r in rows)


def test_memory_one_strategy_as_text() -> None:
    proc = shardscope("memory", "--model", "tiny", "--strategy", "zero2", "--gpus", "2")
    assert proc.returncode == 0, proc.stderr
    rows = [x for x in proc.stdout.splitlines() if x.strip().startswith(("ddp", "fsdp", "zero"))]
    assert len(rows) == 1 and rows[0].split()[0] == "zero2" and "MB" in rows[0] and "GiB" not in proc.stdout


@pytest.mark.parametrize(("dtype", "named"), [("float16", "fp16 params and grads"), ("bfloat16", "bf16 params and grads")])
def test_memory_names_the_runs_16_bit_format(dtype: str, named: str) -> None:
    """float16 is sized as bfloat16 (the same bytes) but named as what it is."""
    proc = shardscope("memory", "--model", "tiny", "--strategy", "zero2", "--gpus", "2", "--dtype", dtype)
    assert proc.returncode == 0, proc.stderr
    assert named in proc.stdout and ("bf16" in proc.stdout) == (dtype == "bfloat16")


def test_memory_unknown_model_is_a_user_error() -> None:
    assert_user_error(shardscope("memory", "--model", "gpt3", "--gpus", "8"), "gpt3")


# --------------------------------------------------------------------------- plan


@pytest.fixture(scope="module")
def cpu_topology(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from shardscope.fileio import atomic_write_json
    from shardscope.topology.detect import detect_cpu_only

    path = tmp_path_factory.mktemp("topo") / "topology.json"
    atomic_write_json(path, detect_cpu_only().topology.to_dict())
    return path


def test_plan_with_config_file(cpu_topology: Path) -> None:
    plan = ok_json("plan", "--topology", cpu_topology, "--config", CONFIG, "--json")
    assert plan["schema"] == "shardscope.plan/1"
    assert plan["device"] == "cpu" and plan["world_sizes"] == [2]
    assert {j["op"] for j in plan["collectives"]} == {"all_reduce", "all_gather", "reduce_scatter"}
    assert [j["strategy"] for j in plan["training"]] == STRATEGIES


def test_plan_from_parsed_gpu_topology_to_out_file(tmp_path: Path) -> None:
    topo = tmp_path / "topology.json"
    assert shardscope("topology", "parse", NVL_PAIRS, "--out", topo).returncode == 0
    out = tmp_path / "plan.json"
    proc = shardscope("plan", "--topology", topo, "--config", CONFIG, "--out", out)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(out.read_text())
    assert plan["device"] == "gpu" and plan["fabric"] == "nvlink_islands"
    assert plan["world_sizes"] == [2, 4, 8]
    assert "pcie" in {j["transport"] for j in plan["collectives"]}


def test_plan_with_config_json(cpu_topology: Path) -> None:
    import yaml

    config = yaml.safe_load(CONFIG.read_text())
    config["cpu"]["ranks"] = 3
    plan = ok_json("plan", "--topology", cpu_topology, "--config-json", json.dumps(config), "--json")
    assert plan["world_sizes"] == [3]


def test_plan_with_a_bad_hpz_key_exits_2_naming_it(cpu_topology: Path) -> None:
    import yaml

    config = yaml.safe_load(CONFIG.read_text())
    config["training"]["hpz"] = "on"
    assert_user_error(shardscope("plan", "--topology", cpu_topology, "--config-json", json.dumps(config)), "training.hpz", "'on'")


def test_plan_missing_topology_file(tmp_path: Path) -> None:
    missing = tmp_path / "topology.json"
    assert_user_error(shardscope("plan", "--topology", missing, "--config", CONFIG), str(missing))


def test_plan_missing_config_file(cpu_topology: Path, tmp_path: Path) -> None:
    missing = tmp_path / "config.yaml"
    assert_user_error(shardscope("plan", "--topology", cpu_topology, "--config", missing), str(missing))


def test_plan_rejects_json_that_is_not_a_topology(cpu_topology: Path, tmp_path: Path) -> None:
    not_topology = tmp_path / "plan.json"
    not_topology.write_text(json.dumps({"schema": "shardscope.plan/1", "collectives": [], "training": []}))
    assert_user_error(shardscope("plan", "--topology", not_topology, "--config", CONFIG), str(not_topology))


# --------------------------------------------------------------------------- manners (issue 21)


def _parsers(parser: Any) -> Any:
    """Every parser under ``parser``, depth first, itself included."""
    import argparse

    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _parsers(sub)


def test_every_flag_and_subcommand_of_every_parser_has_help() -> None:
    import argparse

    from shardscope.cli import Parser, build_parser

    missing, parsers = [], list(_parsers(build_parser()))
    for parser in parsers:
        assert isinstance(parser, Parser), parser.prog  # one-line errors everywhere
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helped = {choice.dest for choice in action._choices_actions if choice.help}
                missing += [f"{parser.prog} {name}" for name in action.choices if name not in helped]
            elif not action.help:
                missing.append(f"{parser.prog} {'/'.join(action.option_strings) or action.dest}")
    assert len(parsers) > 30 and not missing, missing


def test_version() -> None:
    from importlib.metadata import version

    proc = shardscope("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"shardscope {version('shardscope')}", proc.stdout


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["topology"], ["topology: choose one of: detect, parse, show", "shardscope topology --help"]),
        (["db"], ["db: choose one of: merge, export, schema"]),
        (["advise", "--model", "tiny"], ["advise:", "--gpus", "--topology"]),
        (["train", "--strategy", "ddp", "--model", "tiny", "--nproc", "2", "--dtype", "fp8", "--out", "o", "--log", "l"],
         ["train:", "--dtype", "fp8"]),
        (["topology", "show", "--format", "yaml"], ["topology show:", "--format"]),
        (["figures", "--db", "x", "--out", "y", "--colour"],
         ["figures: unrecognized arguments: --colour", "(see shardscope figures --help)"]),
        (["predict", "plan", "--topology", "t", "--plan", "p", "--fast"],
         ["predict plan: unrecognized arguments: --fast", "(see shardscope predict plan --help)"]),
        (["nope"], ["invalid choice: 'nope'"]),
    ],
    ids=["no-action", "no-db-action", "missing-flags", "bad-choice", "bad-format", "unknown-flag", "unknown-flag-nested",
         "unknown-command"],
)
def test_argparse_errors_are_one_line_with_exit_2(args: list[str], fragments: list[str]) -> None:
    assert_user_error(shardscope(*args), *fragments)


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["advise", "--model", "mistral-7b", "--topology", "preset:hgx-h100", "--gpus", "1000000"], ["--gpus", "100000"]),
        (["memory", "--model", "mistral-7b", "--gpus", "1000000"], ["--gpus", "100000"]),
        (["memory", "--model", "tiny", "--gpus", "two"], ["--gpus", "'two'"]),
        (["advise", "--model", "mistral-7b", "--topology", "preset:hgx-h100", "--gpus", "12"], ["--gpus 12", "8 GPUs"]),
    ],
    ids=["advise-huge", "memory-huge", "memory-not-a-number", "advise-above-the-node-not-whole-nodes"],
)
def test_gpu_counts_are_bounded(args: list[str], fragments: list[str]) -> None:
    assert_user_error(shardscope(*args), *fragments)


def test_plan_prints_a_summary_and_writes_the_json_the_pipeline_reads(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    proc = shardscope("plan", "--topology", NVL_PAIRS, "--config", CONFIG, "--out", out)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) < 20 and lines[0].startswith(f"plan for {NVL_PAIRS}: gpu fabric nvlink_islands, world sizes 2, 4, 8")
    plan = json.loads(out.read_text())
    assert f"{len(plan['collectives'])} jobs  ops" in proc.stdout
    # one line per training group (model, micro-batch, ...): together every training job (issue 32)
    groups = [line for line in proc.stdout.splitlines() if line.startswith("  training")]
    assert sum(int(line.split()[1]) for line in groups) == len(plan["training"])
    for place in plan["placements"]:
        assert any(line.split()[:2] == [str(place["world_size"]), place["placement"]] for line in lines), place
    assert ok_json("plan", "--topology", NVL_PAIRS, "--config", CONFIG, "--json") == plan


def test_advise_prints_its_assumptions_and_millisecond_ties_as_a_tie_with_the_margin() -> None:
    proc = shardscope("advise", "--model", "mistral-7b", "--topology", "preset:hgx-h100", "--gpus", "8", "--micro-batch", "1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("assumes: micro-batch 1, seq len 4096, bfloat16, activation checkpointing none, ") \
        and ", MFU " in lines[1] and "overlap " in lines[1], lines[1]
    from shardscope.costmodel.deepspeed_hooks import installed_deepspeed_version

    version = installed_deepspeed_version()  # the release ZeRO's hooks are modeled for, said where there is one
    assert (f", DeepSpeed {version}," in lines[1]) if version else "DeepSpeed" not in lines[1], lines[1]
    (tie,) = [line for line in lines if line.startswith("tie: ")]
    rows = [line.split() for line in lines if line.split()[1:2] == ["step"]]
    ranked, times = [row[0] for row in rows], {row[0]: float(row[2]) for row in rows}
    tied = tie.removeprefix("tie: ").split(" are within ")[0].split(", ")
    assert len(tied) >= 2 and tied[0] == ranked[0] and "5% margin" in tie
    assert max(times[s] for s in tied) <= 1.05 * times[tied[0]] + 1e-3


def test_advise_without_a_tie_prints_none() -> None:
    from shardscope.costmodel.decision import decide

    class P:  # the fields decide reads of a StepPrediction
        def __init__(self, strategy: str, step: float, peak: int = 1) -> None:
            self.strategy, self.step_time_s, self.memory_total_bytes = strategy, step, peak

    assert decide([P("ddp", 1.0), P("zero1", 1.2)], None).tie_sentence() is None
    assert decide([P("ddp", 0.9, peak=100), P("zero1", 1.0), P("zero2", 1.5)], 10, 1.0).tie_sentence() is None
    assert decide([P("zero1", 1.0), P("zero2", 1.04)], None).tie_sentence().startswith("tie: zero1, zero2 are within 4.0% ")


def test_collectives_import_without_out_prints_one_summary_line() -> None:
    proc = shardscope("collectives", "import", GEN2)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1 and "16 ranks" in proc.stdout and "--json" in proc.stdout
