"""nccl-tests as a peer: the all_reduce_perf command line, and the rule's steps.

Which peer jobs are planned is the planner's (tests/plan/test_job_specs.py). No GPU or
nccl-tests here: the last test plans with a STAND-IN ``all_reduce_perf`` (a script printing a
real nccl-tests 2.20 log from tests/data) and runs the rule's steps: ``shardscope job run``
(guard -> raw log) -> ``shardscope collectives import``.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
import pytest
import yaml

from shardscope.collectives.peer import peer_command, peer_job_id
from shardscope.plan.machine import MachineProbe
from shardscope.plan.planner import make_plan
from shardscope.topology.parse import parse_file
from factories import default_config

REPO = Path(__file__).resolve().parents[2]
GEN3 = REPO / "tests" / "data" / "nccl-tests" / "all_reduce_perf-gen3-2x-gb10.txt"
NVSWITCH = REPO / "tests" / "data" / "topo" / "01-hgx-h200-nvswitch-nv18-12nics.txt"
SWEEP = {"min_bytes": 1024, "max_bytes": 1073741824, "factor": 4, "warmup": 5, "iters": 20}


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


def test_rule_steps_with_a_stand_in_binary(tmp_path: Path) -> None:
    # STAND-IN, not nccl-tests: prints a real all_reduce_perf log (2 ranks, nccl-tests 2.20) and its arguments.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "all_reduce_perf"
    fake.write_text(f"#!/bin/sh\necho \"args: $*\" >&2\ncat '{GEN3}'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    machine = MachineProbe(which=lambda name: shutil.which(name, path=str(bin_dir)),
                           emulated_problem=lambda delay, prefix: None)
    config = default_config()
    config.update(world_sizes=[2], collectives={**config["collectives"], "ops": ["all_reduce"]})
    plan = make_plan(parse_file(NVSWITCH).to_dict(), config, machine)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    job_id = peer_job_id(2, "one_island")
    assert job_id in [j["job_id"] for j in plan["nccl_tests"]]
    log = tmp_path / "logs" / f"{job_id}.log"
    raw = tmp_path / "raw" / "all_reduce_perf-ws2.txt"
    out = tmp_path / f"{job_id}.json"

    # as the rule runs it: job run (guard, raw log), then import
    shardscope = [sys.executable, "-m", "shardscope"]
    for argv in (["job", "run", "--plan", str(tmp_path / "plan.json"), "--id", job_id, "--out", str(raw), "--log", str(log)],
                 ["collectives", "import", str(raw), "--placement", "one_island", "--transport", "default", "--out", str(out)]):
        proc = subprocess.run([*shardscope, *argv], capture_output=True, text=True, timeout=120, check=False,
                              env=dict(os.environ))
        assert proc.returncode == 0, proc.stderr

    text = raw.read_text()
    assert "args: -b 1024 -e 1073741824 -f 4 -g 2 -w 5 -n 20 -d float -c 1" in text
    doc = json.loads(out.read_text())
    assert (doc["kind"], doc["op"], doc["world_size"]) == ("collectives_import", "all_reduce", 2)
    assert (doc["placement"], doc["transport"]) == ("one_island", "default")
    assert len(doc["rows"]) == 8 and doc["peak_busbw_gbps"] == pytest.approx(1.01)
