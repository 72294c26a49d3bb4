"""Per-job result files -> table rows: the one place that knows each file's layout.

Eight kinds of file reach ``shardscope collect``: collective jobs, training jobs (both
written by the workers), imported nccl-tests logs (``shardscope collectives import --out``),
``topology.json`` (``shardscope topology detect/parse``), and the derived documents of
:mod:`shardscope.results.documents_derived`: predictions (``shardscope predict … --out``; the modeled
rows of training runs come from ``shardscope predict runs``, collect runs no model), verdicts
(``shardscope verdict --out``) and doctor findings (``shardscope doctor --out``).
The functions here assume the document passed :func:`shardscope.results.shapes.shape_errors`;
the relations between fields of one document (rows agree with their job, links join known
GPUs) are checked in :func:`consistency_errors`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from shardscope.errors import UserError
from shardscope.topology.identity import topology_hash
from shardscope.results.documents_derived import (
    TABLE_BUILDERS,
    derived_consistency_errors,
    derived_run_id,
    identity_digest,
)
from shardscope.results.schemas import DERIVED_KINDS, KINDS

TOPOLOGY_SCHEMA_PREFIX = "shardscope.topology/"


def document_kind(doc: Any, path: str) -> str:
    """One of :data:`KINDS` or ``topology``; UserError for anything else."""
    if isinstance(doc, dict):
        if doc.get("kind") in KINDS:
            return str(doc["kind"])
        if isinstance(doc.get("schema"), str) and doc["schema"].startswith(TOPOLOGY_SCHEMA_PREFIX):
            return "topology"
    raise UserError(f"{path}: not a shardscope result file (expected a JSON object with kind "
                    f"{', '.join(repr(k) for k in KINDS)}, or a topology.json with schema 'shardscope.topology/1')")


def canonical_json(doc: Any) -> str:
    """The one serialisation that hashes the same for the same content: sorted keys, no spaces."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)


def content_digest(doc: Any) -> str:
    """sha256 of :func:`canonical_json`; tells two documents with the same run id apart."""
    return hashlib.sha256(canonical_json(doc).encode()).hexdigest()


def same_run_digest(doc: Any) -> str:
    """What must agree between two files with the same run id: the content, less a derived document's volatile fields."""
    if isinstance(doc, dict) and doc.get("kind") in DERIVED_KINDS:
        return identity_digest(doc)
    return content_digest(doc)


def run_id_for(doc: dict[str, Any]) -> str:
    """A stable id of one result: the same file collected twice gets the same id.

    A result without a measurement time (the launcher's record of a failed job) adds its
    content, so two different failures of the same job are two runs. A derived document
    (predictions, verdicts, doctor) is identified by its content alone.
    """
    if doc.get("kind") in DERIVED_KINDS:
        return derived_run_id(doc)
    env = doc.get("env") or {}
    key = [doc.get("kind"), (doc.get("job") or {}).get("job_id"), env.get("host"), env.get("measured_at"),
           doc.get("source_file"), doc.get("rows") if doc.get("kind") == "collectives_import" else None]
    if doc.get("kind") == "training" and not env.get("measured_at"):
        key.append(content_digest(doc))
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def nccl_version(comm_library: str | None) -> str | None:
    """``2.21.5`` from the workers' ``nccl 2.21.5``; None for gloo and unknown libraries."""
    if comm_library and comm_library.startswith("nccl "):
        return comm_library.removeprefix("nccl ").strip() or None
    return None


def _run_row(doc: dict[str, Any], path: str, run_id: str, world_size: int, source: str) -> dict[str, Any]:
    job, env = doc.get("job") or {}, doc.get("env") or {}
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
        "devices": ", ".join(env.get("devices") or []) or None,
        "torch_version": env.get("torch"),
        "comm_library": env.get("comm_library"),
        "nccl_version": nccl_version(env.get("comm_library")),
        "cuda_version": env.get("cuda"),
        "deepspeed_version": env.get("deepspeed"),
        "git_rev": env.get("git_rev"),
        "config_hash": env.get("config_hash"),
        "source_file": path,
        "env_json": json.dumps(env, sort_keys=True),
        "topology_hash": None,  # set by the store when the same collect loads this host's topology
        "origin_db": None,  # set by `shardscope db merge`
    }


_COLLECTIVE_FIELDS = ("op", "world_size", "dtype", "size_bytes", "time_s", "time_max_s", "algbw_gbps", "busbw_gbps",
                      "in_place", "check_ok", "wrong")


def _collective_rows(rows: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    return [{"run_id": run_id, **{k: r.get(k) for k in _COLLECTIVE_FIELDS}} for r in rows]


def tables_from_document(doc: Any, path: str) -> dict[str, list[dict[str, Any]]]:
    """Split one result document into rows per table; UserError names what is missing."""
    kind = document_kind(doc, path)
    try:
        if kind == "topology":
            return _topology_tables(doc, path)
        run_id = run_id_for(doc)
        if kind in TABLE_BUILDERS:
            return TABLE_BUILDERS[kind](doc, path, run_id)
        if kind == "search":
            from shardscope.results.documents_search import search_tables

            return search_tables(doc, _run_row(doc, path, run_id, doc["job"]["world_size"], "measured"))
        if kind == "collectives":
            return {"runs": [_run_row(doc, path, run_id, doc["job"]["world_size"], "measured")],
                    "collectives": _collective_rows(doc["rows"], run_id)}
        if kind == "collectives_import":
            import_doc = {**doc, "job": {"job_id": f"nccl-tests:{doc['source_file']}", "placement": doc.get("placement"),
                                         "transport": doc.get("transport")},
                          "env": {"devices": [d.get("name") or "" for d in doc.get("devices", [])],
                                  "nccl_tests_version": doc.get("version"), "nccl_tests_generation": doc.get("generation"),
                                  **({"world_size_source": doc["world_size_source"]} if doc.get("world_size_source") else {})}}
            source = doc.get("source", "nccl-tests")
            return {"runs": [_run_row(import_doc, path, run_id, doc["world_size"], source)],
                    "collectives": _collective_rows(doc["rows"], run_id)}
        return _training_tables(doc, path, run_id)
    except KeyError as exc:
        raise UserError(f"{path}: missing field {exc.args[0]!r} in a {kind} document") from None


#: Per-rank keys of a training document kept in ``training_memory`` (the tracker's are absent in older documents).
_RANK_MEMORY_KEYS = ("rank", "param_bytes", "grad_bytes", "optim_bytes", "peak_memory_bytes", "peak_memory_reserved_bytes",
                     "comm_time_share",
                     "activation_bytes", "buffer_bytes", "activation_peak_bytes", "tracked_peak_bytes", "tracked_peak_phase",
                     "reserved_minus_allocated_bytes", "max_reserved_bytes", "num_alloc_retries", "num_ooms")


def _training_tables(doc: dict[str, Any], path: str, run_id: str) -> dict[str, list[dict[str, Any]]]:
    job, summary = doc["job"], doc.get("summary") or {}
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
        "peak_memory_reserved_bytes": summary.get("peak_memory_reserved_bytes"),
        "comm_time_share": summary.get("comm_time_share"),
        "deepspeed_config": json.dumps(job["deepspeed_config"], sort_keys=True) if job.get("deepspeed_config") else None,
        **_fairness_fields(doc),
    }
    return {
        "runs": [_run_row(doc, path, run_id, job["world_size"], "measured")],
        "training_runs": [run],
        "training_steps": [{"run_id": run_id, **{k: s.get(k) for k in ("step", "step_time_s", "loss", "repeat",
                                                                                              "peak_memory_bytes")}} for s in doc.get("steps", [])],
        "training_memory": [{"run_id": run_id, **{k: r.get(k) for k in _RANK_MEMORY_KEYS}}
                            for r in doc.get("ranks", [])],
        "training_comm": [{"run_id": run_id, **{k: r.get(k) for k in ("op", "dtype", "calls", "size_bytes", "volume_bytes")}}
                          for r in ((summary.get("comm_bytes") or {}).get("measured") or {}).get("per_op", [])],
    }


def _fairness_fields(doc: dict[str, Any]) -> dict[str, Any]:
    """training_runs' repeat, settings and bytes-moved columns (issue 17); all null in older documents."""
    summary, settings = doc.get("summary") or {}, doc.get("settings") or {}
    comm = summary.get("comm_bytes") or {}
    return {
        "repeats": summary.get("repeats"),
        "grad_accum": (doc.get("job") or {}).get("grad_accum"),
        **{k: summary.get(k) for k in ("ci95_low_step_time_s", "ci95_high_step_time_s", "ci95_low_tokens_per_s", "ci95_high_tokens_per_s")},
        "reduce_dtype": settings.get("reduce_dtype"),
        "overlap_comm": settings.get("overlap_comm"),
        "bucket_policy": settings.get("bucket_policy"),
        "settings_json": json.dumps(settings, sort_keys=True) if settings else None,
        "comm_volume_bytes": (comm.get("measured") or {}).get("volume_bytes"),
        "comm_modeled_volume_bytes": (comm.get("modeled") or {}).get("volume_bytes"),
        "comm_implementation_volume_bytes": (comm.get("implementation") or {}).get("volume_bytes"),
        "host_calls_per_step": summary.get("host_calls_per_step"),
    }


def _topology_tables(doc: dict[str, Any], path: str) -> dict[str, list[dict[str, Any]]]:
    digest, source = topology_hash(doc), doc["source"]
    island_of = {g: i for i, island in enumerate(doc["islands"]) for g in island}
    return {
        "topologies": [{
            "topology_hash": digest,
            "host": source.get("host"),
            "fabric": doc["fabric"],
            "accelerator": doc.get("accelerator", "none"),
            "gpu_count": doc["gpu_count"],
            "island_count": len(doc["islands"]),
            "numa_node_count": len(doc.get("numa_nodes", [])),
            "source_method": source.get("method"),
            "source_json": json.dumps(source, sort_keys=True),
            "source_file": path,
            "topology_json": canonical_json(doc),
            "origin_db": None,
        }],
        "gpus": [{"topology_hash": digest, "gpu_index": g["index"], "island": island_of.get(g["index"]),
                  **{k: g.get(k) for k in ("name", "memory_bytes", "pci_bus_id", "numa_node", "cpu_affinity",
                                           "pcie_generation", "pcie_width")}} for g in doc["gpus"]],
        "links": [{"topology_hash": digest, "gpu_a": link["a"], "gpu_b": link["b"], "code": link["code"],
                   "nvlinks": link["nvlinks"]} for link in doc["links"]],
    }


def consistency_errors(doc: dict[str, Any], kind: str, path: str) -> list[str]:
    """Relations between fields of one document that no single table row can check."""
    if kind in DERIVED_KINDS:
        return derived_consistency_errors(doc, kind, path)
    if kind == "search":
        from shardscope.results.documents_search import search_consistency_errors

        return search_consistency_errors(doc, path)
    errors: list[str] = []
    if kind in ("collectives", "collectives_import"):
        owner = doc["job"] if kind == "collectives" else doc
        where = "job." if kind == "collectives" else ""
        for i, row in enumerate(doc["rows"]):
            for field in ("op", "world_size"):
                if row.get(field) != owner[field]:  # a row's world_size may be left out (null) only with the document's
                    errors.append(f"{path}: field rows[{i}].{field}: {row.get(field)!r} differs from {where}{field} {owner[field]!r}")
    elif kind == "training":
        world_size = doc["job"]["world_size"]  # a world size below 1 is reported by the runs schema
        for i, rank in enumerate(doc.get("ranks", []) if world_size >= 1 else []):
            if not 0 <= rank["rank"] < world_size:
                errors.append(f"{path}: field ranks[{i}].rank: {rank['rank']} is not a rank of a job on {world_size} ranks")
    elif kind == "topology":
        indices = [g["index"] for g in doc["gpus"]]
        if doc["gpu_count"] != len(indices):
            errors.append(f"{path}: field gpu_count: {doc['gpu_count']} but the document lists {len(indices)} GPUs")
        for i, link in enumerate(doc["links"]):
            for end in ("a", "b"):
                if link[end] not in indices:
                    errors.append(f"{path}: field links[{i}].{end}: GPU {link[end]} is not among the document's GPUs")
        members = [g for island in doc["islands"] for g in island]
        for g in indices:
            if members.count(g) != 1:
                errors.append(f"{path}: field islands: GPU {g} must be in exactly one island, found in {members.count(g)}")
    return errors
