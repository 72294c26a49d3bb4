"""nccl-tests as a peer: which jobs are planned, the all_reduce_perf command line, and its import.

No GPU or nccl-tests here: the planning takes ``which`` as a parameter, and the last test puts
a STAND-IN ``all_reduce_perf`` on the PATH (a script printing a real nccl-tests 2.20 log from
tests/data) to run the rule's steps: guard -> raw log -> ``shardscope collectives import``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shardscope.collectives.guard import run_guarded
from shardscope.collectives.peer import (
    PEER_BINARY,
    find_peer_job,
    peer_command,
    peer_env,
    peer_job_id,
    peer_jobs,
    peer_result_files,
    peer_shell_words,
)

GEN3 = Path(__file__).resolve().parents[1] / "data" / "nccl-tests" / "all_reduce_perf-gen3-2x-gb10.txt"
SWEEP = {"min_bytes": 1024, "max_bytes": 1073741824, "factor": 4, "warmup": 5, "iters": 20}


def _plan(device: str = "gpu") -> dict[str, Any]:
    jobs = []
    for n, placement, devices in ((2, "one_island", [0, 1]), (2, "cross_island", [0, 4]), (8, "all", list(range(8)))):
        for transport in ("default", "pcie"):
            for op in ("all_reduce", "all_gather"):
                jobs.append({"job_id": f"{op}-ws{n}-{placement}-{transport}", "op": op, "world_size": n,
                             "placement": placement, "transport": transport, "devices": devices, "env": {}})
    return {"device": device, "collectives": jobs, "training": []}


def _found(name: str) -> str | None:
    return f"/opt/nccl-tests/build/{name}"


def test_one_peer_per_world_size_and_placement_of_the_default_transport() -> None:
    jobs = peer_jobs(_plan(), _found)
    assert [(j["job_id"], j["world_size"], j["devices"]) for j in jobs] == [
        ("nccl-tests-ws2-one_island", 2, [0, 1]),
        ("nccl-tests-ws2-cross_island", 2, [0, 4]),
        ("nccl-tests-ws8-all", 8, list(range(8))),
    ]
    assert {j["binary"] for j in jobs} == {"/opt/nccl-tests/build/all_reduce_perf"}


@pytest.mark.parametrize(("device", "which"), [("cpu", _found), ("gpu", lambda name: None)], ids=["cpu-plan", "no-binary"])
def test_no_peer_without_gpu_or_binary(device: str, which: Any) -> None:
    assert peer_jobs(_plan(device), which) == []


def test_the_binary_looked_up_is_all_reduce_perf() -> None:
    asked: list[str] = []
    peer_jobs(_plan(), lambda name: asked.append(name) or None)
    assert asked == [PEER_BINARY] == ["all_reduce_perf"]


def test_find_peer_job_and_its_error() -> None:
    assert find_peer_job(_plan(), _found, 8, "all")["devices"] == list(range(8))
    with pytest.raises(ValueError, match="nccl-tests-ws4-all"):
        find_peer_job(_plan(), _found, 4, "all")


def test_command_line_carries_our_sweep_gpus_dtype_and_check() -> None:
    assert peer_command("/bin/all_reduce_perf", 8, SWEEP, "bfloat16", check=True) == [
        "/bin/all_reduce_perf", "-b", "1024", "-e", "1073741824", "-f", "4", "-g", "8",
        "-w", "5", "-n", "20", "-d", "bfloat16", "-c", "1"]
    cmd = peer_command("all_reduce_perf", 2, SWEEP, "float32", check=False)
    assert cmd[cmd.index("-d") + 1] == "float" and cmd[cmd.index("-c") + 1] == "0"
    assert cmd[cmd.index("-g") + 1] == "2"
    assert peer_command("x", 2, SWEEP, "float16", check=True)[14] == "half"


@pytest.mark.parametrize(("args", "match"), [((0, "float32"), "world size"), ((2, "int4"), "int4")])
def test_bad_command_inputs_raise(args: tuple[int, str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        peer_command("all_reduce_perf", args[0], SWEEP, args[1], check=True)


def test_env_makes_the_jobs_gpus_visible() -> None:
    assert peer_env(peer_jobs(_plan(), _found)[1]) == {"CUDA_VISIBLE_DEVICES": "0,4"}
    assert peer_env({"devices": []}) == {}
    assert peer_job_id(4, "one_island") == "nccl-tests-ws4-one_island"


def test_collect_input_lists_peer_results_only_when_they_can_run() -> None:
    assert peer_result_files(_plan(), "res", _found) == [
        "res/collectives/nccl-tests-ws2-one_island.json", "res/collectives/nccl-tests-ws2-cross_island.json",
        "res/collectives/nccl-tests-ws8-all.json"]
    assert peer_result_files(_plan("cpu"), "res", _found) == []
    assert peer_result_files(_plan(), "res", lambda name: None) == []


def test_shell_words_are_env_then_command_quoted() -> None:
    words = peer_shell_words(_plan(), lambda name: "/opt/my tests/all_reduce_perf", 2, "cross_island", SWEEP,
                             "float32", True)
    assert shlex.split(words) == ["CUDA_VISIBLE_DEVICES=0,4", "/opt/my tests/all_reduce_perf",
                                  *peer_command("x", 2, SWEEP, "float32", True)[1:]]
    with pytest.raises(ValueError, match="not planned|no nccl-tests peer job"):
        peer_shell_words(_plan("cpu"), _found, 2, "cross_island", SWEEP, "float32", True)


def test_rule_steps_with_a_stand_in_binary(tmp_path: Path) -> None:
    # STAND-IN, not nccl-tests: prints a real all_reduce_perf log (2 ranks, nccl-tests 2.20) and its arguments.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "all_reduce_perf"
    fake.write_text(f"#!/bin/sh\necho \"args: $*\" >&2\ncat '{GEN3}'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    which = lambda name: shutil.which(name, path=str(bin_dir))
    plan = _plan()
    plan["collectives"] = [j for j in plan["collectives"] if j["world_size"] == 2]
    job = find_peer_job(plan, which, 2, "one_island")
    log = tmp_path / "logs" / f"{job['job_id']}.log"
    raw = tmp_path / "raw" / "all_reduce_perf-ws2-one_island.txt"
    out = tmp_path / f"{job['job_id']}.json"

    # as the rule runs it: guard -- env <peer_shell_words>, then cp log raw, then import
    words = peer_shell_words(plan, which, 2, "one_island", SWEEP, "float32", True)
    assert run_guarded(["env", *shlex.split(words)], job["job_id"], str(log), wall_s=60) == 0
    raw.parent.mkdir()
    shutil.copy(log, raw)
    proc = subprocess.run([sys.executable, "-m", "shardscope", "collectives", "import", str(raw), "--placement",
                           "one_island", "--transport", "default", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, check=False, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr

    assert "args: -b 1024 -e 1073741824 -f 4 -g 2" in raw.read_text()
    doc = json.loads(out.read_text())
    assert (doc["kind"], doc["op"], doc["world_size"]) == ("collectives_import", "all_reduce", 2)
    assert (doc["placement"], doc["transport"]) == ("one_island", "default")
    assert len(doc["rows"]) == 8 and doc["peak_busbw_gbps"] == pytest.approx(1.01)
