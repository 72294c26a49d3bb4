"""JSON Schema of the derived documents (predictions of plans and of runs, verdicts, doctor), checked before any row is built.

Prediction rows are generated from their tables (:func:`shardscope.results.shapes.row_shape`)
and reject unknown fields, as result rows do. Verdict and doctor documents are written by
:mod:`shardscope.diagnose`; the fields stored are required with their JSON types, and
fields kept only in the file (a sweep's NCCL log summary, a finding's details) may be there.
"""

from __future__ import annotations

from typing import Any

_STR = {"type": ["string", "null"]}
_INT = {"type": ["integer", "null"]}
_NUM = {"type": ["number", "null"]}
_NUM_REQ = {"type": "number"}
_STRINGS = {"type": "array", "items": {"type": "string"}}


def predictions_shape(row_shape: Any) -> dict[str, Any]:
    """``shardscope.predictions/1``: the cost model's document (:mod:`shardscope.costmodel.documents`)."""
    return {
        "type": "object", "required": ["kind", "schema", "method", "created_at", "topology", "collectives", "strategies"],
        "properties": {
            "schema": {"const": "shardscope.predictions/1"},
            "method": {"const": "modeled"},
            "created_at": {"type": "string"},
            "topology": {"type": "object", "required": ["hash", "fabric"], "properties": {
                "hash": {"type": "string"}, "fabric": {"type": "string"}, "source": {"type": "object"},
                "gpu_count": _INT, "gpu": {"type": ["object", "null"]}, "notes": _STRINGS}},
            "assumptions": {"type": "object"},
            "plan": {"type": ["object", "null"]},
            "label": {"type": "string", "minLength": 1},
            "fabric_label": {"type": "string", "minLength": 1},
            "collectives": {"type": "array", "items": row_shape("collective_predictions", skip=("run_id",))},
            "strategies": {"type": "array", "items": row_shape("strategy_predictions", skip=("run_id",))},
            "memory": {"type": "array", "items": row_shape("memory_case_predictions", skip=("run_id",))},
            "decision_map": {"type": "array", "items": row_shape("decision_map_cells", skip=("run_id",))},
            "memory_model": {"type": "array", "items": row_shape("memory_model_cases", skip=("run_id",))},
        },
    }


def run_predictions_shape(row_shape: Any) -> dict[str, Any]:
    """``shardscope.run_predictions/1``: the memory models of measured runs (:mod:`shardscope.costmodel.run_predictions`)."""
    return {
        "type": "object", "required": ["kind", "schema", "method", "created_at", "memory", "memory_terms"],
        "properties": {
            "schema": {"const": "shardscope.run_predictions/1"},
            "method": {"const": "modeled"},
            "created_at": {"type": "string"},
            "model_version": {"type": "string"},
            "memory": {"type": "array", "items": row_shape("memory_predictions", skip=("run_id",))},
            "memory_terms": {"type": "array", "items": row_shape("memory_peak_predictions", skip=("run_id",))},
        },
    }


_PER_SIZE = {"type": "object", "required": ["size_bytes", "repeats", "busbw_median_gbps", "busbw_mean_gbps", "time_min_us"],
             "properties": {"size_bytes": {"type": "integer"}, "repeats": {"type": "integer"}, "busbw_median_gbps": _NUM_REQ,
                            "busbw_mean_gbps": _NUM_REQ, "busbw_stdev_gbps": _NUM, "time_min_us": _NUM_REQ,
                            "busbw_ci95_gbps": {"type": ["array", "null"], "items": _NUM, "minItems": 2, "maxItems": 2}}}
_SUMMARY = {"type": "object",
            "required": ["plateau_busbw_gbps", "max_busbw_gbps", "size_to_90pct_bytes", "latency_floor_us",
                         "latency_floor_is_latency", "per_size"],
            "properties": {"plateau_busbw_gbps": _NUM, "max_busbw_gbps": _NUM_REQ, "size_to_90pct_bytes": _INT,
                           "latency_floor_us": _NUM_REQ, "latency_floor_is_latency": {"type": "boolean"},
                           "plateau_spread": {"type": ["object", "null"], "properties": {
                               "n": {"type": "integer"}, "ci95_low": _NUM, "ci95_high": _NUM}},
                           "per_size": {"type": "array", "minItems": 1, "items": _PER_SIZE}, "notes": _STRINGS}}
_EXPECTED = {"type": "object", "required": ["known"], "properties": {
    "known": {"type": "boolean"}, "plateau_gbps": _NUM, "ceiling_gbps": _NUM, "link": _STR, "notes": _STRINGS}}
_ROW = {"type": "object", "required": ["size_bytes", "expected_busbw_gbps", "pct_of_expected", "region", "verdict"],
        "properties": {"size_bytes": {"type": "integer"}, "expected_busbw_gbps": _NUM_REQ, "pct_of_expected": _NUM,
                       "region": {"type": "string"}, "verdict": {"type": "string"}}}
_SWEEP = {
    "type": "object",
    "required": ["sources", "kind", "op", "world_size", "nodes", "transport", "summary", "expected", "verdict", "reason"],
    "properties": {
        "sources": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
        "kind": {"type": "string"}, "op": {"type": "string"}, "world_size": {"type": "integer"}, "nodes": {"type": "integer"},
        "hosts": _STRINGS, "placement": _STR, "transport": {"type": "string"}, "nccl_env": {"type": "object"},
        "summary": _SUMMARY, "expected": _EXPECTED, "verdict": {"type": "string"}, "reason": _STR,
        "pct_of_expected": _NUM, "rows": {"type": "array", "items": _ROW}, "hints": _STRINGS, "nccl_flags": _STRINGS,
        "nccl_log": {"type": ["object", "null"]},
    },
}


def verdicts_shape() -> dict[str, Any]:
    """``shardscope.verdicts/1``: ``shardscope verdict --out`` (:mod:`shardscope.diagnose.evaluate`)."""
    return {
        "type": "object", "required": ["kind", "schema", "sweeps"],
        "properties": {
            "schema": {"const": "shardscope.verdicts/1"},
            "topology": _STR, "topology_hash": _STR, "notes": _STRINGS, "thresholds": {"type": "object"},
            "sweeps": {"type": "array", "minItems": 1, "items": _SWEEP},
        },
    }


def doctor_shape() -> dict[str, Any]:
    """``shardscope.doctor/1``: ``shardscope doctor --out`` (:mod:`shardscope.diagnose.doctor`)."""
    finding = {"type": "object", "required": ["check", "status", "read", "concluded"], "additionalProperties": False,
               "properties": {"check": {"type": "string"}, "status": {"type": "string"}, "read": {"type": "string"},
                              "concluded": {"type": "string"}, "action": _STR, "explains": _STR, "details": {"type": "object"}}}
    return {
        "type": "object", "required": ["kind", "schema", "host", "checked_at", "findings"],
        "properties": {
            "schema": {"const": "shardscope.doctor/1"},
            "host": {"type": "string", "minLength": 1}, "checked_at": {"type": "string"},
            "topology": {"type": "object", "properties": {"fabric": _STR, "gpu_count": _INT}},
            "findings": {"type": "array", "minItems": 1, "items": finding},
            "summary": {"type": "object", "additionalProperties": {"type": "integer"}},
        },
    }
