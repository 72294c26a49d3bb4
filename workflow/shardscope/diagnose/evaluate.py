"""``shardscope verdict``: verdicts of result files against a topology (the ``shardscope.verdicts/1`` document)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shardscope.diagnose.inputs import Sweep, gpu_name, group_repeats, load_sweep
from shardscope.diagnose.sweep_summary import (
    FLOOR_MAX_BYTES,
    FLOOR_SIZES,
    MIN_PLATEAU_BYTES,
    PLATEAU_TOLERANCE,
    REACH_FRACTION,
)
from shardscope.diagnose.verdicts import THRESHOLDS, verdict_for_group

SCHEMA = "shardscope.verdicts/1"


def evaluate(paths: Sequence[str], topology: Mapping[str, Any] | None = None, topology_name: str | None = None,
             gpu: str | None = None, nic_gbps: float | None = None, transport: str | None = None) -> dict[str, Any]:
    """Verdicts of the sweeps in ``paths`` (repeats of one job grouped) on ``topology`` (None: unknown for GPU runs).

    ``gpu`` names the GPU model when neither the topology nor the files do; ``transport``
    labels nccl-tests logs (our documents carry their own label).
    """
    sweeps: list[Sweep] = []
    for path in paths:
        sweep = load_sweep(path)
        if transport and sweep.kind == "nccl-tests":
            sweep = Sweep(**{**sweep.__dict__, "transport": transport})
        sweeps.append(sweep)
    machine = None
    notes: list[str] = []
    if topology is not None:
        from shardscope.costmodel.hardware import spec_for_name
        from shardscope.costmodel.machine import build_machine

        has_names = any(g.get("name") for g in topology.get("gpus", []))
        name = gpu
        if name is None and topology.get("gpus") and not has_names:
            found = gpu_name(sweeps)
            if found and spec_for_name(found):
                name = found
                notes.append(f"GPU model {name!r} taken from the result files (the topology does not name it)")
        machine = build_machine(topology, gpu_name=name, nic_gbps=nic_gbps, source=topology_name or "topology")
    groups = [verdict_for_group(group, machine, topology) for group in group_repeats(sweeps)]
    return {
        "schema": SCHEMA, "kind": "verdicts", "topology": topology_name, "notes": notes,
        "thresholds": {**THRESHOLDS, "plateau_tolerance": PLATEAU_TOLERANCE, "reach_fraction": REACH_FRACTION,
                       "min_plateau_bytes": MIN_PLATEAU_BYTES, "floor_sizes": FLOOR_SIZES, "floor_max_bytes": FLOOR_MAX_BYTES},
        "sweeps": groups,
    }


def _gbps(value: float | None) -> str:
    return f"{value:.2f} GB/s" if value is not None else "n/a"


def format_verdicts(doc: Mapping[str, Any]) -> str:
    """The verdicts document as text: one block per job."""
    lines = []
    for v in doc["sweeps"]:
        s = v["summary"]
        where = f"{v['op']} on {v['world_size']} ranks" + (f" / {v['nodes']} nodes" if v["nodes"] > 1 else "") + (
            f", {v['placement']}" if v.get("placement") else "") + f", transport {v['transport']}"
        lines.append(f"{v['verdict'].upper()}: {where} ({len(v['sources'])} file(s))")
        lines.append(f"    {v['reason']}")
        spread = s.get("plateau_spread")
        ci = (f" (95% CI {spread['ci95_low']:.2f}..{spread['ci95_high']:.2f} over {spread['n']} runs)"
              if spread and spread.get("ci95_low") is not None else "")
        lines.append(f"    plateau {_gbps(s['plateau_busbw_gbps'])}{ci}; 90% of it from {s['size_to_90pct_bytes'] or 'n/a'} B; "
                     f"latency floor {s['latency_floor_us']:.1f} us")
        exp = v["expected"]
        if exp["known"]:
            lines.append(f"    expected {_gbps(exp['plateau_gbps'])} ({exp['link']} bottleneck, GPUs {list(exp['members'])}, "
                         f"{exp['nodes']} node(s)); physical ceiling {_gbps(exp['ceiling_gbps'])}")
        for hint in v.get("hints") or []:
            lines.append(f"    look at: {hint}")
        for note in s.get("notes") or []:
            lines.append(f"    note: {note}")
    for note in doc.get("notes") or []:
        lines.append(f"note: {note}")
    return "\n".join(lines) + "\n"
