"""Emulated fabrics: the collective and training workers over presets of capped links (config `emulated`).

Off unless `emulated.enabled: true`. Each preset's hosts are network namespaces joined by veth
links that `tc` caps (shardscope.emulated); results go to results/emulated/{preset}/ labelled
`fabric: emulated:<preset>`, and `emulated_results` lists them for the collect rule. Without
root, `ip` or `tc` the stage is skipped with one sentence and nothing else changes.
"""

from snakemake.logging import logger

EMULATED = config.get("emulated") or {"enabled": False}
EMULATED_NAME = r"[a-z][a-z0-9_]*"


def _emulated_jobs():
    """(preset, placement) pairs to run: none when disabled; presets this machine cannot build are skipped with one sentence."""
    if EMULATED.get("enabled") is not True:  # the schema makes it a boolean; a string from --config is not `true`
        return []
    from shardscope.emulated.netns import support_problem
    from shardscope.emulated.presets import all_presets

    prefix = EMULATED.get("prefix", "ssfab-")
    try:
        known = all_presets(EMULATED)
        names = EMULATED.get("presets", ["fast", "pcie_like", "nvl_groups"])
        unknown = [name for name in names if name not in known]
        if unknown:
            raise UserError(f"config key emulated.presets: unknown fabric {unknown[0]!r}; expected one of {', '.join(sorted(known))}")
        presets = [known[name] for name in names]
        problem = support_problem(prefix=prefix)
    except UserError as error:
        raise WorkflowError(str(error)) from None
    if problem:
        logger.warning(f"shardscope: emulated fabrics skipped: {problem}.")
        return []
    delayed = [p.name for p in presets if p.needs_delay]
    problem = support_problem(need_delay=True, prefix=prefix) if delayed else None
    if problem:
        logger.warning(f"shardscope: emulated fabrics {', '.join(delayed)} skipped: {problem}.")
        presets = [p for p in presets if not p.needs_delay]
    return [(preset.name, placement) for preset in presets for placement in preset.placements]


EMULATED_JOBS = _emulated_jobs()


def emulated_results(wildcards=None):
    """Every emulated result file the config asks for (empty when the stage is off or skipped)."""
    files = []
    for preset, placement in EMULATED_JOBS:
        files += [f"{RESULTS}/emulated/{preset}/collectives/{placement}/{op}.json" for op in EMULATED.get("ops", [])]
        files += [f"{RESULTS}/emulated/{preset}/training/{placement}/{s}.json" for s in EMULATED.get("strategies", [])]
    return files


def emulated_ranks(wildcards):
    """Ranks of an emulated job: the hosts of its placement."""
    from shardscope.emulated.presets import get_preset

    return len(get_preset(wildcards.preset, EMULATED).placements[wildcards.placement])


def emulated_model():
    """The cpu section's model as the --model flag wants it (a preset name or JSON)."""
    model = config["cpu"]["model"]
    return json.dumps(model) if isinstance(model, dict) else model
