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
    memory        modeled whole peaks of named cases (``memory_case_predictions``; plan documents)
    decision_map  the decision map's modeled cells (``decision_map_cells``; plan documents)
    memory_model  the ZeRO paper's model states of the seed's Mistral-7B (``memory_model_cases``; plan documents)

:func:`plan_predictions` writes the document for every job of a ``plan.json`` (the pipeline's
``predictions`` rule, ``shardscope predict plan``) and adds ``plan``: what was predicted and,
in ``strategies_note``, why strategies were not.

``algbw_gbps`` and ``busbw_gbps`` are derived from ``size_bytes`` and ``time_s`` by
:mod:`shardscope.contracts.factors`, exactly as for measured rows, so the two overlay.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from shardscope.contracts.factors import algbw_gbps, busbw_gbps
from shardscope.contracts.names import GROUPED_STRATEGIES
from shardscope.contracts.strategies import WORKER_ADAMW, WORKER_DDP_BUCKET_VIEW
from shardscope.costmodel.advise import Advice
from shardscope.costmodel.calibrate import Calibration
from shardscope.costmodel.collectives import CollectivePrediction, Job
from shardscope.costmodel.machine import Machine
from shardscope.costmodel.step import StepAssumptions
from shardscope.errors import UserError
from shardscope.topology.identity import topology_hash

KIND = "predictions"
SCHEMA = "shardscope.predictions/1"
#: Bumped when the model's equations or constants change, so stored predictions say which model made them.
MODEL_VERSION = "costmodel/1"


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


def plan_sizes(sweep: Mapping[str, Any]) -> list[int]:
    """The message sizes of a plan's sweep (``min_bytes``, ×``factor``, up to ``max_bytes``), as the workers run them."""
    low, high, factor = int(sweep["min_bytes"]), int(sweep["max_bytes"]), int(sweep["factor"])
    if low < 1 or high < low or factor < 2:
        raise UserError(f"plan: bad sweep min_bytes {low}, max_bytes {high}, factor {factor}")
    sizes, size = [], low
    while size <= high:
        sizes.append(size)
        size *= factor
    return sizes


def _plan_assumptions(profile: Mapping[str, Any], training: list[Mapping[str, Any]] | None = None) -> StepAssumptions:
    """Step assumptions from the plan's sizing: its micro-batch, sequence length and dtype (bf16: 2-byte parameters),
    gradients in the training jobs' ``reduce_dtype`` (``auto``: the training dtype), as the harness reduces them."""
    dtype = str(profile.get("dtype") or "bfloat16")
    requested = {str(j.get("reduce_dtype") or "auto") for j in training or []}
    reduce_dtype = requested.pop() if len(requested) == 1 else "auto"
    reduce_dtype = dtype if reduce_dtype == "auto" else reduce_dtype
    try:
        return StepAssumptions(micro_batch=int(profile["micro_batch"]), seq_len=int(profile["seq_len"]), dtype=dtype,
                               comm_bytes=2 if dtype == "bfloat16" else 4,
                               reduce_bytes=2 if reduce_dtype == "bfloat16" else 4,
                               ddp_bucket_view=WORKER_DDP_BUCKET_VIEW, adamw=WORKER_ADAMW)
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"plan: the profile cannot size a training step ({exc})") from None


def plan_predictions(topology: Mapping[str, Any], plan: Mapping[str, Any], source: str = "topology",
                     created_at: str | None = None) -> dict[str, Any]:
    """The predictions document for every job of a ``plan.json`` on the machine of ``topology``.

    Collectives: each planned op, world size and transport over the planned message sizes, on
    the best GPUs for that world size (on the ``cpu`` fabric these are the model's gloo
    placeholders, which the document's ``topology.notes`` say). Strategies: each planned
    strategy at each training world size with the planned model and sizing (``hsdp`` and ``zero3_hpz``
    with their planned ``shard_size``, their collectives inside one island timed on one island's GPUs); not on the
    ``cpu`` fabric (the step model needs a GPU's peak FLOP/s) or when the advisor refuses,
    and ``plan.strategies_note`` then says why. Why: the pipeline stores these next to the
    measurements of the same jobs, so modeled and measured overlay on one key.
    """
    from shardscope.costmodel.advise import advise
    from shardscope.costmodel.machine import build_machine
    from shardscope.costmodel.sweep import predict_sweep

    try:
        jobs, training, profile = list(plan["collectives"]), list(plan["training"]), plan["profile"]
        sizes = plan_sizes(profile["sweep"])
    except (KeyError, TypeError) as exc:
        raise UserError(f"plan: missing or malformed field {exc}; expected a plan.json written by `shardscope plan`") from None
    machine = build_machine(topology, source=source)
    topo_hash = topology_hash(topology)
    ops = sorted({str(j["op"]) for j in jobs})
    world_sizes = sorted({int(j["world_size"]) for j in jobs})
    transports = [t for t in ("default", "pcie") if any(j["transport"] == t for j in jobs)]
    collectives: list[dict[str, Any]] = []
    for transport in transports:
        chosen = sorted({int(j["world_size"]) for j in jobs if j["transport"] == transport})
        collectives += rows_for_sweep(predict_sweep(machine, ops, chosen, sizes, None, transport), topo_hash, transport)
    assumptions = _plan_assumptions(profile, training)
    strategies: list[dict[str, Any]] = []
    note = None
    # one advice per world size and model scale (issue 17 plans a memory-bound model beside the default one);
    # the same strategies under another fabric condition (transport, placement) share their job's prediction
    by_size: dict[tuple[int, str, int, int], list[dict[str, Any]]] = {}
    for job in training:
        key = (int(job["world_size"]), str(job["model"]), int(job.get("micro_batch") or assumptions.micro_batch),
               int(job.get("seq_len") or assumptions.seq_len or 0))
        by_size.setdefault(key, []).append(job)
    if machine.fabric == "cpu":
        note = ("strategies not predicted: the step model needs a GPU's peak FLOP/s and memory, and this topology has "
                "no GPUs (fabric cpu)")
    else:
        try:
            for (n, model, micro_batch, seq_len), group in sorted(by_size.items()):
                names = tuple(dict.fromkeys(str(j["strategy"]) for j in group))
                sized = dataclasses.replace(assumptions, micro_batch=micro_batch, seq_len=seq_len or assumptions.seq_len)
                # hsdp's shard group and zero3_hpz's partition as planned (the first job's; else advise's island)
                shards = {s: int(j["shard_size"]) for j in reversed(group)
                          if (s := str(j["strategy"])) in GROUPED_STRATEGIES and j.get("shard_size")}
                advice = advise(topology, model, n, strategies=names, assumptions=sized, source=source,
                                shard_sizes=shards, assume_unknown=False)
                # the plan's model name, so predictions join the training runs of the same jobs
                strategies += [dict(row, model=str(group[0]["model"])) for row in strategy_rows(advice, topo_hash)]
        except UserError as exc:
            strategies, note = [], f"strategies not predicted: {exc}"
    doc = predictions_document(topology, machine, collectives, strategies, assumptions.to_dict(), None, created_at)
    from shardscope.costmodel.memory_cases import memory_case_rows

    doc["memory"] = memory_case_rows(plan, machine.memory_bytes if machine.fabric != "cpu" else None)
    from shardscope.costmodel.decision_map import decision_map_rows, map_fabrics

    from shardscope.costmodel.memory_model_cases import memory_model_case_rows

    doc["decision_map"] = decision_map_rows(map_fabrics(machine.fabric))
    doc["memory_model"] = memory_model_case_rows()
    doc["plan"] = {"device": plan.get("device"), "ops": ops, "world_sizes": world_sizes, "transports": transports,
                   "sizes_bytes": sizes, "training_world_sizes": sorted(by_size), "strategies_note": note}
    return doc
