"""workflow/rules/emulated.smk under Snakemake: off by default, one sentence when skipped, results collect loads.

A small Snakefile includes common.smk, emulated_common.smk and emulated.smk with the repository's config, so these
tests do not depend on how the main Snakefile lists the stage.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from factories import workflow_folder
from shardscope.emulated import netns

REPO = Path(__file__).resolve().parents[2]
#: all_reduce over fast, pcie_like and nvl_groups' 3 placements (5), and training (config emulated.strategies):
#: ddp and fsdp over fast, pcie_like, in_group and across_groups (8).
JOBS = 13


def snakemake(tmp_path: Path, *args: str, prefix: list[str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run Snakemake on a Snakefile of common.smk + emulated.smk, results under ``tmp_path``."""
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text(
        "from snakemake.exceptions import WorkflowError\nfrom shardscope.errors import UserError\n"
        f'configfile: "{workflow_folder(tmp_path, {})}/config/config.yaml"\n'
        f'include: "{REPO}/workflow/rules/common.smk"\ninclude: "{REPO}/workflow/rules/topology.smk"\n'
        f'include: "{REPO}/workflow/rules/emulated_common.smk"\ninclude: "{REPO}/workflow/rules/emulated.smk"\n'
        f'include: "{REPO}/workflow/rules/collectives.smk"\ninclude: "{REPO}/workflow/rules/training.smk"\n'
        "rule all:\n    input: emulated_results, emulated_training_results\n")
    cmd = [*(prefix or []), sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--directory", str(tmp_path),
           *args, "--cores", "2", "--resources", "measure=1"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=tmp_path)


def planned_dry_run(tmp_path: Path, results: Path, *args: str, prefix: list[str] | None = None) -> tuple[subprocess.CompletedProcess[str], str]:
    """Probe and plan for real (the planner decides the emulated jobs), then dry-run rule ``all``;
    the dry run and the plan's log (where the planner states skipped stages)."""
    plan = snakemake(tmp_path, str(results / "plan" / "plan.json"), *args, prefix=prefix)
    assert plan.returncode == 0, plan.stderr[-3000:]
    log = (results / "logs" / "plan.log").read_text()
    return snakemake(tmp_path, "-n", "all", *args, prefix=prefix), log


def configfile(tmp_path: Path, section: dict) -> str:
    """A config file overriding ``emulated`` (nested ``--config`` values reach Snakemake as strings)."""
    path = tmp_path / "emulated.yaml"
    path.write_text(json.dumps({"results": f"{tmp_path}/res", "emulated": section}))
    return str(path)


def planned(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """Outputs of the emulated jobs a dry run planned."""
    outputs, in_emulated_job = [], False
    for line in proc.stdout.splitlines():
        if line.startswith(("rule ", "localrule ", "checkpoint ")):
            in_emulated_job = line.startswith(("rule emulated_", "rule train:"))
        elif in_emulated_job and line.strip().startswith("output: "):
            outputs.append(line.split("output: ")[1])
            in_emulated_job = False
    return sorted(outputs)


def test_default_config_plans_no_emulated_job(tmp_path: Path) -> None:
    proc, log = planned_dry_run(tmp_path, tmp_path / "res", "--config", f"results={tmp_path}/res")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert planned(proc) == [] and "shardscope: emulated" not in proc.stdout + proc.stderr + log


def test_enabled_plans_every_preset_placement_and_job(tmp_path: Path) -> None:
    proc, log = planned_dry_run(tmp_path, tmp_path / "res", "--configfile", configfile(tmp_path, {"enabled": True}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    problem = netns.support_problem()
    if problem:  # a machine without root or iproute2: the one sentence, nothing planned
        assert f"shardscope: emulated fabrics skipped: {problem}." in log and planned(proc) == []
        return
    outputs = planned(proc)
    assert len(outputs) == JOBS
    assert f"{tmp_path}/res/emulated/nvl_groups/collectives/across_groups/all_reduce.json" in outputs
    assert f"{tmp_path}/res/training/fsdp-tiny-ws2-all-pcie_like.json" in outputs


def test_without_root_the_stage_is_skipped_with_one_sentence(tmp_path: Path) -> None:
    """A user namespace without a uid mapping makes Snakemake run as uid 65534: no root, same files."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-U", "true"], capture_output=True, check=False).returncode:
        pytest.skip("needs `unshare -U` (user namespaces) to run Snakemake as a non-root user")
    proc, log = planned_dry_run(tmp_path, tmp_path / "res", "--configfile", configfile(tmp_path, {"enabled": True}),
                                prefix=["unshare", "-U"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    sentences = [line for line in log.splitlines() if line.startswith("shardscope:") and "emulated" in line]
    expected = ("shardscope: emulated fabrics skipped: emulated fabrics need root (they create network namespaces, "
                "veth links and tc qdiscs), and this process is not root.")
    assert sentences == [expected]
    assert planned(proc) == []


def test_a_rule_runs_over_the_fabric_and_collect_loads_it(prefix: str, ours: Callable[[], list[str]], tmp_path: Path) -> None:
    out = tmp_path / "res" / "emulated" / "fast" / "collectives" / "all" / "all_reduce.json"
    section = {"enabled": True, "prefix": prefix, "sweep": {"min_bytes": 65536, "max_bytes": 262144, "factor": 4, "warmup": 1, "iters": 2}}
    config = configfile(tmp_path, section)
    plan = snakemake(tmp_path, str(tmp_path / "res" / "plan" / "plan.json"), "--configfile", config)  # the planner writes the job's spec
    assert plan.returncode == 0, plan.stderr[-3000:]
    proc = snakemake(tmp_path, str(out), "--configfile", config, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["job"]["fabric"] == "emulated:fast" and doc["job"]["placement"] == "all@fast"
    assert doc["job"]["fabric_links"] == {"h0-s0": {"rate_mbit": None, "delay_ms": 0.0}, "h1-s0": {"rate_mbit": None, "delay_ms": 0.0}}
    assert doc["env"]["config_hash"] and doc["env"]["emulated_fabric"]["preset"] == "fast"
    assert ours() == []

    db = tmp_path / "db.duckdb"
    load = subprocess.run([sys.executable, "-m", "shardscope", "collect", "--db", str(db), str(out)], capture_output=True, text=True,
                          timeout=120, check=False, env=dict(os.environ))
    assert load.returncode == 0, load.stderr[-3000:]
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT fabric, placement FROM runs").fetchall() == [("emulated:fast", "all@fast")]
