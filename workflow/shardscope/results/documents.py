"""Per-job result files -> table rows: the one place that knows each file's layout.

Three kinds of file reach ``shardscope collect``: collective jobs, training jobs (both
written by the workers) and imported nccl-tests logs (``shardscope collectives import --out``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from shardscope.errors import UserError


def run_id_for(doc: dict[str, Any]) -> str:
    """A stable id of one result: the same file collected twice gets the same id."""
    env = doc.get("env", {})
    key = json.dumps([doc.get("kind"), doc.get("job", {}).get("job_id"), env.get("host"), env.get("measured_at"),
                      doc.get("source_file"), doc.get("rows") if doc.get("kind") == "collectives_import" else None],
                     sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _run_row(doc: dict[str, Any], path: str, run_id: str, world_size: int, source: str) -> dict[str, Any]:
    job, env = doc.get("job", {}), doc.get("env", {})
    return {
        "run_id": run_id,
        "kind": doc["kind"],
        "source": source,
        "job_id": job.get("job_id") or doc.get("source_file") or path,
        "host": env.get("host"),
        "measured_at": env.get("measured_at"),
        "world_size": world_size,
        "placement": job.get("placement"),
        "transport": job.get("transport"),
        # The fabric the job ran on: a topology class (nvswitch, pcie, cpu…), "emulated:<preset>"
        # for emulated fabrics, or what a reference log's source says; label names a reference run.
        "fabric": job.get("fabric") or doc.get("fabric"),
        "label": job.get("label") or doc.get("label"),
        "backend": env.get("backend"),
        "device_type": env.get("device_type"),
        "devices": ", ".join(env.get("devices", [])) or None,
        "torch_version": env.get("torch"),
        "comm_library": env.get("comm_library"),
        "deepspeed_version": env.get("deepspeed"),
        "git_rev": env.get("git_rev"),
        "config_hash": env.get("config_hash"),
        "source_file": path,
        "env_json": json.dumps(env, sort_keys=True),
    }


def _collective_rows(rows: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    keys = ("op", "world_size", "dtype", "size_bytes", "time_s", "time_max_s", "algbw_gbps", "busbw_gbps", "in_place", "check_ok")
    return [{"run_id": run_id, **{k: r.get(k) for k in keys}} for r in rows]


def tables_from_document(doc: Any, path: str) -> dict[str, list[dict[str, Any]]]:
    """Split one result document into rows per table; UserError names what is missing."""
    if not isinstance(doc, dict) or doc.get("kind") not in ("collectives", "training", "collectives_import"):
        raise UserError(f"{path}: not a shardscope result file (expected a JSON object with kind "
                        "'collectives', 'training' or 'collectives_import')")
    try:
        run_id = run_id_for(doc)
        if doc["kind"] == "collectives":
            return {"runs": [_run_row(doc, path, run_id, doc["job"]["world_size"], "measured")],
                    "collectives": _collective_rows(doc["rows"], run_id)}
        if doc["kind"] == "collectives_import":
            import_doc = {**doc, "job": {"job_id": f"nccl-tests:{doc['source_file']}"}, "env": {"devices": [d.get("name", "") for d in doc.get("devices", [])]}}
            source = doc.get("source", "nccl-tests")
            return {"runs": [_run_row(import_doc, path, run_id, doc["world_size"], source)],
                    "collectives": _collective_rows(doc["rows"], run_id)}
        return _training_tables(doc, path, run_id)
    except KeyError as exc:
        raise UserError(f"{path}: missing field {exc.args[0]!r} in a {doc['kind']} result") from None


def _training_tables(doc: dict[str, Any], path: str, run_id: str) -> dict[str, list[dict[str, Any]]]:
    job, summary = doc["job"], doc.get("summary", {})
    run = {
        "run_id": run_id,
        "strategy": job["strategy"],
        "model": job["model"],
        "param_count": job.get("param_count"),
        "world_size": job["world_size"],
        "placement": job.get("placement") or "local",
        "dtype": job.get("dtype"),
        "micro_batch": job.get("micro_batch"),
        "seq_len": job.get("seq_len"),
        "outcome": doc["outcome"],
        "error": doc.get("error"),
        "median_step_time_s": summary.get("median_step_time_s"),
        "tokens_per_s": summary.get("tokens_per_s"),
        "mfu": summary.get("mfu"),
        "peak_memory_bytes": summary.get("peak_memory_bytes"),
        "peak_memory_method": summary.get("peak_memory_method"),
        "deepspeed_config": json.dumps(job["deepspeed_config"], sort_keys=True) if job.get("deepspeed_config") else None,
    }
    return {
        "runs": [_run_row(doc, path, run_id, job["world_size"], "measured")],
        "training_runs": [run],
        "training_steps": [{"run_id": run_id, **{k: s.get(k) for k in ("step", "step_time_s", "loss")}} for s in doc.get("steps", [])],
        "training_memory": [{"run_id": run_id, **{k: r.get(k) for k in ("rank", "param_bytes", "grad_bytes", "optim_bytes", "peak_memory_bytes")}}
                            for r in doc.get("ranks", [])],
    }
