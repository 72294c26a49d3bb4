"""The pipeline on a real Slurm cluster: slurmctld + slurmd on this host, set up by .ci/slurm.sh.

1. The CPU pipeline end to end with ``--profile profiles/slurm``: every job that is not a
   local rule goes through sbatch (snakemake-executor-plugin-slurm), timed jobs with 2 CPUs;
   the DuckDB database then holds every op and strategy of the reduced config.
2. A collective across two Slurm nodes of one job (.ci/slurm.sh adds two virtual nodes on
   this host): ``srun`` starts one torchrun agent per node, the agents rendezvous through
   c10d, the ranks talk over gloo -- by hand with ``sbatch``, and through the plugin with the
   resources a multi-node rule needs (tests/slurm/multinode.smk), which also probes the
   topology of both nodes.
3. The pipeline itself with ``cluster.nodes: 2`` (CPU: one rank per node, world size 2 over
   two Slurm nodes): the topology is probed on both nodes, and rules collective and train run
   the plan's multi-node jobs (ids ending in -mn) across them; the database holds them with
   placement ``multi_node`` (tests/slurm/test_cluster_commands.py: without the slurm profile
   the same config stops before any job).

Runs only with ``SHARDSCOPE_SYSTEM_TESTS=1`` (``.ci/run`` sets it): the ``slurm`` fixture
(tests/slurm/conftest.py) starts a private cluster with .ci/slurm.sh (own folder, config, munge,
ports; needs root or passwordless sudo and Debian's slurm-wlm and munge) and stops it afterwards.
Skipped with the reason elsewhere; with ``CI`` set a missing prerequisite fails instead. About 6
to 8 minutes on 2 cores (2 of them for part 3).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from factories import query_db, workflow_folder

REPO = Path(__file__).resolve().parents[2]
OPS = ["all_reduce"]
# DDP and FSDP: the Slurm path of `train` does not depend on the strategy, and DeepSpeed's
# first CPU build on a busy 2-core runner alone can take minutes (tests/e2e covers every one).
STRATEGIES = ["ddp", "fsdp"]
#: Test-only options: no accounting here, so job status comes from squeue and there is no
#: account; poll often; keep Slurm's logs (also of successful jobs) beside the test's files.
PLUGIN_TEST_OPTIONS = ["--slurm-status-command", "squeue", "--slurm-no-account",
                       "--slurm-init-seconds-before-status-checks", "1", "--slurm-keep-successful-logs"]

pytestmark = pytest.mark.e2e


def snakemake(*args: str, cwd: Path = REPO, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snakemake", "--profile", str(REPO / "profiles" / "slurm"), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


def slurm_jobs(output: str) -> dict[str, dict[str, str]]:
    """Slurm job id -> its `scontrol show job` record, for every job snakemake submitted."""
    ids = re.findall(r"submitted with SLURM jobid (\d+)", output)
    jobs = {}
    for job_id in ids:
        text = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=True).stdout
        jobs[job_id] = dict(re.findall(r"(\S+?)=(\S*)", text))
    return jobs


def rule_of(record: dict[str, str]) -> str:
    """The rule a job ran, from the comment the plugin gives it (``rule_<name>[_wildcards_…]``)."""
    return re.match(r"rule_(.+?)(?:_wildcards_.*)?$", record["Comment"]).group(1)


# --- 1. the pipeline through the slurm profile --------------------------------------------------

@pytest.fixture(scope="module")
def pipeline(slurm, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("slurm-pipeline")
    results = tmp / "results"
    config = {
        "results": str(results),
        "db": str(results / "shardscope.duckdb"),
        "collectives": {"ops": OPS, "dtype": "float32", "transports": ["default"], "check": True},
        "training": {"strategies": STRATEGIES, "world_sizes": "max", "memory_budget_gib": None},
        "cpu": {"ranks": 2, "sweep": {"min_bytes": 1024, "max_bytes": 65536, "factor": 8, "warmup": 1, "iters": 3},
                "model": "tiny", "dtype": "float32", "micro_batch": 2, "seq_len": 32, "warmup": 1, "steps": 3},
    }
    folder = workflow_folder(tmp / "workdir", config)  # the shipped default config, never the working tree's
    run = snakemake("--snakefile", str(REPO / "Snakefile"), *PLUGIN_TEST_OPTIONS, "--slurm-logdir",
                    str(tmp / "slurm_logs"), cwd=folder)
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    return results, tmp / "slurm_logs", slurm_jobs(run.stdout + run.stderr)


def test_timed_jobs_and_topology_ran_as_slurm_jobs_with_two_cpus(pipeline):
    _, _, jobs = pipeline
    by_rule: dict[str, list[dict[str, str]]] = {}
    for record in jobs.values():
        by_rule.setdefault(rule_of(record), []).append(record)
    assert {"topology", "collective", "train"} <= set(by_rule), sorted(by_rule)
    assert len(by_rule["collective"]) == len(OPS) and len(by_rule["train"]) == len(STRATEGIES)
    for record in jobs.values():
        assert record["JobState"] == "COMPLETED", record
    for record in by_rule["collective"] + by_rule["train"]:
        assert record["NumCPUs"] == "2" and record["CPUs/Task"] == "2", record
        assert record["OverSubscribe"] == "NO", record  # --exclusive: measurements get the node alone
        assert record["NumNodes"] == "1", record


def test_jobs_on_the_node_run_the_same_venv_python(pipeline):
    _, logdir, _ = pipeline
    logs = "\n".join(p.read_text() for p in (logdir / "rule_collective").rglob("*.log"))
    assert f"{sys.executable} -m torch.distributed.run --standalone --nproc-per-node 2" in logs


def test_database_has_every_op_and_strategy(pipeline):
    results, _, _ = pipeline
    db = results / "shardscope.duckdb"
    assert sorted(r[0] for r in query_db(db, "SELECT DISTINCT op FROM collectives")) == OPS
    assert query_db(db, "SELECT DISTINCT world_size FROM collectives") == [(2,)]
    rows = query_db(db, "SELECT strategy, outcome, world_size, tokens_per_s FROM training_runs")
    assert sorted(r[0] for r in rows) == sorted(STRATEGIES)
    for strategy, outcome, world_size, tokens_per_s in rows:
        assert outcome == "ok" and world_size == 2 and tokens_per_s > 0, strategy
    assert (results / "paper" / "report.html").exists()


def test_topology_was_probed_on_the_compute_node(pipeline):
    results, _, _ = pipeline
    topology = json.loads((results / "topology" / "topology.json").read_text())
    assert topology["fabric"] == "cpu" and topology["source"]["host"] == os.uname().nodename.split(".")[0]


# --- 2. across two nodes ---------------------------------------------------------------------

def collective_result(path: Path) -> dict:
    doc = json.loads(path.read_text())
    assert doc["rows"] and all(row["check_ok"] is True and row["time_s"] > 0 for row in doc["rows"])
    return doc


def test_a_collective_across_two_nodes_by_hand_with_sbatch(slurm, tmp_path):
    out, log = tmp_path / "all_reduce.json", tmp_path / "sbatch.log"
    launch = (f"{sys.executable} -m shardscope.cluster launch --nodes 2 --nproc-per-node 1 -m shardscope.collectives"
              f" --op all_reduce -b 1024 -e 65536 -f 8 -w 1 -n 3 --check --placement nodes2 --out {out}")
    done = subprocess.run(["sbatch", "--wait", "--nodes", "2", "--ntasks-per-node", "1", "--time", "5",
                           "--output", str(log), "--wrap", launch], capture_output=True, text=True, timeout=240, check=False)
    text = log.read_text() if log.exists() else ""
    assert done.returncode == 0, done.stderr + text[-4000:]
    assert "srun --nodes 2 --ntasks-per-node 1" in text and "--rdzv-backend c10d" in text
    doc = collective_result(out)
    assert doc["job"]["world_size"] == 2 and doc["job"]["placement"] == "nodes2"


def test_a_multinode_rule_through_the_plugin_runs_across_two_nodes_and_probes_both(slurm, tmp_path):
    out = tmp_path / "out"
    run = snakemake("--snakefile", str(REPO / "tests" / "slurm" / "multinode.smk"), "--directory", str(tmp_path / "wd"),
                    "--config", f"out={out}", *PLUGIN_TEST_OPTIONS, "--slurm-logdir", str(tmp_path / "slurm_logs"),
                    timeout=300)
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    jobs = {rule_of(r): r for r in slurm_jobs(run.stdout + run.stderr).values()}
    assert jobs["collective"]["NumNodes"] == "2" and jobs["collective"]["NumTasks"] == "2"
    assert jobs["collective"]["CPUs/Task"] == "2"

    doc = collective_result(out / "all_reduce-2nodes.json")
    assert doc["job"]["world_size"] == 4  # 2 nodes x 2 processes per node
    log = (out / "logs" / "all_reduce-2nodes.log").read_text()
    assert "--rdzv-backend c10d" in log and "--cpus-per-task 2" in log

    topology = json.loads((out / "topology.json").read_text())
    nodes = subprocess.run(["scontrol", "show", "hostnames", jobs["topology"]["NodeList"]], capture_output=True,
                           text=True, check=True).stdout.split()
    assert topology["node_count"] == 2 and [n["node"] for n in topology["nodes"]] == nodes
    assert all((out / "nodes" / node / "topology.json").exists() for node in nodes)


# --- 3. the pipeline with multi-node jobs (config cluster.nodes: 2) ------------------------------

MULTINODE_CONFIG = {
    "collectives": {"ops": OPS, "dtype": "float32", "transports": ["default"], "check": True},
    "training": {"strategies": ["ddp"], "world_sizes": "max", "memory_budget_gib": None},
    "cpu": {"ranks": 2, "sweep": {"min_bytes": 1024, "max_bytes": 16384, "factor": 4, "warmup": 1, "iters": 2},
            "model": "tiny", "dtype": "float32", "micro_batch": 1, "seq_len": 16, "warmup": 1, "steps": 2},
    "cluster": {"nodes": 2},  # CPU nodes: one rank per node by default, so world size 2 across the two
}


def multinode_folder(tmp: Path) -> tuple[Path, Path]:
    """A workflow folder (tests/factories.py's workflow_folder) of the multi-node config, and its results folder."""
    results = tmp / "results"
    config = {"results": str(results), "db": str(results / "shardscope.duckdb"), **MULTINODE_CONFIG}
    return workflow_folder(tmp / "workdir", config), results


@pytest.fixture(scope="module")
def multinode_pipeline(slurm, tmp_path_factory):
    """The pipeline up to the database (target collect) with cluster.nodes 2, through the slurm profile."""
    tmp = tmp_path_factory.mktemp("slurm-multinode")
    folder, results = multinode_folder(tmp)
    run = snakemake("--snakefile", str(REPO / "Snakefile"), *PLUGIN_TEST_OPTIONS, "--slurm-logdir",
                    str(tmp / "slurm_logs"), "collect", cwd=folder, timeout=900)
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    jobs: dict[str, list[dict[str, str]]] = {}
    for record in slurm_jobs(run.stdout + run.stderr).values():
        jobs.setdefault(rule_of(record), []).append(record)
    return results, jobs


def test_multinode_jobs_ran_as_one_slurm_job_over_two_nodes_each(multinode_pipeline):
    _, jobs = multinode_pipeline
    assert {"topology", "collective", "train"} <= set(jobs), sorted(jobs)
    across = {rule: [r for r in jobs[rule] if r["Comment"].endswith("-mn")] for rule in ("collective", "train")}
    for record in [*jobs["topology"], *across["collective"], *across["train"]]:
        assert record["JobState"] == "COMPLETED", record
        assert record["NumNodes"] == "2" and record["NumTasks"] == "2", record
    assert len(jobs["topology"]) == len(across["collective"]) == len(across["train"]) == 1, across
    for rule in ("collective", "train"):  # the single-node jobs of the same plan, by the same rule, stay on one node
        alone = [r for r in jobs[rule] if r not in across[rule]]
        assert alone and all(r["NumNodes"] == "1" and r["JobState"] == "COMPLETED" for r in alone), jobs[rule]


def test_topology_was_probed_on_both_nodes(multinode_pipeline):
    results, jobs = multinode_pipeline
    topology = json.loads((results / "topology" / "topology.json").read_text())
    nodes = subprocess.run(["scontrol", "show", "hostnames", jobs["topology"][0]["NodeList"]], capture_output=True,
                           text=True, check=True).stdout.split()
    assert topology["node_count"] == 2 and [n["node"] for n in topology["nodes"]] == nodes
    assert all((results / "topology" / "nodes" / node / "topology.json").exists() for node in nodes)
    plan = json.loads((results / "plan" / "plan.json").read_text())
    assert (plan["multi_node"]["nodes"], plan["multi_node"]["nproc_per_node"], plan["multi_node"]["world_size"]) == (2, 1, 2)


def test_multinode_logs_show_srun_and_a_c10d_rendezvous(multinode_pipeline):
    results, _ = multinode_pipeline
    for kind in ("collectives", "training"):
        (log,) = (results / "logs" / kind).glob("*-mn.log")
        text = log.read_text()
        assert "srun --nodes 2 --ntasks-per-node 1" in text and "--rdzv-backend c10d" in text, text[-3000:]


def test_database_has_the_multinode_collective_and_training_run(multinode_pipeline):
    results, _ = multinode_pipeline
    db = results / "shardscope.duckdb"
    rows = query_db(db, "SELECT DISTINCT c.op, c.world_size, r.placement, r.job_id FROM collectives c JOIN runs r USING (run_id)"
                     " WHERE r.placement = 'multi_node'")
    assert [(op, ws, placement) for op, ws, placement, _ in rows] == [("all_reduce", 2, "multi_node")], rows
    assert rows[0][3].endswith("-mn")
    assert query_db(db, "SELECT count(*) FROM collectives c JOIN runs r USING (run_id) WHERE r.placement = 'multi_node'"
                     " AND (c.check_ok IS NOT TRUE OR c.time_s <= 0)") == [(0,)]
    runs = query_db(db, "SELECT strategy, world_size, outcome, tokens_per_s FROM training_runs WHERE placement = 'multi_node'")
    assert len(runs) == 1, runs
    strategy, world_size, outcome, tokens_per_s = runs[0]
    assert (strategy, world_size, outcome) == ("ddp", 2, "ok") and tokens_per_s > 0
    # and the single-node jobs of the same plan beside them
    assert query_db(db, "SELECT DISTINCT placement FROM training_runs WHERE placement <> 'multi_node'") == [("local",)]

