"""The ``predictions`` document: layout, modeled labels, nccl-tests-consistent bandwidths."""

from __future__ import annotations

import json

import pytest
from shardscope.contracts.factors import busbw_factor
from shardscope.costmodel.advise import advise
from shardscope.costmodel.documents import (
    KIND,
    predictions_document,
    rows_for_sweep,
    strategy_rows,
    topology_hash,
)
from shardscope.costmodel.machine import build_machine
from shardscope.costmodel.presets import preset
from shardscope.costmodel.sweep import predict_sweep

COLLECTIVE_KEYS = {"op", "world_size", "nodes", "size_bytes", "time_s", "algbw_gbps", "busbw_gbps", "algorithm", "protocol",
                   "bottleneck", "placement", "transport", "fabric", "topology_hash", "method"}
STRATEGY_KEYS = {"strategy", "model", "param_count", "gpus", "placement", "step_time_s", "compute_time_s", "comm_time_s",
                 "exposed_comm_time_s", "memory_total_bytes", "memory_available_bytes", "fits", "tokens_per_step",
                 "fabric", "topology_hash", "method"}


@pytest.fixture(scope="module")
def document() -> dict:
    doc = preset("hgx-h100")
    machine = build_machine(doc)
    advice = advise(doc, "mistral-7b", 8)
    topo_hash = topology_hash(doc)
    sweep = predict_sweep(machine, ["all_reduce", "all_gather"], [2, 8], [1024, 1 << 20, 1 << 30])
    return predictions_document(doc, machine, rows_for_sweep(sweep, topo_hash), strategy_rows(advice, topo_hash),
                                advice.assumptions.to_dict(), created_at="2025-01-01T00:00:00+00:00")


def test_layout(document: dict) -> None:
    assert document["kind"] == KIND and document["method"] == "modeled"
    assert document["schema"] == "shardscope.predictions/1"
    assert set(document) == {"kind", "schema", "method", "created_at", "topology", "assumptions", "collectives", "strategies"}
    assert document["topology"]["fabric"] == "nvswitch" and len(document["topology"]["hash"]) == 64
    assert document["assumptions"]["model_version"].startswith("costmodel/")
    json.dumps(document)


def test_rows(document: dict) -> None:
    assert len(document["collectives"]) == 2 * 2 * 3
    for row in document["collectives"]:
        assert set(row) == COLLECTIVE_KEYS and row["method"] == "modeled"
        assert row["algbw_gbps"] == pytest.approx(row["size_bytes"] / row["time_s"] / 1e9)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * busbw_factor(row["op"], row["world_size"]))
    assert len(document["strategies"]) == 5
    for row in document["strategies"]:
        assert set(row) == STRATEGY_KEYS and row["method"] == "modeled"
        assert row["step_time_s"] >= row["compute_time_s"] > 0


def test_topology_hash_is_the_stores_canonical_digest() -> None:
    import hashlib

    a, b = preset("hgx-h100"), dict(reversed(list(preset("hgx-h100").items())))
    assert topology_hash(a) == topology_hash(b)
    assert topology_hash(a) != topology_hash(preset("hgx-h200"))
    canonical = json.dumps(a, sort_keys=True, separators=(",", ":"))
    assert topology_hash(a) == hashlib.sha256(canonical.encode()).hexdigest()


def test_multi_node_and_all_to_all_rows_fit_the_store_schema() -> None:
    # The algorithms the model now names (NVLS-tree across nodes, pairwise all-to-all) are valid stored rows.
    import pandas as pd
    from shardscope.costmodel.collectives import Job, predict_collective
    from shardscope.results.schemas_predictions import CollectivePredictionsSchema

    doc = preset("hgx-h100")
    machine, topo_hash = build_machine(doc), topology_hash(doc)
    job = Job(machine, tuple(range(8)), nodes=2)
    preds = [(predict_collective(op, 1 << 30, job), job) for op in ("all_reduce", "all_to_all")]
    rows = rows_for_sweep(preds, topo_hash)
    assert [r["algorithm"] for r in rows] == ["nvls_tree", "pairwise"] and all(r["nodes"] == 2 for r in rows)
    CollectivePredictionsSchema.validate(pd.DataFrame([{"run_id": "r", **r} for r in rows]))
