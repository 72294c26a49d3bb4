"""A plan.json in a dozen lines, for people: what ``shardscope plan`` prints without ``--json``.

The JSON (``--json``, ``--out``) is what the pipeline reads; this summary says how many jobs each
stage runs, at which world sizes, and on which GPUs, so a user can check a plan before running it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any


def _counted(values: Iterable[Any]) -> str:
    """``ddp, fsdp x2`` : each distinct value in first-seen order, with its count when above 1."""
    counts = Counter(values)
    return ", ".join(f"{value} x{n}" if n > 1 else str(value) for value, n in counts.items()) or "none"


def _stage_line(name: str, jobs: list[Mapping[str, Any]], key: str, label: str) -> str:
    """One stage: its job count, what the jobs differ in (``key``, called ``label``), and their world sizes."""
    sizes = sorted({job["world_size"] for job in jobs})
    what = _counted(job[key] for job in jobs)
    return f"  {name:<12} {len(jobs):>3} jobs  {label} {what}; world sizes {', '.join(map(str, sizes)) or '-'}"


def summarize(plan: Mapping[str, Any], topology_name: str) -> str:
    """The human summary of ``plan`` (a ``shardscope.plan/1`` document) made from ``topology_name``."""
    collectives, training = plan.get("collectives", []), plan.get("training", [])
    lines = [f"plan for {topology_name}: {plan['device']} fabric {plan['fabric']}, world sizes "
             f"{', '.join(map(str, plan['world_sizes'])) or 'none'}; "
             f"{len(collectives) + len(training)} single-node jobs"]
    lines.append(_stage_line("collectives", collectives, "op", "ops"))
    transports = _counted(job["transport"] for job in collectives)
    lines.append(f"  {'':<12} transports {transports}")
    lines.append(_stage_line("training", training, "strategy", "strategies"))
    profile = plan.get("profile") or {}
    if profile:
        lines.append(f"  {'':<12} model {profile.get('model')}, micro-batch {profile.get('micro_batch')}, "
                     f"seq len {profile.get('seq_len')}, {profile.get('steps')} timed steps")
    multi = plan.get("multi_node")
    if multi:
        jobs = len(multi.get("collectives", [])) + len(multi.get("training", []))
        lines.append(f"  {'multi-node':<12} {jobs:>3} jobs  {multi['nodes']} nodes x {multi['nproc_per_node']} ranks "
                     f"(world size {multi['world_size']}); needs --profile profiles/slurm")
    places = plan.get("placements", [])
    if places:
        lines.append("placements (world size, name, where, slowest link):")
        for place in places:
            devices = place.get("cuda_visible_devices") or ",".join(map(str, place.get("devices", [])))
            where = f"GPUs {devices}" if devices else f"{place['world_size']} CPU processes"
            lines.append(f"  {place['world_size']:>4}  {place['placement']:<14} {where:<28} {place.get('slowest_link') or '-'}")
    lines.append("JSON: --json (stdout) or --out FILE (what the pipeline reads)")
    return "\n".join(lines) + "\n"
