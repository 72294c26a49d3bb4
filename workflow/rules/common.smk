"""Helpers shared by the rules of every stage -- paths, the plan read through the checkpoints, job lookups."""

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

from shardscope.cluster.executor import multinode_problem
from shardscope.config import config_hash
from shardscope.plan.multinode import MULTINODE_JOB, SINGLE_NODE_JOB  # wildcard constraints of the job rules
from shardscope.settings import settings
from shardscope.topology.saved import saved_topology_problem


def _python():
    """The interpreter jobs run shardscope with: Snakemake's own (so an unactivated .venv works),
    or the conda environment's `python` under --sdm conda."""
    methods = {str(m).lower() for m in getattr(workflow.deployment_settings, "deployment_method", ())}
    return "python" if any("conda" in m for m in methods) else sys.executable


PY = _python()
SHARDSCOPE = f"{shlex.quote(PY)} -m shardscope"  # shell text: every value from outside is quoted
TORCHRUN = f"{shlex.quote(PY)} -m torch.distributed.run"


# Cheap bookkeeping rules run where Snakemake runs, also under the Slurm profile; the topology
# probe, the plan (it looks for all_reduce_perf and root on the node the jobs run on) and the
# timed jobs run on compute nodes.
localrules:
    all,
    collect,
    figures,
    paper,


RESULTS = config["results"]
DB = config["db"]
ENVS = "../../envs/shardscope.yaml"
CONFIG_HASH = config_hash(config)
# The config as frozen settings, the schema's defaults filled in: what the rules read of a key that may be left out.
# `config` itself stays as written: CONFIG_HASH and the plan rule's params are those of the file.
SETTINGS = settings(config, workflow.source_path("../schemas/config.schema.yaml"))


def _git_rev():
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=globals().get("WORKFLOW_SOURCE") or workflow.basedir,
            timeout=10,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


GIT_REV = _git_rev()

# Provenance stamps reach the workers through the environment, not through the params of a
# job (a param change makes Snakemake rerun the job; a new commit or an unrelated config edit
# must not re-run every measurement).
os.environ.update(SHARDSCOPE_GIT_REV=GIT_REV, SHARDSCOPE_CONFIG_HASH=CONFIG_HASH)


#: Nodes of the multi-node jobs (config `cluster.nodes`); 1 plans single-node jobs only.
CLUSTER_NODES = int(SETTINGS.cluster.nodes)
#: Multi-node jobs probe every node's topology, unless the config names a saved probe output.
PROBE_NODES = CLUSTER_NODES > 1 and not SETTINGS.topology.file


# Multi-node jobs need a Slurm allocation of several nodes: stop before the first job under any
# other executor; a saved topology's GPUs must exist where the jobs run. Snakemake runs this once
# the executor is known, never inside a Slurm job (and not for a dry run).
onstart:
    executor = getattr(workflow.executor_plugin, "name", None)
    problem = multinode_problem(CLUSTER_NODES, executor) or saved_topology_problem(SETTINGS.topology.file, executor)
    if problem:
        raise WorkflowError(problem)


def topology_args():
    """`detect` on this machine, `parse FILE` when the config names a saved probe output, or
    `--nodes K` (of `cluster topology`) when multi-node jobs probe every node of their allocation."""
    saved = SETTINGS.topology.file
    if PROBE_NODES:
        return f"--nodes {CLUSTER_NODES}"
    return f"parse {shlex.quote(str(saved))}" if saved else "detect"


def topology_command():
    """The shardscope subcommand of the topology rule: `topology` on one node, `cluster topology` across nodes."""
    return "cluster topology" if PROBE_NODES else "topology"


def topology_resources():
    """Slurm resources of the topology rule: none on one node; across nodes one task per node,
    the shell run in the batch step (mpi) so that its own `srun` reaches every node."""
    if not PROBE_NODES:
        return {}
    return dict(nodes=CLUSTER_NODES, tasks=CLUSTER_NODES, mpi="srun", tasks_per_gpu=0)


_PLAN_CACHE = {}


def _plan_path():
    """plan.json, once the plan checkpoint has run.

    A job step on a cluster node (`--mode remote`, e.g. under the Slurm executor) builds a DAG of
    its one job, which no longer holds the checkpoint (job rules take their spec file as input,
    not plan.json), so asking the checkpoint there would make every job look unplanned: that
    process only starts after the plan ran, so it reads the file where the checkpoint wrote it."""
    if workflow.remote_exec:
        return Path(RESULTS) / "plan" / "plan.json"
    return Path(checkpoints.plan.get().output.json)


def _plan_entry():
    """The plan's parsed JSON and its jobs by (kind, job_id), read once per plan file version.

    Input functions call this several times per job; re-reading and scanning the plan each
    time made building the DAG quadratic in the number of jobs. Keyed by path, modification
    time and size, so a re-planned plan.json is read again."""
    path = _plan_path()
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    entry = _PLAN_CACHE.get(key)
    if entry is None:
        doc = json.loads(path.read_text())
        jobs = {
            (kind, job["job_id"]): job
            for kind in ("collectives", "training")
            for job in doc.get(kind, [])
            if isinstance(job, dict) and "job_id" in job
        }
        _PLAN_CACHE.clear()
        entry = _PLAN_CACHE[key] = (doc, jobs)
    return entry


def plan_doc():
    """The plan written by the plan checkpoint (evaluated after it ran); parsed once, shared: do not modify."""
    return _plan_entry()[0]


def plan_job(kind, job_id):
    """The planned job `job_id` of `kind` ('collectives' or 'training')."""
    job = _plan_entry()[1].get((kind, job_id))
    if job is None:
        raise ValueError(f"job {job_id!r} is not in the {kind} plan; run `snakemake` without a target to see the plan")
    return job


def on_gpu():
    return plan_doc()["device"] == "gpu"


def multinode_job(kind, job_id):
    """The planned multi-node job `job_id` of `kind` ('collectives' or 'training')."""
    for job in plan_doc().get("multi_node", {}).get(kind, []):
        if job["job_id"] == job_id:
            return job
    raise ValueError(
        f"job {job_id!r} is not in the multi-node {kind} plan; set config cluster.nodes above 1 to plan it"
    )


def multinode_gres(kind, job_id):
    """`gpu:N` (GPUs on each node) for a multi-node job on GPUs; empty (no --gres) on CPU nodes."""
    return f"gpu:{multinode_job(kind, job_id)['nproc_per_node']}" if on_gpu() else ""


def job_gpus(kind, job_id):
    return plan_job(kind, job_id)["world_size"] if on_gpu() else 0


#: Wildcard constraint of the job rules (collective, train): a single-node or a multi-node job id.
JOB_ID = rf"(?:{SINGLE_NODE_JOB}|{MULTINODE_JOB})"


def across_nodes(job_id):
    """Whether `job_id` is a multi-node job (its id ends in -mn), run by srun over several Slurm nodes."""
    return re.fullmatch(MULTINODE_JOB, job_id) is not None


def job_threads(kind, job_id):
    """CPUs of one node's task: the job's ranks on one node; a multi-node job's ranks per node."""
    if across_nodes(job_id):
        return multinode_job(kind, job_id)["nproc_per_node"]
    return plan_job(kind, job_id)["world_size"]


def job_resources(kind):
    """The resources of the job rules of `kind`, per job: GPUs (`gpu`) on one node; across nodes the Slurm
    shape (`nodes`, one task per node, `mpi`: the plugin runs the shell without its own srun, so the
    job's srun reaches every node; `gres` on GPU nodes). A value of None leaves the resource out of
    that job, so each job gets exactly the resources of its shape. `tasks_per_gpu=0`: never
    --ntasks-per-gpu (one torchrun per node starts every rank itself)."""
    multi = lambda wildcards: across_nodes(wildcards.job)
    return dict(
        measure=1,
        gpu=lambda wildcards: None if multi(wildcards) else job_gpus(kind, wildcards.job),
        nodes=lambda wildcards: multinode_job(kind, wildcards.job)["nodes"] if multi(wildcards) else None,
        tasks=lambda wildcards: multinode_job(kind, wildcards.job)["nodes"] if multi(wildcards) else None,
        mpi=lambda wildcards: "srun" if multi(wildcards) else None,
        tasks_per_gpu=0,
        gres=lambda wildcards: multinode_gres(kind, wildcards.job) if multi(wildcards) else None,
    )


def _planned(kind):
    """Every planned job of `kind`: single-node, then multi-node (when cluster.nodes > 1)."""
    plan = plan_doc()
    return plan[kind] + plan.get("multi_node", {}).get(kind, [])


def collective_results(wildcards):
    """Every planned collective job's result file, multi-node ones included."""
    return [f"{RESULTS}/collectives/{job['job_id']}.json" for job in _planned("collectives")]


def training_results(wildcards):
    """Every planned training job's result file, multi-node ones included."""
    return [f"{RESULTS}/training/{job['job_id']}.json" for job in _planned("training")]


def memory_budget_args():
    gib = SETTINGS.training.memory_budget_gib
    return f"--memory-budget-bytes {int(gib * 2**30)}" if gib else ""


def search_results(wildcards=None):
    """The summary of every micro-batch search the plan lists (config training.search; none when null, and with auto
    none on CPU)."""
    return [f"{RESULTS}/search/{entry['job_id']}.json" for entry in plan_doc().get("search", [])]


def best_results(wildcards=None):
    """The training result of every best-micro-batch run the plan lists (rule train_best; under every fabric condition
    of a searched strategy; none without a search)."""
    return [f"{RESULTS}/best/{entry['job_id']}.json" for entry in plan_doc().get("best", [])]


def _best_entry(job_id):
    entry = next((e for e in plan_doc().get("best", []) if e["job_id"] == job_id), None)
    if entry is None:
        raise ValueError(
            f"job {job_id!r} has no best-micro-batch run in the plan; set config training.search to plan one"
        )
    return entry


def best_search(wildcards):
    """The summary of the search that serves a best-micro-batch run (under another fabric condition: the
    memory-equal job's search, plan.json best[].search_job_id)."""
    return f"{RESULTS}/search/{_best_entry(wildcards.job)['search_job_id']}.json"


def best_entry_text(job_id):
    """The plan's best entry of planned job `job_id` as sorted JSON: rule train_best's param (a new global batch
    or serving search reruns it)."""
    return json.dumps(_best_entry(job_id), sort_keys=True)


def search_entry_text(job_id):
    """The plan's search entry of planned job `job_id` as sorted JSON: the searches' params, so a new limit,
    global batch or checkpointing mode reruns them (the job's own spec file may be unchanged)."""
    entry = next((e for e in plan_doc().get("search", []) if e["job_id"] == job_id), None)
    if entry is None:
        raise ValueError(
            f"job {job_id!r} has no micro-batch search in the plan; set config training.search to plan one"
        )
    return json.dumps(entry, sort_keys=True)


def unfinished_planned_results():
    """The planned result files that do not exist although the database was collected after the plan was made.

    Snakemake re-evaluates the jobs that read the plan once its checkpoint has run; should a future Snakemake
    (or a change to these rules) stop doing so, a config edit would re-plan, collect the old results and report
    success with the new jobs never run. Empty when the plan or the collect manifest is missing, or the manifest
    is older than the plan (a run that stopped at the plan, e.g. `snakemake results/plan/plan.json`)."""
    from snakemake.exceptions import IncompleteCheckpointException

    plan, manifest = Path(RESULTS) / "plan" / "plan.json", Path(RESULTS) / "db" / "collect.json"  # rule collect's
    if not plan.exists() or not manifest.exists() or manifest.stat().st_mtime < plan.stat().st_mtime:
        return []
    try:
        planned = [
            *collective_results(None),
            *training_results(None),
            *search_results(),
            *best_results(),
            *emulated_results(),
            *nccl_tests_peer_results(None),
        ]
    except IncompleteCheckpointException:
        return []
    return [path for path in planned if not Path(path).exists()]


# Never report success with planned work left undone (issue 32): a config edit must be honoured by one invocation.
onsuccess:
    missing = unfinished_planned_results()
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        print(
            f"shardscope: the plan lists {len(missing)} result file(s) this run did not produce ({shown}); "
            "run `snakemake` again to run them",
            file=sys.stderr,
        )
        raise SystemExit(1)
