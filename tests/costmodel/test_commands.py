"""Command line: ``advise`` and ``predict collectives`` through ``python -m shardscope.costmodel``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from costmodel.published import DATA, TOPO_FILES
from shardscope.costmodel.__main__ import main
from shardscope.costmodel.commands import register
from factories import default_config


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_advise_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "advise", "--model", "mistral-7b", "--topology", str(DATA / "topo" / TOPO_FILES[0]),
                        "--gpus", "8", "--gpu", "H100")
    assert code == 0
    assert "modeled" in out and "DOES NOT FIT" in out and "note:" in out
    # a tie within the model's margin is recommended as a tie (issue 21), not as "predicted fastest"
    assert "recommended: fsdp (tie with " in out and "is recommended: " in out and "docs/design.md" in out


def test_advise_json_and_predictions_document(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_file = tmp_path / "pred" / "advice.json"
    code, out, _ = _run(capsys, "advise", "--model", "llama-1b", "--topology", "preset:h100-nvl-pairs", "--gpus", "2",
                        "--memory-gib", "80", "--overlap", "0.2", "--json", "--out", str(out_file))
    assert code == 0
    advice = json.loads(out)
    assert advice["memory_bytes"] == 80 * 2**30 and advice["assumptions"]["overlap"] == 0.2
    doc = json.loads(out_file.read_text())
    assert doc["kind"] == "predictions" and doc["strategies"] and doc["collectives"]
    assert {r["world_size"] for r in doc["collectives"]} == {2}


def test_advise_with_calibration_from_a_raw_nccl_tests_log(capsys: pytest.CaptureFixture[str]) -> None:
    log = DATA / "nccl-tests" / "all_reduce_perf-gen2-2x8-h100-16ranks.txt"
    code, out, _ = _run(capsys, "advise", "--model", "llama-1b", "--topology", "preset:hgx-h100", "--gpus", "16",
                        "--calibrate", str(log), "--json")
    assert code == 0 and json.loads(out)["nodes"] == 2


@pytest.mark.parametrize("file", TOPO_FILES)
def test_predict_collectives_on_every_real_topology(capsys: pytest.CaptureFixture[str], file: str) -> None:
    code, out, _ = _run(capsys, "predict", "collectives", "--topology", str(DATA / "topo" / file), "--json",
                        "--min-bytes", "1024", "--max-bytes", "1048576")
    assert code == 0
    doc = json.loads(out)
    assert doc["kind"] == "predictions"
    assert all(r["method"] == "modeled" and r["time_s"] > 0 for r in doc["collectives"])


def test_predict_collectives_text_and_options(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "predict", "collectives", "--topology", "preset:hgx-h100", "--ops", "all_reduce",
                        "--gpus", "2,8,16", "--algorithm", "ring", "--transport", "default", "--max-bytes", "1073741824")
    assert code == 0 and "ring/" in out and "n=16" in out


@pytest.mark.parametrize("argv", [
    ["advise", "--model", "llama-1b", "--topology", "/nonexistent/topo.txt", "--gpus", "2"],
    ["advise", "--model", "llama-9b", "--topology", "preset:hgx-h100", "--gpus", "2"],
    ["advise", "--model", "llama-1b", "--topology", "preset:nope", "--gpus", "2"],
    ["advise", "--model", "llama-1b", "--topology", "preset:hgx-h100", "--gpus", "2", "--calibrate", "/nonexistent.json"],
    ["predict", "collectives", "--topology", "preset:hgx-h100", "--ops", "all_shuffle"],
    ["predict", "collectives", "--topology", "preset:hgx-h100", "--min-bytes", "4096", "--max-bytes", "1024"],
    ["predict", "collectives", "--topology", "preset:hgx-h100", "--gpus", "12"],
    # a sequence longer than the model's context (an object without one is sized for 2,048 tokens)
    ["advise", "--model", "mistral-7b", "--topology", "preset:hgx-h100", "--gpus", "8", "--seq-len", "9000"],
    ["advise", "--model", '{"model_type": "gpt2", "n_embd": 256, "n_layer": 2, "n_head": 4, "vocab_size": 1000}',
     "--topology", "preset:hgx-h100", "--gpus", "8", "--seq-len", "8192"]])
def test_user_errors_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, _, err = _run(capsys, *argv)
    assert code == 2
    assert err.startswith("shardscope: error: ") and err.count("\n") == 1


def test_bad_flag_values_are_argparse_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["advise", "--model", "llama-1b", "--topology", "preset:hgx-h100", "--gpus", "-2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("shardscope: error: advise: argument --gpus") and err.count("\n") == 1, err


def test_register_adds_the_public_subcommands() -> None:
    parser = argparse.ArgumentParser(prog="shardscope")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["advise", "--model", "tiny", "--topology", "auto", "--gpus", "1"])
    assert args.func.__name__ == "_cmd_advise" and args.overlap is None  # resolved at run time: calibrated, else 0.5
    args = parser.parse_args(["calibrate-step", "--db", "x.duckdb", "--store"])
    assert args.func.__name__ == "_cmd_calibrate_step" and args.store
    args = parser.parse_args(["predict", "collectives", "--topology", "x"])
    assert args.func.__name__ == "_cmd_predict_collectives"


def test_registers_beside_every_other_stage() -> None:
    """Adding "costmodel" to shardscope.cli.STAGES must not clash with another stage's subcommands."""
    import importlib

    from shardscope.cli import STAGES

    parser = argparse.ArgumentParser(prog="shardscope")
    sub = parser.add_subparsers(dest="command", required=True)
    for stage in (*[s for s in STAGES if s != "costmodel"], "costmodel"):
        importlib.import_module(f"shardscope.{stage}.commands").register(sub)
    assert parser.parse_args(["advise", "--model", "tiny", "--topology", "auto", "--gpus", "1"]).func.__name__ == "_cmd_advise"


def test_predict_plan_labels_its_step_constants(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import yaml

    from shardscope.plan.planner import make_plan
    from shardscope.topology.parse import parse_file

    topo = tmp_path / "topology.json"
    topo.write_text(json.dumps(parse_file(DATA / "topo" / "01-hgx-h200-nvswitch-nv18-12nics.txt").to_dict()))
    config = default_config()
    (tmp_path / "plan.json").write_text(json.dumps(make_plan(json.loads(topo.read_text()), config)))
    code, out, _ = _run(capsys, "predict", "plan", "--topology", str(topo), "--plan", str(tmp_path / "plan.json"))
    assert code == 0
    assert ("note: step times assume MFU from the compute curve and overlap from each strategy's schedule, "
            "the step model's defaults (no calibration") in out


def test_advise_lists_hpz_on_nvl_pairs_and_takes_a_shard_size(capsys: pytest.CaptureFixture[str]) -> None:
    topo = str(DATA / "topo" / "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt")
    code, out, _ = _run(capsys, "advise", "--model", "llama-1b", "--topology", topo, "--gpus", "8")
    assert code == 0 and "zero3_hpz  step" in out and "hsdp  step" in out
    assert "note: hsdp and zero3_hpz ranked too: the 8 ranks split into 4 islands of 2" in out
    code, out, _ = _run(capsys, "advise", "--model", "llama-1b", "--topology", topo, "--gpus", "8", "--shard-size", "4",
                        "--json")
    assert code == 0 and json.loads(out)["shard_size"] == 4
    code, out, _ = _run(capsys, "advise", "--model", "llama-1b", "--topology", str(DATA / "topo" / TOPO_FILES[0]),
                        "--gpus", "8")
    assert code == 0 and "zero3_hpz" not in out and "hsdp" not in out
