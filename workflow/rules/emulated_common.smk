"""Emulated fabrics: the collective and training workers over presets of capped links (config `emulated`).
Emulated training jobs are ordinary planned training jobs (rule train, `shardscope job run`) whose spec names the fabric.

On with `emulated.enabled: true`, and with `auto` (the default) on a machine without GPUs. Each preset's hosts are network namespaces joined by veth
links that `tc` caps (shardscope.emulated); results go to results/emulated/{preset}/ labelled
`fabric: emulated:<preset>`, and `emulated_results` lists them for the collect rule. The planner
decides which jobs run (plan.json `emulated`): without root, `ip` or `tc` it plans none and
says why under `skipped` (printed in the plan log), and nothing else changes.
"""

EMULATED = config.get("emulated") or {"enabled": False}
EMULATED_NAME = r"[a-z][a-z0-9_]*"
#: One emulated job's spec file in the plan (its rule's input): {preset}-{placement}-{op or strategy}.
EMULATED_SPEC = f"{RESULTS}/plan/jobs/{{preset}}-{{placement}}-{{name}}.json"


def emulated_results(wildcards=None):
    """Every emulated collective result file the plan lists (none when the stage is off, or skipped by the planner).
    Emulated training jobs are planned training jobs (plan.json `training`, field `emulated`), run by rule train."""
    return [
        f"{RESULTS}/emulated/{job['preset']}/collectives/{job['placement']}/{job['op']}.json"
        for job in plan_doc().get("emulated", [])
        if job["kind"] == "emulated_collective"
    ]


def emulated_training_results(wildcards=None):
    """The result files of the planned training jobs that run over an emulated fabric."""
    return [f"{RESULTS}/training/{job['job_id']}.json" for job in plan_doc()["training"] if job.get("emulated")]


def emulated_ranks(wildcards):
    """Ranks of an emulated job: the hosts of its placement."""
    from shardscope.emulated.presets import get_preset

    return len(get_preset(wildcards.preset, EMULATED).placements[wildcards.placement])
