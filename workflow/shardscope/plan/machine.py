"""Stages that run only where this machine allows: the nccl-tests peer and the emulated fabrics.

The planner decides them, once, where the plan rule runs (the node the jobs run on), and writes
the outcome into ``plan.json``: the jobs under ``nccl_tests`` and ``emulated``, and for a stage
that cannot run here one entry under ``skipped`` with the sentence that says why. The rules
only read the plan; nothing is probed while Snakemake parses the workflow.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from shardscope.contracts.jobs import PeerJob
from shardscope.errors import UserError
from shardscope.plan.specs import job_entry, positive_int

if TYPE_CHECKING:
    from shardscope.settings import PlannerSettings

#: The nccl-tests binary of the peer jobs.
PEER_BINARY = "all_reduce_perf"


def _emulated_problem(need_delay: bool, prefix: str) -> str | None:
    from shardscope.emulated.netns import support_problem

    return support_problem(need_delay=need_delay, prefix=prefix)


@dataclass(frozen=True, kw_only=True)
class MachineProbe:
    """How the planner looks at this machine (injected by tests)."""

    which: Callable[[str], str | None] = field(default=shutil.which)
    """Finds a program on the PATH (:func:`shutil.which`)."""
    emulated_problem: Callable[[bool, str], str | None] = field(default=_emulated_problem)
    """Why emulated fabrics (with link delays when the flag is set) cannot be built here, or None."""


def peer_section(plan: dict[str, Any], settings: dict[str, Any], machine: MachineProbe,
                 skipped: list[dict[str, str]]) -> list[dict[str, Any]]:
    """One nccl-tests peer job per planned (world size, placement) of the default transport.

    ``settings`` are the collective jobs' shared dtype, sweep, check and limits. Off GPU, or
    without ``all_reduce_perf`` on the PATH, no job is planned and ``skipped`` says why.
    """
    if plan.get("device") != "gpu":
        skipped.append({"stage": "nccl_tests", "reason": "nccl-tests peer skipped: the plan runs CPU processes, "
                                                         "and nccl-tests measures GPUs"})
        return []
    binary = machine.which(PEER_BINARY)
    if binary is None:
        skipped.append({"stage": "nccl_tests", "reason": f"nccl-tests peer skipped: {PEER_BINARY} is not on the "
                                                         "PATH of the node the plan was made on"})
        return []
    from shardscope.collectives.peer import peer_job_id

    jobs: dict[str, dict[str, Any]] = {}
    for job in plan["collectives"]:
        if job["transport"] != "default" or job["world_size"] < 2:
            continue
        job_id = peer_job_id(job["world_size"], job["placement"])
        if job_id not in jobs:
            jobs[job_id] = job_entry(PeerJob, {
                "job_id": job_id, "binary": binary, "world_size": job["world_size"], "nodes": 1,
                "nproc_per_node": job["world_size"], "placement": job["placement"], "devices": job["devices"],
                "cuda_visible_devices": job["cuda_visible_devices"], "env": job["env"], "dtype": settings["dtype"],
                "sweep": settings["sweep"], "check": settings["check"], "wall_s": settings["wall_s"]})
    return list(jobs.values())


#: One emulated (preset, placement) training may run on: preset name, placement name, host indices,
#: and the ``emulated`` field of its training jobs' specs.
EmulatedTarget = tuple[str, str, tuple[int, ...], dict[str, Any]]


def emulated_section(config: PlannerSettings, machine: MachineProbe, skipped: list[dict[str, str]],
                     on_gpu: bool = False) -> tuple[list[dict[str, Any]], list[EmulatedTarget]]:
    """The emulated-fabric collective jobs (each preset, placement and op of config ``emulated``), and
    every (preset, placement) that training jobs may run on (the planner picks their strategies).

    Nothing when the stage is off. ``enabled: auto`` (the default) runs it on a machine without GPUs, where
    it is the only way to see a fabric's effect, and not on a GPU node (``on_gpu``), which measures its real
    fabrics; ``skipped`` says so. Presets this machine cannot build (no root, no ``ip``/``tc``,
    no netem for delayed links) are left out and ``skipped`` says why; an unknown preset name
    is a :class:`UserError` naming ``emulated.presets``.
    """
    section = config.emulated
    enabled = section.enabled
    if enabled == "auto" and on_gpu:
        skipped.append({"stage": "emulated", "reason": "emulated fabrics not run (emulated.enabled: auto): a GPU node "
                                                       "measures its real fabrics; set it to true to run them too"})
        return [], []
    if enabled not in (True, "auto"):
        return [], []
    from shardscope.emulated.presets import all_presets

    known = all_presets({"fabrics": section.fabrics})
    names = section.presets
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UserError(f"config key emulated.presets: unknown fabric {unknown[0]!r}; expected one of {', '.join(sorted(known))}")
    presets = [known[name] for name in names]
    prefix = section.prefix
    problem = machine.emulated_problem(False, prefix)
    if problem:
        skipped.append({"stage": "emulated", "reason": f"emulated fabrics skipped: {problem}"})
        return [], []
    delayed = [p.name for p in presets if p.needs_delay]
    problem = machine.emulated_problem(True, prefix) if delayed else None
    if problem:
        skipped.append({"stage": "emulated", "reason": f"emulated fabrics {', '.join(delayed)} skipped: {problem}"})
        presets = [p for p in presets if not p.needs_delay]
    jobs: list[dict[str, Any]] = []
    targets: list[EmulatedTarget] = []
    where = {"prefix": prefix, "subnet": section.subnet, "timeout_s": float(section.timeout_s)}
    for preset in presets:
        for placement, hosts in preset.placements.items():
            jobs += [{"kind": "emulated_collective", "job_id": f"{preset.name}-{placement}-{op}", "preset": preset.name,
                      "placement": placement, "op": op} for op in section.ops]
            targets.append((preset.name, placement, tuple(hosts),
                            {"preset": preset.name, "placement": placement, "definition": preset.to_dict(), **where}))
    return jobs, targets


def emulated_sizing(config: PlannerSettings) -> dict[str, Any]:
    """The ``cpu`` sizing keys that config ``emulated.training`` replaces for training over emulated fabrics.

    On a GPU node the fast fabric's traffic is small beside each step's compute; the tiny CPU model's
    step is so short that gloo's per-call latency dominates it even on an uncapped link, which hides
    what the fabric does. A heavier step (more tokens, the same parameters and collectives) restores the
    ratio the finding is about. Each value given (null: ``cpu``'s) must be a positive integer (a :class:`UserError`
    names the key).
    """
    given = {key: value for key, value in asdict(config.emulated.training).items() if value is not None}
    return {key: positive_int(f"emulated.training.{key}", value) for key, value in given.items()}
