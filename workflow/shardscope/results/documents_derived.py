"""Derived documents -> table rows: cost-model predictions, verdicts of measured sweeps, doctor findings.

Each derived document is one row of ``runs`` (kind ``predictions``, ``run_predictions``, ``verdicts`` or ``doctor``;
source ``modeled`` or ``diagnosed``; ``world_size`` null, since it is not one job) plus its
rows. Its run id is a digest of its content: the same document loaded twice is one run. A
prediction's ``created_at`` is left out of that digest, so re-predicting the same jobs on
the same topology with the same model does not add a copy. What the tables do not hold
(assumptions, notes, thresholds) goes to ``runs.env_json``.

The functions here assume the document passed :func:`shardscope.results.shapes.shape_errors`.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

#: Fields of a document that do not make it a different run (when it was written).
_VOLATILE = {"predictions": ("created_at",), "run_predictions": ("created_at",)}
SOURCE_OF = {"predictions": "modeled", "run_predictions": "modeled", "verdicts": "diagnosed", "doctor": "diagnosed"}


def _canonical(doc: Any) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)


def identity_digest(doc: dict[str, Any]) -> str:
    """sha256 of the document without its volatile fields: what tells two derived documents apart."""
    drop = _VOLATILE.get(str(doc.get("kind")), ())
    return hashlib.sha256(_canonical({k: v for k, v in doc.items() if k not in drop}).encode()).hexdigest()


def derived_run_id(doc: dict[str, Any]) -> str:
    """Run id of a derived document: its kind and :func:`identity_digest`."""
    return hashlib.sha256(json.dumps([doc.get("kind"), identity_digest(doc)]).encode()).hexdigest()[:16]


def _run(doc: dict[str, Any], path: str, run_id: str, **fields: Any) -> dict[str, Any]:
    """The ``runs`` row of a derived document; ``fields`` fill what the document knows."""
    row = dict.fromkeys(("host", "measured_at", "world_size", "placement", "transport", "fabric", "label", "backend",
                         "device_type", "devices", "torch_version", "comm_library", "nccl_version", "cuda_version",
                         "deepspeed_version", "git_rev", "config_hash", "topology_hash", "origin_db"))
    row.update(run_id=run_id, kind=doc["kind"], source=SOURCE_OF[doc["kind"]], job_id=f"{doc['kind']}:{path}",
               source_file=path, env_json="{}")
    row.update(fields)
    return row


def predictions_tables(doc: dict[str, Any], path: str, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """Rows of a ``predictions`` document: one run (source modeled), its collectives and its strategies.

    A document may name itself (``label``) and the fabric class figures group it with
    (``fabric_label``, else the topology's fabric): the reference database's modeled fabrics do.
    """
    topo = doc["topology"]
    env = {"model_version": (doc.get("assumptions") or {}).get("model_version"), "assumptions": doc.get("assumptions"),
           "topology_source": topo.get("source"), "topology_notes": topo.get("notes", []), "gpu": topo.get("gpu"),
           "plan": doc.get("plan")}
    run = _run(doc, path, run_id, measured_at=doc["created_at"], fabric=doc.get("fabric_label") or topo["fabric"],
               label=doc.get("label"), topology_hash=topo["hash"], env_json=json.dumps(env, sort_keys=True, default=str))
    return {"runs": [run],
            "collective_predictions": [{"run_id": run_id, **row} for row in doc["collectives"]],
            "strategy_predictions": [{"run_id": run_id, **row} for row in doc["strategies"]],
            "memory_case_predictions": [{"run_id": run_id, **row} for row in doc.get("memory") or []],
            "decision_map_cells": [{"run_id": run_id, **row} for row in doc.get("decision_map") or []],
            "memory_model_cases": [{"run_id": run_id, **row} for row in doc.get("memory_model") or []]}


def run_predictions_tables(doc: dict[str, Any], path: str, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """Rows of a ``run_predictions`` document: one run (source modeled) and the memory models of the runs it names."""
    env = {"model_version": doc.get("model_version")}
    return {"runs": [_run(doc, path, run_id, measured_at=doc["created_at"], env_json=json.dumps(env, sort_keys=True))],
            "memory_predictions": [{"run_id": run_id, **row} for row in doc["memory"]],
            "memory_peak_predictions": [{"run_id": run_id, **row} for row in doc["memory_terms"]]}


def _spread(summary: dict[str, Any]) -> dict[str, Any]:
    spread = summary.get("plateau_spread") or {}
    return {"plateau_ci95_low_gbps": spread.get("ci95_low"), "plateau_ci95_high_gbps": spread.get("ci95_high"),
            "plateau_runs": spread.get("n")}


def _verdict_rows(sweep: dict[str, Any], run_id: str, source: str) -> list[dict[str, Any]]:
    """Per size of one sweep: the summary's busbw over repeats, and the verdict's expectation where it has one."""
    judged = {int(r["size_bytes"]): r for r in sweep.get("rows") or []}
    out = []
    for entry in sweep["summary"]["per_size"]:
        size = int(entry["size_bytes"])
        row = judged.get(size, {})
        ci = entry.get("busbw_ci95_gbps") or [None, None]
        out.append({"run_id": run_id, "source_file": source, "size_bytes": size, "repeats": entry["repeats"],
                    "measured_busbw_gbps": entry["busbw_median_gbps"], "busbw_mean_gbps": entry["busbw_mean_gbps"],
                    "busbw_stdev_gbps": entry.get("busbw_stdev_gbps"), "busbw_ci95_low_gbps": ci[0],
                    "busbw_ci95_high_gbps": ci[1], "time_min_us": entry["time_min_us"],
                    "expected_busbw_gbps": row.get("expected_busbw_gbps"), "percent_of_expected": row.get("pct_of_expected"),
                    "region": row.get("region"), "verdict": row.get("verdict", "unknown")})
    return out


def verdicts_tables(doc: dict[str, Any], path: str, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """Rows of a ``verdicts`` document: one run (source diagnosed), one verdict per judged file, rows per size."""
    topo_hash = doc.get("topology_hash")
    env = {"topology": doc.get("topology"), "notes": doc.get("notes", []), "thresholds": doc.get("thresholds")}
    verdicts, rows = [], []
    for index, sweep in enumerate(doc["sweeps"]):
        summary, expected = sweep["summary"], sweep["expected"]
        notes = list(summary.get("notes") or []) + list(expected.get("notes") or [])
        for source in sweep["sources"]:
            verdicts.append({
                "run_id": run_id, "sweep_index": index, "source_file": source, "judged_run_id": None,
                "sweep_kind": sweep["kind"], "sweep_files": len(sweep["sources"]), "op": sweep["op"],
                "world_size": sweep["world_size"], "nodes": sweep["nodes"],
                "hosts": ", ".join(sweep.get("hosts") or []) or None, "placement": sweep.get("placement"),
                "transport": sweep["transport"], "plateau_busbw_gbps": summary["plateau_busbw_gbps"], **_spread(summary),
                "max_busbw_gbps": summary["max_busbw_gbps"], "size_to_90pct_bytes": summary.get("size_to_90pct_bytes"),
                "latency_floor_us": summary["latency_floor_us"], "latency_floor_is_latency": summary["latency_floor_is_latency"],
                "expected_busbw_gbps": expected.get("plateau_gbps"), "ceiling_busbw_gbps": expected.get("ceiling_gbps"),
                "bottleneck": expected.get("link"), "percent_of_expected": sweep.get("pct_of_expected"),
                "verdict": sweep["verdict"], "reason": sweep.get("reason") or "no reason given",
                "hints_json": json.dumps(sweep.get("hints") or []), "notes_json": json.dumps(notes),
                "nccl_env_json": json.dumps(sweep.get("nccl_env") or {}, sort_keys=True),
                "nccl_flags_json": json.dumps(sweep.get("nccl_flags") or []),
                "nccl_log_json": json.dumps(sweep["nccl_log"], sort_keys=True) if sweep.get("nccl_log") else None,
                "topology_hash": topo_hash,
            })
            rows += _verdict_rows(sweep, run_id, source)
    run = _run(doc, path, run_id, topology_hash=topo_hash, env_json=json.dumps(env, sort_keys=True, default=str))
    return {"runs": [run], "verdicts": verdicts, "verdict_rows": rows}


def doctor_tables(doc: dict[str, Any], path: str, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """Rows of a ``doctor`` document: one run (source diagnosed, the node's host and time), one row per check."""
    env = {"topology": doc.get("topology"), "summary": doc.get("summary")}
    run = _run(doc, path, run_id, host=doc["host"], measured_at=doc["checked_at"],
               fabric=(doc.get("topology") or {}).get("fabric"), env_json=json.dumps(env, sort_keys=True, default=str))
    findings = [{"run_id": run_id, "host": doc["host"], "checked_at": doc["checked_at"], "check_name": f["check"],
                 "status": f["status"], "read": f["read"], "concluded": f["concluded"], "action": f.get("action"),
                 "explains": f.get("explains"), "details_json": json.dumps(f.get("details") or {}, sort_keys=True, default=str)}
                for f in doc["findings"]]
    return {"runs": [run], "doctor_findings": findings}


TABLE_BUILDERS = {"predictions": predictions_tables, "run_predictions": run_predictions_tables, "verdicts": verdicts_tables,
                  "doctor": doctor_tables}


def derived_consistency_errors(doc: dict[str, Any], kind: str, path: str) -> list[str]:
    """Relations inside one derived document that no single row can check."""
    errors: list[str] = []
    if kind == "predictions":
        topo = doc["topology"]
        for part in ("collectives", "strategies"):
            for i, row in enumerate(doc[part]):
                for field, expected in (("topology_hash", topo["hash"]), ("fabric", topo["fabric"])):
                    if row[field] != expected:
                        errors.append(f"{path}: field {part}[{i}].{field}: {row[field]!r} differs from topology."
                                      f"{'hash' if field == 'topology_hash' else field} {expected!r}")
    elif kind == "verdicts":
        seen: dict[str, int] = {}
        for i, sweep in enumerate(doc["sweeps"]):
            for source in sweep["sources"]:
                if source in seen:
                    errors.append(f"{path}: field sweeps[{i}].sources: {source!r} is also judged in sweeps[{seen[source]}]; "
                                  "a file belongs to one sweep")
                seen.setdefault(source, i)
            sizes = {int(e["size_bytes"]) for e in sweep["summary"]["per_size"]}
            for j, row in enumerate(sweep.get("rows") or []):
                if int(row["size_bytes"]) not in sizes:
                    errors.append(f"{path}: field sweeps[{i}].rows[{j}].size_bytes: {row['size_bytes']} is not a size of "
                                  "the sweep's summary.per_size")
    elif kind == "doctor":
        counted: dict[str, int] = {}
        for finding in doc["findings"]:
            counted[finding["status"]] = counted.get(finding["status"], 0) + 1
        for status, n in (doc.get("summary") or {}).items():
            if n != counted.get(status, 0):
                errors.append(f"{path}: field summary.{status}: {n} but the document lists {counted.get(status, 0)} "
                              f"finding(s) with status {status!r}")
    return errors


def link_judged_runs(parsed: list[tuple[str, dict[str, list[dict[str, Any]]]]]) -> None:
    """Fill ``verdicts.judged_run_id`` for judged files collected in the same call.

    The run id is the one collect computed from that very file, so the link is exact; a
    verdict whose file is not among the inputs keeps a null ``judged_run_id`` (its
    ``source_file`` still names the file, and a file measured again keeps its name).
    """
    by_path: dict[str, str] = {}
    for path, tables in parsed:
        for run in tables.get("runs", []):
            if run["kind"] in ("collectives", "collectives_import"):
                by_path.setdefault(path, run["run_id"])
                by_path.setdefault(os.path.realpath(path), run["run_id"])
    for _, tables in parsed:
        for row in tables.get("verdicts", []):
            if row["judged_run_id"] is None:
                source = str(row["source_file"])
                row["judged_run_id"] = by_path.get(source) or by_path.get(os.path.realpath(source))
