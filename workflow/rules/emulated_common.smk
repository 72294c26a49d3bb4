"""Emulated fabrics: the collective and training workers over presets of capped links (config `emulated`).

Off unless `emulated.enabled: true`. Each preset's hosts are network namespaces joined by veth
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
    """Every emulated result file the plan lists (none when the stage is off, or skipped by the planner)."""
    files = []
    for job in plan_doc().get("emulated", []):
        where = f"{RESULTS}/emulated/{job['preset']}"
        if job["kind"] == "emulated_collective":
            files.append(f"{where}/collectives/{job['placement']}/{job['op']}.json")
        else:
            files.append(f"{where}/training/{job['placement']}/{job['strategy']}.json")
    return files


def emulated_ranks(wildcards):
    """Ranks of an emulated job: the hosts of its placement."""
    from shardscope.emulated.presets import get_preset

    return len(get_preset(wildcards.preset, EMULATED).placements[wildcards.placement])


def emulated_model():
    """The cpu section's model as the --model flag wants it (a preset name or JSON)."""
    model = config["cpu"]["model"]
    return json.dumps(model) if isinstance(model, dict) else model
