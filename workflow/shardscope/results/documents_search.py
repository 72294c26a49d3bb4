"""A micro-batch search's summary (kind ``search``, written by :mod:`shardscope.training.search`) -> table rows.

The summary is one ``runs`` row (kind ``search``, source ``measured``: every trial is a real run) and one
``search_trials`` row per trial in the order tried. :func:`search_shape` is its JSON Schema, checked before
any row is built; :func:`search_consistency_errors` the relations between its fields.
"""

from __future__ import annotations

from typing import Any

_STR = {"type": ["string", "null"]}
_INT = {"type": ["integer", "null"]}
_NUM = {"type": ["number", "null"]}


def search_shape() -> dict[str, Any]:
    """JSON Schema of a ``search`` document."""
    trial = {"type": "object", "required": ["micro_batch", "outcome", "job_id", "grad_accum", "result"],
             "additionalProperties": False,
             "properties": {"micro_batch": {"type": "integer"}, "outcome": {"type": "string"},
                            "job_id": {"type": "string"}, "grad_accum": {"type": "integer"}, "result": {"type": "string"},
                            "tracked_peak_bytes": _INT, "peak_memory_bytes": _INT, "tokens_per_s": _NUM, "error": _STR}}
    return {
        "type": "object",
        "required": ["schema", "kind", "job", "env", "global_batch", "per_rank_batch", "activation_checkpointing",
                     "trials", "best_micro_batch", "reason"],
        "properties": {
            "schema": {"const": "shardscope.microbatch-search/1"},
            "job": {"type": "object", "required": ["job_id", "strategy", "model", "world_size", "placement"], "properties": {
                "job_id": {"type": "string", "minLength": 1}, "strategy": {"type": "string"}, "model": {"type": "string"},
                "world_size": {"type": "integer"}, "placement": {"type": "string"}, "transport": _STR,
                "memory_budget_bytes": _INT}},
            "env": {"type": "object", "properties": {"host": _STR, "measured_at": _STR}},
            "global_batch": {"type": "integer"}, "per_rank_batch": {"type": "integer"},
            "activation_checkpointing": {"type": "string"},
            "trials": {"type": "array", "minItems": 1, "items": trial},
            "best_micro_batch": _INT, "best_grad_accum": _INT, "reason": {"type": "string"},
        },
    }


def search_tables(doc: dict[str, Any], run: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Rows of a ``search`` document: ``run`` (its ``runs`` row, built by the caller) and one row per trial."""
    job, run_id = doc["job"], run["run_id"]
    trials = [{"run_id": run_id, "search_job_id": job["job_id"], "trial_job_id": t["job_id"], "trial_order": i,
               "strategy": job["strategy"], "model": job["model"], "world_size": job["world_size"],
               "placement": job["placement"], "micro_batch": t["micro_batch"], "grad_accum": t["grad_accum"],
               "global_batch": doc["global_batch"], "activation_checkpointing": doc["activation_checkpointing"],
               "outcome": t["outcome"], "tracked_peak_bytes": t.get("tracked_peak_bytes"),
               "peak_memory_bytes": t.get("peak_memory_bytes"), "memory_budget_bytes": job.get("memory_budget_bytes"),
               "tokens_per_s": t.get("tokens_per_s"), "error": t.get("error"),
               "is_best": t["micro_batch"] == doc["best_micro_batch"], "result_file": t["result"]}
              for i, t in enumerate(doc["trials"])]
    return {"runs": [run], "search_trials": trials}


def search_consistency_errors(doc: dict[str, Any], path: str) -> list[str]:
    """Each trial accumulates to the per-rank batch; the global batch is it times the ranks; the best was tried."""
    errors = []
    per_rank, ranks = doc["per_rank_batch"], doc["job"]["world_size"]
    if per_rank * ranks != doc["global_batch"]:
        errors.append(f"{path}: field global_batch: {doc['global_batch']} is not per_rank_batch {per_rank} x "
                      f"world_size {ranks}")
    for i, trial in enumerate(doc["trials"]):
        if trial["micro_batch"] * trial["grad_accum"] != per_rank:
            errors.append(f"{path}: field trials[{i}].grad_accum: micro-batch {trial['micro_batch']} x accumulation "
                          f"{trial['grad_accum']} is not the per-rank batch {per_rank}")
    best = doc["best_micro_batch"]
    if best is not None and best not in {t["micro_batch"] for t in doc["trials"] if t["outcome"] == "ok"}:
        errors.append(f"{path}: field best_micro_batch: {best} is not a micro-batch whose trial finished ok")
    return errors
