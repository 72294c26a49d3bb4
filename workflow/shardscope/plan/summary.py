"""A plan.json in a dozen lines, for people: what ``shardscope plan`` prints without ``--json``.

The JSON (``--json``, ``--out``) is what the pipeline reads; this summary says how many jobs each
stage runs, at which world sizes, and on which GPUs, so a user can check a plan before running it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shardscope.plan.jobs import planned_jobs

#: Seconds one job of each kind took on this machine kind (2 CPU cores, gloo, config/config.yaml's
#: ``cpu`` section), measured by ``benchmarks/pipeline_time.py`` on 2026-12-02 on a machine with
#: nothing else running (load average 0.20 at the start of the first run, 1.29 at the end of the
#: second): the mean per kind of two 54 s runs, with DeepSpeed's C++ op already built for the
#: environment (building it once costs about 30 s more). Snakemake logs whole seconds, so a kind's
#: mean is over every job of it in both runs. A peer (nccl-tests) job is taken to cost a collective
#: job. Constants measured, not modeled; used only for plans on CPU (device ``cpu``). An earlier
#: session's machine took three times as long (155 s): the estimate is for a machine like this one.
CPU_JOB_SECONDS: dict[str, float] = {
    "collective": 2.8, "train:ddp": 4.5, "train:zero": 5.0, "train:fsdp": 5.0, "peer": 2.8,
}
#: The stages every run has besides the planned jobs (topology, plan, reference runs, predictions,
#: doctor, verdicts, collect, step calibration, figures, paper): the wall time the planned jobs leave,
#: same runs (54 s less the jobs' 43 s).
CPU_FIXED_SECONDS = 11.0
CPU_BASIS = ("per-job-kind seconds measured on an idle 2-core CPU node by benchmarks/pipeline_time.py, "
             "not modeled")


@dataclass(frozen=True)
class Estimate:
    """How many jobs a plan runs and how long the pipeline should take on this node (None: not known)."""

    jobs: int
    seconds: float | None
    basis: str
    search_jobs: int = 0
    """At most this many micro-batch search trials and best-micro-batch runs besides ``jobs`` (an upper bound:
    how many trials a search takes depends on where its micro-batch stops fitting); where every search starts at
    the memory model's micro-batch, as many as it takes when the model is right."""
    search_bound: int | None = None
    """Where the searches start at the memory model's micro-batch: the most trials and runs they can take when it is
    wrong (``search_jobs`` and ``seconds`` count the trials when it is right); None: ``search_jobs`` is the bound."""

    def sentence(self) -> str:
        """``12 jobs; estimated wall-clock on this node about 9 min (basis)``."""
        if self.search_bound is not None and self.search_jobs:
            jobs = (f"{self.jobs} jobs and {self.search_jobs} micro-batch search trials and best-micro-batch runs if "
                    f"the memory model's micro-batches are right (at most {self.search_bound} if not)")
        else:
            jobs = f"{self.jobs} jobs" + (f" and at most {self.search_jobs} micro-batch search trials and "
                                          "best-micro-batch runs" if self.search_jobs else "")
        if self.seconds is None:
            return f"{jobs}; no estimated wall-clock: {self.basis}"
        return f"{jobs}; estimated wall-clock on this node about {self.seconds / 60:.0f} min" + (
            " at most" if self.search_jobs and self.search_bound is None else "") + f" ({self.basis})"


def job_kind(job: Mapping[str, Any]) -> str:
    """The kind of a planned job whose time :data:`CPU_JOB_SECONDS` gives."""
    strategy = str(job.get("strategy") or "")
    if strategy:
        return "train:ddp" if strategy == "ddp" else "train:zero" if strategy.startswith("zero") else "train:fsdp"
    return "peer" if job.get("kind") == "nccl_tests" else "collective"


def estimate(plan: Mapping[str, Any], topology: Mapping[str, Any] | None = None) -> Estimate:
    """The number of planned jobs and the pipeline's wall-clock on this node.

    Measuring jobs run one at a time (the ``measure`` resource), so their times add up. On CPU the
    time comes from :data:`CPU_JOB_SECONDS` (measured); on GPUs, where no job time has been measured,
    from the cost model on ``topology`` (:mod:`shardscope.plan.modeled_time`, modeled and said so);
    without a topology no time is claimed.
    """
    jobs = [job for job in planned_jobs(dict(plan)) if isinstance(job, dict)]
    searches = plan.get("search") or []
    started = bool(searches) and all(entry.get("start_micro_batch") for entry in searches)
    bests = [(entry, 1) for entry in plan.get("best") or []]  # one run per condition at its search's best
    bound = sum(max_trials(e["micro_batches"], e.get("start_micro_batch")) for e in searches) + len(bests)
    searched = [(e, trials_if_right(e) if started else max_trials(e["micro_batches"])) for e in searches] + bests
    extra = sum(n for _, n in searched)
    limit = bound if started else None
    if plan.get("device") != "cpu":
        if topology is None:
            return Estimate(len(jobs), None, "no topology was given for the cost model to price the jobs", extra, limit)
        from shardscope.plan.modeled_time import modeled_seconds

        seconds, basis = modeled_seconds(plan, topology, searched, CPU_FIXED_SECONDS)
        return Estimate(len(jobs), seconds, basis, extra, limit)
    seconds = CPU_FIXED_SECONDS + sum(CPU_JOB_SECONDS[job_kind(job)] for job in jobs)
    seconds += sum(n * CPU_JOB_SECONDS[job_kind(entry)] for entry, n in searched)
    return Estimate(len(jobs), seconds, CPU_BASIS, extra, limit)


def max_trials(candidates: list[int], start: int | None = None) -> int:
    """The most trials a micro-batch search over ``candidates`` (from ``start``) can take, wherever its micro-batch
    stops fitting."""
    from shardscope.plan.microbatch_search import search_largest

    return max(len(search_largest(lambda m, k=k: "ok" if m <= k else "oom", candidates, start)["trials"])
               for k in [0, *candidates])


def trials_if_right(entry: Mapping[str, Any]) -> int:
    """The trials a search from the memory model's micro-batch takes when the model is right: that one fits and the
    next one up does not (one trial where it is the largest candidate)."""
    from shardscope.plan.microbatch_search import search_largest

    start = entry["start_micro_batch"]
    return len(search_largest(lambda m: "ok" if m <= start else "oom", entry["micro_batches"], start)["trials"])


def _counted(values: Iterable[Any]) -> str:
    """``ddp, fsdp x2`` : each distinct value in first-seen order, with its count when above 1."""
    counts = Counter(values)
    return ", ".join(f"{value} x{n}" if n > 1 else str(value) for value, n in counts.items()) or "none"


def _stage_line(name: str, jobs: list[Mapping[str, Any]], key: str, label: str) -> str:
    """One stage: its job count, what the jobs differ in (``key``, called ``label``), and their world sizes."""
    sizes = sorted({job["world_size"] for job in jobs})
    what = _counted(job[key] for job in jobs)
    return f"  {name:<12} {len(jobs):>3} jobs  {label} {what}; world sizes {', '.join(map(str, sizes)) or '-'}"


def _group_of(job: Mapping[str, Any]) -> tuple[str, Any, Any, Any, str]:
    """What a training job shares with its group: model, micro-batch, sequence length, timed steps, fabric."""
    fabric = f"emulated {job['emulated'].get('preset', '?')}" if isinstance(job.get("emulated"), dict) else (
        "emulated" if job.get("emulated") else "")
    return (str(job.get("model")), job.get("micro_batch"), job.get("seq_len"), job.get("steps"), fabric)


def _training_lines(training: list[Mapping[str, Any]]) -> list[str]:
    """One line per group of training jobs (model, micro-batch, sequence length, steps, fabric): every job is in one,
    so a scale the summary did not know of is never hidden (the memory-bound mistral-7b jobs were, issue 32)."""
    if not training:
        return [_stage_line("training", [], "strategy", "strategies")]
    groups: dict[tuple[str, Any, Any, Any, str], list[Mapping[str, Any]]] = {}
    for job in training:
        groups.setdefault(_group_of(job), []).append(job)
    lines = []
    for (model, micro_batch, seq_len, steps, fabric), jobs in groups.items():
        lines.append(_stage_line("training", jobs, "strategy", "strategies"))
        over = f", over {fabric}" if fabric else ""
        lines.append(f"  {'':<12} model {model}, micro-batch {micro_batch}, seq len {seq_len}, "
                     f"{steps} timed steps{over}")
    return lines


def summarize(plan: Mapping[str, Any], topology_name: str, estimated: Estimate | None = None) -> str:
    """The human summary of ``plan`` (a ``shardscope.plan/1`` document) made from ``topology_name``; its last
    sentence is ``estimated`` (default: :func:`estimate` of the plan alone)."""
    collectives, training = plan.get("collectives", []), plan.get("training", [])
    lines = [f"plan for {topology_name}: {plan['device']} fabric {plan['fabric']}, world sizes "
             f"{', '.join(map(str, plan['world_sizes'])) or 'none'}; "
             f"{len(collectives) + len(training)} single-node jobs"]
    lines.append(_stage_line("collectives", collectives, "op", "ops"))
    transports = _counted(job["transport"] for job in collectives)
    lines.append(f"  {'':<12} transports {transports}")
    lines += _training_lines(training)
    emulated = [job for job in plan.get("emulated") or [] if job.get("kind") == "emulated_collective"]
    if emulated:
        lines.append(f"  {'emulated':<12} {len(emulated):>3} jobs  collectives "
                     f"{_counted(j['op'] for j in emulated)} over "
                     f"presets {_counted(j['preset'] for j in emulated)}")
    searched = plan.get("search") or []
    if searched:
        lines.append(f"  {'search':<12} {len(searched):>3} micro-batch searches  strategies "
                     f"{_counted(entry.get('strategy', '?') for entry in searched)}; "
                     f"{len(plan.get('best') or [])} best-micro-batch runs")
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
    lines.append((estimated or estimate(plan)).sentence())
    lines.append("JSON: --json (stdout) or --out FILE (what the pipeline reads)")
    return "\n".join(lines) + "\n"
