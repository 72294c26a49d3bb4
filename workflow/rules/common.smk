"""Helpers shared by the rules of every stage -- paths, the plan read through the checkpoints, job lookups."""

import json
import os
import subprocess
import sys
from pathlib import Path

from shardscope.config import config_hash


def _python():
    """The interpreter jobs run shardscope with: Snakemake's own (so an unactivated .venv works),
    or the conda environment's `python` under --sdm conda."""
    methods = {str(m).lower() for m in getattr(workflow.deployment_settings, "deployment_method", ())}
    return "python" if any("conda" in m for m in methods) else sys.executable


PY = _python()
SHARDSCOPE = f"{PY} -m shardscope"
TORCHRUN = f"{PY} -m torch.distributed.run"

# Cheap bookkeeping rules run where Snakemake runs, also under the Slurm profile; the topology
# probe and the timed jobs run on compute nodes.
localrules:
    all,
    plan,
    collect,
    figures,
    paper,


RESULTS = config["results"]
DB = config["db"]
ENVS = "../../envs/shardscope.yaml"
CONFIG_HASH = config_hash(config)


def _git_rev():
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=workflow.basedir, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


GIT_REV = _git_rev()

# Provenance stamps reach the workers through the environment, not through the params of a
# job (a param change makes Snakemake rerun the job; a new commit or an unrelated config edit
# must not re-run every measurement).
os.environ.update(SHARDSCOPE_GIT_REV=GIT_REV, SHARDSCOPE_CONFIG_HASH=CONFIG_HASH)


def topology_args():
    """`detect` on this machine, or `parse FILE` when the config names a saved probe output."""
    saved = config["topology"].get("file")
    return f"parse {saved}" if saved else "detect"


def plan_doc():
    """The plan written by the plan checkpoint (evaluated after it ran)."""
    return json.loads(Path(checkpoints.plan.get().output.json).read_text())


def plan_job(kind, job_id):
    """The planned job `job_id` of `kind` ('collectives' or 'training')."""
    for job in plan_doc()[kind]:
        if job["job_id"] == job_id:
            return job
    raise ValueError(f"job {job_id!r} is not in the {kind} plan; run `snakemake` without a target to see the plan")


def sizing():
    """The `cpu` or `gpu` config section the plan chose for this machine."""
    return plan_doc()["profile"]


def on_gpu():
    return plan_doc()["device"] == "gpu"


def job_env(kind, job_id):
    """Environment prefix of a job's shell command: visible GPUs and transport knobs."""
    job = plan_job(kind, job_id)
    env = dict(job["env"])
    if job.get("cuda_visible_devices"):
        env["CUDA_VISIBLE_DEVICES"] = job["cuda_visible_devices"]
    return " ".join(f"{k}={v}" for k, v in sorted(env.items()))


def job_gpus(kind, job_id):
    return plan_job(kind, job_id)["world_size"] if on_gpu() else 0


def collective_results(wildcards):
    """Every planned collective job's result file."""
    return [f"{RESULTS}/collectives/{job['job_id']}.json" for job in plan_doc()["collectives"]]


def training_results(wildcards):
    """Every planned training job's result file."""
    return [f"{RESULTS}/training/{job['job_id']}.json" for job in plan_doc()["training"]]


def memory_budget_args():
    gib = config["training"].get("memory_budget_gib")
    return f"--memory-budget-bytes {int(gib * 2**30)}" if gib else ""
