"""The cluster subpackage without a cluster: launch commands, allocation parsing, topology merge.

Slurm's client tools are replaced by small fakes here; tests/slurm/test_real_slurm.py runs the
same code against a real slurmctld/slurmd.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from factories import snakemake_words, workflow_folder
from shardscope.cluster.launch import LaunchSpec, build_launch_command, rendezvous_port
from shardscope.cluster.slurm import (
    Allocation,
    current_allocation,
    node_address,
    parse_record,
)
from shardscope.cluster.topology import (
    check_node_count,
    combine_topologies,
    detect_allocation,
    probe_command,
)
from shardscope.errors import UserError

REPO = Path(__file__).resolve().parents[2]
PY = "/venv/bin/python"
ARGS = ["--op", "all_reduce", "-b", "1024", "--out", "r.json"]


def fake_scontrol(job_record: str = "", node_record: str = ""):
    """A runner answering `scontrol show hostnames|job|node` like Slurm 22.05 does."""
    calls: list[list[str]] = []

    def run(cmd: Sequence[str]) -> str:
        calls.append(list(cmd))
        if cmd[:3] == ["scontrol", "show", "hostnames"]:
            names = []
            for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", cmd[3]):
                m = re.fullmatch(r"(.*)\[(\d+)-(\d+)\]", part)
                names += [f"{m[1]}{i:0{len(m[2])}d}" for i in range(int(m[2]), int(m[3]) + 1)] if m else [part]
            return "\n".join(names) + "\n"
        if cmd[:3] == ["scontrol", "show", "job"]:
            return job_record
        if cmd[:3] == ["scontrol", "show", "node"]:
            return node_record
        raise AssertionError(cmd)

    run.calls = calls  # type: ignore[attr-defined]
    return run


# --- launch commands -------------------------------------------------------------------------

def test_one_node_is_standalone_torchrun_without_slurm():
    cmd = build_launch_command(LaunchSpec(nproc_per_node=4, python=PY), "shardscope.collectives", ARGS, allocation=None)
    assert cmd == [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4", "-m", "shardscope.collectives", *ARGS]


def test_several_nodes_are_srun_plus_torchrun_meeting_on_the_first_node():
    alloc = Allocation(job_id="4242", nodes=("gpu01", "gpu02", "gpu03"), cpus_per_task=16)
    cmd = build_launch_command(LaunchSpec(nproc_per_node=8, nodes=3, python=PY), "shardscope.training", ARGS, alloc,
                               address=lambda node: f"{node}-ib")
    assert cmd == ["srun", "--nodes", "3", "--ntasks-per-node", "1", "--cpus-per-task", "16", "--kill-on-bad-exit=1",
                   PY, "-m", "torch.distributed.run", "--nnodes", "3", "--nproc-per-node", "8",
                   "--rdzv-backend", "c10d", "--rdzv-endpoint", f"gpu01-ib:{rendezvous_port('4242')}", "--rdzv-id", "4242",
                   "-m", "shardscope.training", *ARGS]
    assert LaunchSpec(nproc_per_node=8, nodes=3).world_size == 24


def test_fewer_nodes_than_allocated_pins_the_first_ones_and_an_explicit_port_wins():
    alloc = Allocation(job_id="7", nodes=("a", "b", "c"))
    cmd = build_launch_command(LaunchSpec(nproc_per_node=1, nodes=2, port=29400, python=PY), "m", [], alloc, address=str)
    assert cmd[:7] == ["srun", "--nodes", "2", "--ntasks-per-node", "1", "--nodelist", "a,b"]
    assert "--cpus-per-task" not in cmd  # unknown CPUs per task: srun's default
    assert cmd[cmd.index("--rdzv-endpoint") + 1] == "a:29400"


def test_rendezvous_ports_differ_between_consecutive_jobs_and_stay_unprivileged():
    ports = {rendezvous_port(str(j)) for j in range(1000, 1100)}
    assert len(ports) == 100 and all(20000 <= p < 40000 for p in ports)


@pytest.mark.parametrize(("kwargs", "alloc", "module", "message"), [
    ({"nproc_per_node": 0}, None, "m", "--nproc-per-node must be at least 1"),
    ({"nproc_per_node": 1, "nodes": 0}, None, "m", "--nodes must be at least 1"),
    ({"nproc_per_node": 1, "port": 80}, None, "m", "--port must be between 1024 and 65535"),
    ({"nproc_per_node": 1, "nodes": 2}, None, "m", "--nodes 2 needs a Slurm allocation"),
    ({"nproc_per_node": 1, "nodes": 3}, Allocation("9", ("a", "b")), "m", "--nodes 3 asks for more nodes than Slurm job 9 has (2: a,b)"),
    ({"nproc_per_node": 1}, None, "rm -rf /", "-m must name a Python module"),
])
def test_bad_launch_requests_are_one_sentence_user_errors(kwargs, alloc, module, message):
    with pytest.raises(UserError, match=re.escape(message)):
        build_launch_command(LaunchSpec(**kwargs), module, [], alloc, address=str)


# --- the allocation ---------------------------------------------------------------------------

def test_outside_slurm_there_is_no_allocation():
    assert current_allocation({}, run=fake_scontrol()) is None


def test_allocation_from_the_environment_sbatch_gives():
    run = fake_scontrol()
    alloc = current_allocation({"SLURM_JOB_ID": "12", "SLURM_JOB_NODELIST": "gpu[07-09]", "SLURM_CPUS_PER_TASK": "8"}, run=run)
    assert alloc == Allocation(job_id="12", nodes=("gpu07", "gpu08", "gpu09"), cpus_per_task=8)
    assert [c[:3] for c in run.calls] == [["scontrol", "show", "hostnames"]]


def test_allocation_inside_a_snakemake_job_step_comes_from_scontrol():
    # snakemake-executor-plugin-slurm's job step keeps SLURM_JOB_ID and drops the node list.
    record = ("JobId=15 JobName=x UserId=root(0) JobState=RUNNING NodeList=vm,vm-v1 BatchHost=vm NumNodes=2 "
              "NumCPUs=4 NumTasks=2 CPUs/Task=2 Command=(null)")
    alloc = current_allocation({"SLURM_JOB_ID": "15"}, run=fake_scontrol(job_record=record))
    assert alloc == Allocation(job_id="15", nodes=("vm", "vm-v1"), cpus_per_task=2)


def test_a_job_without_nodes_yet_is_a_user_error():
    with pytest.raises(UserError, match="no node list yet"):
        current_allocation({"SLURM_JOB_ID": "3"}, run=fake_scontrol(job_record="JobId=3 NodeList=(null) CPUs/Task=1"))


def test_node_address_is_nodeaddr_and_falls_back_to_the_name():
    assert node_address("vm-v1", run=fake_scontrol(node_record="NodeName=vm-v1 Arch=x86_64 NodeAddr=10.0.0.7 NodeHostName=vm")) == "10.0.0.7"
    assert node_address("gpu01", run=fake_scontrol(node_record="NodeName=gpu01 State=IDLE")) == "gpu01"
    assert parse_record("A=1 B/C=x,y D=") == {"A": "1", "B/C": "x,y", "D": ""}


# --- topology of every node -------------------------------------------------------------------

def topo(host: str, gpu: str | None = "NVIDIA H100 80GB HBM3", count: int = 8) -> dict:
    gpus = [{"index": i, "name": gpu, "memory_bytes": 80 * 2**30} for i in range(count if gpu else 0)]
    return {"schema": "shardscope.topology/1", "fabric": "nvswitch" if gpu else "cpu", "accelerator": "nvidia" if gpu else "none",
            "gpu_count": len(gpus), "gpus": gpus, "links": [], "cpu": {"model": "Xeon"},
            "source": {"host": host, "method": "nvml", "raw_files": ["raw/nvidia-smi-topo.txt"]}}


def test_identical_nodes_combine_into_the_first_topology_plus_every_node():
    doc = combine_topologies([("gpu01", topo("gpu01")), ("gpu02", topo("gpu02"))], job_id="88")
    assert doc["fabric"] == "nvswitch" and doc["gpu_count"] == 8 and doc["node_count"] == 2
    assert [(n["node"], n["host"]) for n in doc["nodes"]] == [("gpu01", "gpu01"), ("gpu02", "gpu02")]
    assert doc["source"]["method"] == "nvml" and doc["source"]["slurm_job_id"] == "88"
    assert doc["source"]["raw_files"] == ["nodes/gpu01/raw/nvidia-smi-topo.txt"]


def test_one_node_is_left_exactly_as_topology_detect_wrote_it():
    assert combine_topologies([("gpu01", topo("gpu01"))]) == topo("gpu01")


@pytest.mark.parametrize(("other", "field"), [
    (topo("gpu02", gpu="NVIDIA A100-SXM4-80GB"), "gpus"),
    (topo("gpu02", count=4), "gpus"),
    (topo("gpu02", gpu=None), "accelerator, fabric, gpus"),
])
def test_different_nodes_stop_the_run_naming_the_node_and_what_differs(other, field):
    with pytest.raises(UserError, match=re.escape(f"node gpu02 differs from node gpu01 in {field}")):
        combine_topologies([("gpu01", topo("gpu01")), ("gpu02", other)])


def test_detect_allocation_runs_one_srun_task_per_node_and_writes_the_combined_file(tmp_path):
    alloc = Allocation(job_id="5", nodes=("n1", "n2"))
    out = tmp_path / "topology" / "topology.json"
    seen: list[list[str]] = []

    def execute(cmd: Sequence[str]) -> int:
        seen.append(list(cmd))
        for node in alloc.nodes:  # what each node's `topology detect --out` would leave
            path = out.parent / "nodes" / node / "topology.json"
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(topo(node)))
        return 0

    doc = detect_allocation(alloc, out, python=PY, execute=execute)
    assert seen == [probe_command(alloc, out, PY)]
    assert seen[0][:6] == ["srun", "--nodes", "2", "--ntasks-per-node", "1", "--kill-on-bad-exit=1"]
    assert json.loads(out.read_text()) == doc and doc["node_count"] == 2


def test_a_node_that_wrote_nothing_is_named(tmp_path):
    with pytest.raises(UserError, match=r"node n2 wrote no topology; is the file system shared"):
        def execute(cmd: Sequence[str]) -> int:
            path = tmp_path / "nodes" / "n1" / "topology.json"
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(topo("n1")))
            return 0

        detect_allocation(Allocation("5", ("n1", "n2")), tmp_path / "topology.json", execute=execute)


# --- the command line -------------------------------------------------------------------------

def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardscope.cluster", *args], check=False, capture_output=True, text=True, timeout=60,
                          env=env)


def test_cli_dry_run_prints_the_standalone_command_with_the_worker_args_untouched():
    out = cli("launch", "--nproc-per-node", "2", "--dry-run", "-m", "shardscope.collectives", "--op", "all_reduce", "-n", "3")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                                  "-m", "shardscope.collectives", "--op", "all_reduce", "-n", "3"]


def test_cli_user_errors_are_one_line_and_exit_2():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    out = cli("launch", "--nodes", "2", "--nproc-per-node", "1", "-m", "shardscope.collectives", env=env)
    assert out.returncode == 2
    assert out.stderr.startswith("shardscope: error: --nodes 2 needs a Slurm allocation") and out.stderr.count("\n") == 1


def test_cli_topology_on_one_machine_is_topology_detect(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    out = cli("topology", "--out", str(tmp_path / "topology.json"), env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "topology.json").read_text())
    assert "node_count" not in doc and doc["schema"] == "shardscope.topology/1"
    assert Path(tmp_path / "topology.json").exists()


def test_cli_topology_across_nodes_needs_an_allocation_of_that_many_nodes(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    out = cli("topology", "--nodes", "2", "--out", str(tmp_path / "topology.json"), env=env)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert out.stderr.startswith("shardscope: error: --nodes 2 needs a Slurm allocation")
    assert not (tmp_path / "topology.json").exists()


def test_topology_node_count_must_match_the_allocation():
    alloc = Allocation("9", ("a", "b", "c"))
    assert check_node_count(alloc, 3) is alloc and check_node_count(alloc, None) is alloc
    assert check_node_count(alloc, 1) is None  # one node: this one, probed without srun
    with pytest.raises(UserError, match=re.escape("--nodes must be at least 1, not 0")):
        check_node_count(alloc, 0)
    with pytest.raises(UserError, match=re.escape("--nodes 2 but Slurm job 9 has 3 node(s) (a,b,c); submit it with --nodes 2")):
        check_node_count(alloc, 2)


def test_train_across_nodes_outside_slurm_is_a_user_error_that_writes_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    out, log = tmp_path / "r.json", tmp_path / "logs" / "r.log"
    done = subprocess.run([sys.executable, "-m", "shardscope", "train", "--nodes", "2", "--strategy", "ddp", "--model", "tiny",
                           "--nproc", "1", "--cpu", "--out", str(out), "--log", str(log)],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("shardscope: error: --nodes 2 needs a Slurm allocation")
    assert not out.exists() and not log.exists()


def test_train_launches_srun_and_torchrun_inside_an_allocation():
    from shardscope.training.launch import launch_command

    alloc = Allocation(job_id="31", nodes=("vm", "vm-v1"), cpus_per_task=2)
    cmd = launch_command(1, 2, ["--strategy", "ddp", "--out", "r.json"], alloc, address=lambda node: f"{node}-ib")
    assert cmd[:8] == ["srun", "--nodes", "2", "--ntasks-per-node", "1", "--cpus-per-task", "2", "--kill-on-bad-exit=1"]
    assert cmd[cmd.index("--nnodes") + 1] == "2" and cmd[cmd.index("--nproc-per-node") + 1] == "1"
    assert cmd[cmd.index("--rdzv-endpoint") + 1] == f"vm-ib:{rendezvous_port('31')}"
    assert cmd[-6:] == ["-m", "shardscope.training", "--strategy", "ddp", "--out", "r.json"]
    assert launch_command(2, 1, ["--out", "r.json"]) == [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                                         "--nproc-per-node", "2", "-m", "shardscope.training", "--out", "r.json"]


# --- the combined topology.json is a valid topology document --------------------------------------

def cpu_node(host: str) -> dict:
    from shardscope.topology.detect import detect_cpu_only

    doc = detect_cpu_only().topology.to_dict()
    doc["source"] = dict(doc["source"], host=host)
    return doc


def test_a_combined_topology_validates_with_node_count_and_nodes():
    from shardscope.topology.document import validate_topology

    doc = combine_topologies([("vm", cpu_node("vm")), ("vm-v1", cpu_node("vm"))], job_id="12")
    assert validate_topology(doc, "topology.json") is doc
    assert doc["node_count"] == 2 and [n["node"] for n in doc["nodes"]] == ["vm", "vm-v1"]


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.update(node_count=3), "node_count is 3 but nodes lists 2"),
    (lambda d: d.pop("node_count"), "(top level): 'node_count' is a dependency of 'nodes'"),
    (lambda d: d["nodes"][1].update(node="vm"), "node vm appears twice in nodes"),
    (lambda d: d["nodes"][1]["topology"].update(gpu_count=1), "nodes[1] (vm-v1): gpu_count is 1 but gpus lists 0"),
    (lambda d: d["nodes"][0].pop("topology"), "'topology' is a required property"),
])
def test_a_combined_topology_that_contradicts_itself_is_named(change, message):
    from shardscope.topology.document import validate_topology

    doc = combine_topologies([("vm", cpu_node("vm")), ("vm-v1", cpu_node("vm"))], job_id="12")
    change(doc)
    with pytest.raises(UserError, match=re.escape(message)):
        validate_topology(doc, "topology.json")


# --- the pipeline refuses multi-node jobs without Slurm ------------------------------------------

def test_without_the_slurm_profile_a_multinode_config_stops_before_any_job(tmp_path):
    """The local executor refuses cluster.nodes > 1 in one sentence, before the topology job."""
    results = tmp_path / "results"
    folder = workflow_folder(tmp_path / "workdir", {"results": str(results), "db": f"{results}/shardscope.duckdb",
                                                     "cluster": {"nodes": 2}})
    run = subprocess.run(snakemake_words("--cores", "2"), cwd=folder, capture_output=True, text=True, timeout=120,
                         check=False)
    assert run.returncode != 0
    lines = [line for line in (run.stdout + run.stderr).splitlines() if "cluster.nodes is 2" in line]
    assert lines == ["config key cluster.nodes is 2, and multi-node jobs need the Slurm profile (snakemake --profile "
                     "profiles/slurm), not the local executor; set cluster.nodes to 1 to run on this machine"], run.stderr[-3000:]
    assert not results.exists()  # no job ran: not even the topology probe
