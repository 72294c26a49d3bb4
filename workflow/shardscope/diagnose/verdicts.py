"""Is this bandwidth normal? The busbw the detected links should give, and a verdict.

**Expected** busbw comes from the cost model (:mod:`shardscope.costmodel`): the same machine
(:func:`~shardscope.costmodel.machine.build_machine` on the topology), the same GPUs, nodes and
transport, and NCCL's own choice of algorithm and protocol (:func:`predict_collective`) at each
measured size; the plateau is compared with the model's large-message limit (:data:`PEAK_SIZE`), and the
**bottleneck** named is what limits the algorithm NCCL is modeled to run there (:func:`bottleneck_link`).

**Physical ceiling**: the nominal (raw) rate of the links the job crosses, above which no
algorithm can go: the model's bottleneck bandwidth scaled back from *effective* to *raw*
(NVLink line rate, PCIe per-direction rate after encoding, NIC line rate), and raised where an
algorithm legitimately reports a busbw above one link: NVLink SHARP on one node
(``2(n-1)/(n+1)`` of the per-GPU switch bandwidth, NVIDIA/nccl#2140) and tree/NVLS-tree
all-reduce across nodes (at most half the ring's bytes cross the network, NVIDIA/nccl#457,
NVIDIA/nccl-tests#22), bounded by the intra-node ceiling.

**Verdicts** (thresholds below, in :data:`THRESHOLDS`):

- ``suspicious``: some row's busbw is above the physical ceiling by more than 5% — impossible
  on the detected links (wrong topology, wrong GPU count, a timing bug, or a cached result);
- ``low``: the plateau busbw is below 70% of the model's large-message busbw; per row, below
  70% in the *bandwidth region* (sizes where the model is within 90% of its peak) or below 35%
  in the *latency region*, where the model is known to be optimistic (NCCL's latency tables
  omit the pipeline fill, tests/data/published/SOURCES.md);
- ``ok``: otherwise (``above_model`` is noted when the plateau exceeds the model by 15%);
- ``unknown``: no physical link to model (CPU processes over gloo), no topology, or no plateau.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from shardscope.costmodel.collectives import (
    Job,
    job_bandwidths,
    predict_collective,
)
from shardscope.costmodel.hardware import (
    INTEL_P2P_FACTOR,
    NET_EFFICIENCY,
    pcie_effective_gbps,
)
from shardscope.costmodel.machine import Machine
from shardscope.diagnose.inputs import Sweep
from shardscope.diagnose.sweep_summary import SweepSummary, summarize

LOW_PLATEAU = 0.70
LOW_LATENCY_REGION = 0.35
SUSPICIOUS_MARGIN = 1.05
ABOVE_MODEL = 1.15
BANDWIDTH_REGION = 0.90
#: The message size whose modeled busbw is the large-message limit (what ``peak_busbw_gbps`` uses).
PEAK_SIZE = 1 << 40

THRESHOLDS = {
    "low_plateau_fraction": LOW_PLATEAU,
    "low_latency_region_fraction": LOW_LATENCY_REGION,
    "suspicious_above_ceiling_factor": SUSPICIOUS_MARGIN,
    "above_model_note_factor": ABOVE_MODEL,
    "bandwidth_region_model_fraction": BANDWIDTH_REGION,
}

#: Raw per-direction bandwidth of a x16 PCIe link by generation, GB/s (after line encoding).
PCIE_RAW_X16_GBPS = {1: 4.0, 2: 8.0, 3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}

CPU_REASON = ("CPU processes over gloo: the cost model has no physical link for them (its gloo numbers are "
              "placeholders, not a link's capacity), so there is no expected bandwidth to compare with")


@dataclass(frozen=True)
class Expectation:
    """What the detected links should give one job, or why that is unknown."""

    known: bool
    reason: str | None = None
    plateau_gbps: float | None = None
    ceiling_gbps: float | None = None
    link: str | None = None
    """``nvlink``, ``pcie`` or ``net``: what bounds the algorithm NCCL is modeled to run on large messages."""
    members: tuple[int, ...] = ()
    nodes: int = 1
    transport: str = "default"
    notes: list[str] = field(default_factory=list)


def _raw_factor(machine: Machine, link: str) -> float:
    """Raw / effective bandwidth of a link class (how far above the model a link can physically go)."""
    if link == "nvlink":
        return machine.spec.nvlink_raw_gbps / machine.spec.nvlink_gbps
    if link == "net":
        return 1.0 / NET_EFFICIENCY
    gen = machine.spec.pcie_generation
    factor = PCIE_RAW_X16_GBPS.get(gen, 31.5) / pcie_effective_gbps(gen)
    return factor / INTEL_P2P_FACTOR if machine.intel_cpu else factor


def physical_ceiling(op: str, job: Job) -> float:
    """The highest busbw any NCCL algorithm can report for ``op`` on ``job`` (module docstring)."""
    bw = job_bandwidths(job)
    machine, n = job.machine, job.per_node
    intra = bw.intra_gbps * _raw_factor(machine, bw.intra_link)
    nvls_ok = job.nvlink and machine.fabric == "nvswitch" and machine.spec.nvls_efficiency > 0 and op == "all_reduce"
    if nvls_ok:
        switch_raw = machine.switch_bandwidth(job.members) * _raw_factor(machine, "nvlink")
        intra = max(intra, switch_raw * 2 * (n - 1) / (n + 1))
    ceiling = bw.bus_gbps * _raw_factor(machine, bw.link)
    if job.nodes == 1:
        return max(ceiling, intra)
    if op == "all_reduce":
        net_raw = machine.network_gbps(len(job.members)) / NET_EFFICIENCY
        ceiling = max(ceiling, min(intra, 2 * net_raw))
    return ceiling


def resolve_job(machine: Machine, sweep: Sweep, gpus: Sequence[Mapping[str, Any]] = ()) -> tuple[Job | None, list[str]]:
    """The cost model's :class:`Job` for a sweep: its GPUs, nodes and transport (None with the reason)."""
    notes: list[str] = []
    nodes = sweep.nodes
    if sweep.world_size % nodes:
        return None, [f"{sweep.world_size} ranks on {nodes} hosts is not the same number of ranks per host"]
    per_node = sweep.world_size // nodes
    nvlink = sweep.transport != "pcie"
    members = sweep.members
    if members is None and sweep.pci_bus_ids:
        by_bus = {str(g.get("pci_bus_id") or "").lower(): g.get("index") for g in gpus}
        found = [by_bus.get(b.lower()) for b in sweep.pci_bus_ids]
        members = tuple(sorted({int(i) for i in found if isinstance(i, int)})) if all(isinstance(i, int) for i in found) else None
    if members is not None and (len(members) != per_node or any(m not in machine.gpus for m in members)):
        notes.append(f"GPUs {list(members)} from the file do not fit the topology's {list(machine.gpus)} for "
                     f"{per_node} rank(s) per node; the best placement is assumed")
        members = None
    if members is None:
        from shardscope.costmodel.placement import best_placement

        if per_node > machine.gpu_count:
            return None, [f"{per_node} ranks per node but the topology has {machine.gpu_count} GPU(s)"]
        members = best_placement(machine, per_node, nvlink).members
        notes.append(f"placement not recorded: the best {per_node} GPU(s) {list(members)} assumed")
    return Job(machine, tuple(members), nodes=nodes, nvlink=nvlink), notes


def expectation(machine: Machine | None, sweep: Sweep, gpus: Sequence[Mapping[str, Any]] = ()) -> tuple[Expectation, Job | None]:
    """The :class:`Expectation` of a sweep on ``machine`` (None when no topology was given)."""
    cpu = sweep.backend == "gloo" or (isinstance(sweep.env, Mapping) and sweep.env.get("device_type") == "cpu")
    if cpu or (machine is not None and machine.fabric == "cpu"):
        return Expectation(False, CPU_REASON, transport=sweep.transport), None
    if machine is None:
        return Expectation(False, "no topology given (pass --topology FILE|auto|preset:NAME)", transport=sweep.transport), None
    if sweep.world_size < 2:
        return Expectation(False, "one rank: there is no link between ranks", transport=sweep.transport), None
    if machine.fabric == "single" and sweep.nodes == 1:
        return Expectation(False, f"{sweep.world_size} ranks on one host whose topology has a single GPU: there is no "
                           "GPU-to-GPU link to model", transport=sweep.transport), None
    job, notes = resolve_job(machine, sweep, gpus)
    if job is None:
        what = f"{sweep.world_size} ranks across {sweep.nodes} nodes" if sweep.nodes > 1 else f"{sweep.world_size} ranks"
        return Expectation(False, f"{what}: " + "; ".join(notes), transport=sweep.transport), None
    peak = predict_collective(sweep.op, PEAK_SIZE, job)
    return Expectation(True, None, peak.busbw_gbps, physical_ceiling(sweep.op, job), bottleneck_link(sweep.op, job),
                       job.members, job.nodes, sweep.transport, notes + list(machine.notes)), job


def bottleneck_link(op: str, job: Job) -> str:
    """What bounds ``op`` on large messages: the cut that limits the algorithm NCCL is modeled to run.

    Not the ring's weakest cut: across nodes a tree or NVLS-tree can be bound by the NICs where the
    ring would be bound by NVLink (or the reverse), so the verdict names the network where the NICs
    limit the run (``net``) and the node's links where they do not.
    """
    return predict_collective(op, PEAK_SIZE, job).bottleneck


def row_verdicts(summary: SweepSummary, op: str, job: Job, exp: Expectation) -> list[dict[str, Any]]:
    """Per measured size: expected busbw, percentage, region and verdict (module docstring)."""
    out = []
    for entry in summary.per_size:
        size = int(entry["size_bytes"])
        expected = predict_collective(op, size, job).busbw_gbps
        measured = float(entry["busbw_median_gbps"])
        region = "bandwidth" if expected >= BANDWIDTH_REGION * (exp.plateau_gbps or 0) else "latency"
        pct = 100.0 * measured / expected if expected > 0 else None
        limit = LOW_PLATEAU if region == "bandwidth" else LOW_LATENCY_REGION
        if exp.ceiling_gbps and measured > SUSPICIOUS_MARGIN * exp.ceiling_gbps:
            verdict = "suspicious"
        elif pct is not None and pct < 100 * limit:
            verdict = "low"
        else:
            verdict = "ok"
        out.append({"size_bytes": size, "measured_busbw_gbps": measured, "expected_busbw_gbps": expected,
                    "ceiling_gbps": exp.ceiling_gbps, "pct_of_expected": pct, "region": region, "verdict": verdict})
    return out


def hints(exp: Expectation, topology: Mapping[str, Any] | None) -> list[str]:
    """Where to look when a sweep is low, from what its bottleneck is made of (``shardscope doctor`` checks these)."""
    if not exp.known:
        return []
    out = []
    if exp.link == "net" or exp.nodes > 1:
        far = [g for g in (topology or {}).get("gpus", []) if g.get("index") in exp.members
               and str(g.get("nearest_nic_code") or "").upper() in ("SYS", "NODE", "PHB")]
        if far:
            codes = sorted({str(g["nearest_nic_code"]) for g in far})
            out.append(f"GPU(s) {[g['index'] for g in far]} reach their nearest NIC only through the CPU ({'/'.join(codes)}): "
                       "GPU<->NIC traffic crosses the host bridge or the socket link and GPUDirect RDMA may be off "
                       "(NVIDIA/nccl-tests#293); use GPUs and NICs under one PCIe switch, or check NPS/NUMA settings")
        out.append("network: check the NIC line rate and count, GPUDirect RDMA (GDRDMA in the NCCL log), "
                   "PCIe ACS redirect and IOMMU translation on the GPU/NIC paths (NVIDIA/nccl#2409)")
    if exp.link == "pcie" or exp.transport == "pcie":
        out.append("PCIe: check ACS on the bridges in the GPU paths, IOMMU mode (iommu=pt), the GPUs' current link "
                   "width/generation, and whether NCCL used P2P or fell back to SHM (the NCCL log)")
    if exp.link == "nvlink":
        out.append("NVLink: check that NCCL used P2P (not SHM/NET) and NVLS where available (the NCCL log), "
                   "and NCCL_* variables that disable P2P or NVLS (shardscope doctor)")
    return out


def log_hints(sweep: Sweep) -> list[str]:
    """Causes visible in the run's own NCCL log and settings: no GPUDirect RDMA, host-staged transports, slow variables."""
    from shardscope.diagnose.host import check_nccl_env

    out = []
    log = sweep.nccl_log or {}
    if log.get("gdr_rdma") is False:
        out.append("the NCCL log shows network connections without GDRDMA: GPU<->NIC traffic is staged through host "
                   "memory (NCCL_NET_GDR_LEVEL, GPU/NIC distance, nvidia_peermem)")
    if "SHM" in (log.get("transports") or {}):
        out.append("the NCCL log shows SHM connections: those GPU pairs copy through host memory instead of P2P")
    settings = dict(sweep.nccl_env)
    if sweep.world_size // sweep.nodes == 1:  # one rank per node: no intra-node transport to slow down
        settings = {k: v for k, v in settings.items() if k not in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE")}
    env = check_nccl_env(settings, "the run's NCCL settings")
    if env.status == "warn":
        out.append(env.concluded)
    return out


def _log_flags(sweep: Sweep, topology: Mapping[str, Any] | None) -> list[str]:
    """Contradictions between the sweep's transport label and what its NCCL log shows."""
    if not sweep.nccl_log:
        return []
    from shardscope.diagnose.nccl_log import NcclLogSummary, transport_flags

    return transport_flags(NcclLogSummary(**sweep.nccl_log), sweep.transport, topology)


def verdict_for_group(sweeps: Sequence[Sweep], machine: Machine | None, topology: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The verdict document of one job's sweeps (repeats grouped): summary, expectation, rows, verdict."""
    first = sweeps[0]
    rows = list(itertools.chain.from_iterable(s.rows for s in sweeps))
    summary = summarize(rows, first.op, first.world_size)
    exp, job = expectation(machine, first, (topology or {}).get("gpus", []))
    out: dict[str, Any] = {
        "sources": [s.source for s in sweeps], "kind": first.kind, "op": first.op, "world_size": first.world_size,
        "nodes": first.nodes, "hosts": sorted(set(first.hosts)), "placement": first.placement,
        "transport": first.transport, "nccl_env": dict(first.nccl_env), "summary": summary.to_dict(),
        "expected": asdict(exp), "nccl_log": first.nccl_log, "nccl_flags": _log_flags(first, topology),
        "input_notes": [note for s in sweeps for note in s.input_notes],
    }
    if not exp.known or job is None:
        out.update(verdict="unknown", reason=exp.reason, pct_of_expected=None, rows=[], hints=[])
        return out
    per_row = row_verdicts(summary, first.op, job, exp)
    out["rows"] = per_row
    out["hints"] = []
    plateau = summary.plateau_busbw_gbps
    if any(r["verdict"] == "suspicious" for r in per_row):
        worst = max(per_row, key=lambda r: r["measured_busbw_gbps"])
        out.update(verdict="suspicious", pct_of_expected=100.0 * plateau / exp.plateau_gbps if plateau and exp.plateau_gbps else None,
                   reason=(f"{worst['measured_busbw_gbps']:.2f} GB/s at {worst['size_bytes']} B is above the physical ceiling "
                           f"of {exp.ceiling_gbps:.2f} GB/s of the detected {exp.link} links: check the topology, GPU count "
                           "and timing"))
        return out
    if plateau is None or not exp.plateau_gbps:
        out.update(verdict="unknown", pct_of_expected=None, reason="; ".join(summary.notes) or "no plateau")
        return out
    pct = 100.0 * plateau / exp.plateau_gbps
    out["pct_of_expected"] = pct
    if pct < 100 * LOW_PLATEAU:
        out.update(verdict="low", reason=(f"plateau {plateau:.2f} GB/s is {pct:.0f}% of the {exp.plateau_gbps:.2f} GB/s the "
                                          f"{exp.link} bottleneck should give (below {100 * LOW_PLATEAU:.0f}%)"),
                   hints=log_hints(first) + hints(exp, topology))
        return out
    note = " (above the model: NCCL's algorithm moves fewer bytes per link than the ring model assumes)" if pct > 100 * ABOVE_MODEL else ""
    if machine is not None and exp.link == "pcie" and not machine.spec.pcie_peer_access:
        note += f" (host-staged: {machine.spec.family} has no PCIe peer-to-peer)"
    out.update(verdict="ok", reason=f"plateau {plateau:.2f} GB/s is {pct:.0f}% of the expected {exp.plateau_gbps:.2f} GB/s{note}")
    return out
