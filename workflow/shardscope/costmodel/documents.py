"""The ``predictions`` result document: modeled collective and strategy rows the results store loads.

Layout (``schema: shardscope.predictions/1``)::

    kind          "predictions"
    method        "modeled"
    created_at    UTC time the prediction was made (ISO 8601)
    topology      {hash, fabric, source, gpu_count, gpu, notes}: what was predicted for
    assumptions   {step: StepAssumptions, calibrations: {op: {...}}, model_version}
    collectives   rows: op, world_size, nodes, size_bytes, time_s, algbw_gbps, busbw_gbps,
                  algorithm, protocol, bottleneck, placement, transport, fabric, topology_hash, method
    strategies    rows: strategy, model, param_count, gpus, placement, step_time_s, compute_time_s,
                  comm_time_s, exposed_comm_time_s, memory_total_bytes, memory_available_bytes,
                  fits, tokens_per_step, fabric, topology_hash, method

``algbw_gbps`` and ``busbw_gbps`` are derived from ``size_bytes`` and ``time_s`` by
:mod:`shardscope.collectives.factors`, exactly as for measured rows, so the two overlay.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from shardscope.collectives.factors import algbw_gbps, busbw_gbps
from shardscope.costmodel.advise import Advice
from shardscope.costmodel.calibrate import Calibration
from shardscope.costmodel.collectives import CollectivePrediction, Job
from shardscope.costmodel.machine import Machine

KIND = "predictions"
SCHEMA = "shardscope.predictions/1"
#: Bumped when the model's equations or constants change, so stored predictions say which model made them.
MODEL_VERSION = "costmodel/1"


def topology_hash(doc: Mapping[str, Any]) -> str:
    """sha256 of the topology document's canonical JSON (sorted keys, no spaces).

    The same digest the results store uses as ``topologies.topology_hash``, so predictions made
    for a topology.json that was also collected join its rows.
    """
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def collective_row(pred: CollectivePrediction, job: Job, topo_hash: str, transport: str = "default") -> dict[str, Any]:
    """One ``collectives`` row of the document, bandwidths derived the nccl-tests way."""
    return {
        "op": pred.op,
        "world_size": pred.world_size,
        "nodes": job.nodes,
        "size_bytes": int(pred.size_bytes),
        "time_s": pred.time_s,
        "algbw_gbps": algbw_gbps(pred.size_bytes, pred.time_s),
        "busbw_gbps": busbw_gbps(pred.op, pred.world_size, pred.size_bytes, pred.time_s),
        "algorithm": pred.algorithm,
        "protocol": pred.protocol,
        "bottleneck": pred.bottleneck,
        "placement": ",".join(str(g) for g in job.members) if job.machine.fabric != "cpu" else "cpu",
        "transport": transport,
        "fabric": job.machine.fabric,
        "topology_hash": topo_hash,
        "method": "modeled",
    }


def strategy_rows(advice: Advice, topo_hash: str) -> list[dict[str, Any]]:
    """The ``strategies`` rows of one advice."""
    placement = ",".join(str(g) for g in advice.placement.members)
    return [dict(p.to_row(), placement=placement, fabric=advice.machine.fabric, topology_hash=topo_hash)
            for p in advice.ranking]


def predictions_document(topology: Mapping[str, Any], machine: Machine, collectives: Sequence[Mapping[str, Any]] = (),
                         strategies: Sequence[Mapping[str, Any]] = (), step_assumptions: Mapping[str, Any] | None = None,
                         calibrations: Mapping[str, Calibration] | None = None,
                         created_at: str | None = None) -> dict[str, Any]:
    """The whole document; ``created_at`` defaults to now (UTC)."""
    topo_hash = topology_hash(topology)
    return {
        "kind": KIND,
        "schema": SCHEMA,
        "method": "modeled",
        "created_at": created_at or datetime.now(UTC).isoformat(timespec="seconds"),
        "topology": {
            "hash": topo_hash,
            "fabric": machine.fabric,
            "source": dict(topology.get("source") or {}),
            "gpu_count": machine.gpu_count,
            "gpu": machine.spec.to_dict(),
            "notes": list(machine.notes),
        },
        "assumptions": {
            "model_version": MODEL_VERSION,
            "step": dict(step_assumptions or {}),
            "calibrations": {op: c.to_dict() for op, c in (calibrations or {}).items()},
        },
        "collectives": [dict(r) for r in collectives],
        "strategies": [dict(r) for r in strategies],
    }


def rows_for_sweep(preds: Iterable[tuple[CollectivePrediction, Job]], topo_hash: str, transport: str = "default") -> list[dict[str, Any]]:
    """Document rows for (prediction, job) pairs."""
    return [collective_row(p, j, topo_hash, transport) for p, j in preds]
