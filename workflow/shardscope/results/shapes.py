"""The shape of each input document (JSON Schema), checked before any row is built.

pandera checks values once a document is a table; before that, a document must have the
right structure and JSON types: a truncated or hand-edited file may have ``"rows": 5``, a
size of ``"1024"`` or ``1024.5``, a boolean ``"yes"``, a row without ``time_s`` or with a
field nobody stores. pandera's coercion would silently turn some of those into numbers, so
types are checked here, on the JSON itself, with :mod:`jsonschema`.

Row objects (collective rows, steps, ranks, GPUs, links) are generated from the table
schemas: a non-nullable column is a required field of its JSON type, a nullable one an
optional field that may be ``null``. Result rows reject unknown fields (a field nobody
stores would be lost silently); topology rows accept them, since the whole topology
document is stored verbatim. The derived documents' shapes are in :mod:`.shapes_derived`.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import jsonschema

from shardscope.config import key_path
from shardscope.results.ddl import column_types
from shardscope.results.schemas import TABLES

_JSON_TYPES = {"BIGINT": "integer", "DOUBLE": "number", "BOOLEAN": "boolean", "VARCHAR": "string",
               "TIMESTAMP WITH TIME ZONE": "string", "JSON": "string"}
_STR = {"type": ["string", "null"]}
_INT = {"type": ["integer", "null"]}
_NUM = {"type": ["number", "null"]}


def row_shape(table: str, rename: dict[str, str] | None = None, skip: tuple[str, ...] = (),
              ignored: tuple[str, ...] = (), strict: bool = True) -> dict[str, Any]:
    """JSON Schema of one row object of ``table`` as documents write it.

    ``rename`` maps document field -> column, ``skip`` lists columns the document does not
    carry (keys, derived values), ``ignored`` fields the document may carry but no table keeps.
    """
    to_field = {column: field for field, column in (rename or {}).items()}
    spec = TABLES[table].to_schema().columns
    properties: dict[str, Any] = {name: {} for name in ignored}
    required = []
    for column, sql in column_types(table).items():
        if column in skip:
            continue
        field = to_field.get(column, column)
        json_type = _JSON_TYPES[sql]
        if spec[column].nullable:
            properties[field] = {"type": [json_type, "null"]}
        else:
            properties[field] = {"type": json_type}
            required.append(field)
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": not strict}


_ENV = {"type": "object", "properties": {
    "host": _STR, "measured_at": _STR, "torch": _STR, "backend": _STR, "device_type": _STR, "comm_library": _STR,
    "deepspeed": _STR, "cuda": _STR, "git_rev": _STR, "config_hash": _STR, "devices": {"type": "array", "items": {"type": "string"}},
}}
_LABELS = {"fabric": _STR, "label": _STR}


@cache
def document_shapes() -> dict[str, dict[str, Any]]:
    """JSON Schema of each document kind that ``shardscope collect`` accepts."""
    from shardscope.results.documents_search import search_shape
    from shardscope.results.shapes_derived import doctor_shape, predictions_shape, run_predictions_shape, verdicts_shape

    collective_row = row_shape("collectives", skip=("run_id",), ignored=("count", "iters", "warmup", "source", "source_file"))
    return {
        "collectives": {
            "type": "object", "required": ["kind", "job", "env", "rows"],
            "properties": {
                "schema": {"const": "shardscope.collectives/1"},
                "job": {"type": "object", "required": ["job_id", "op", "world_size"], "properties": {
                    "job_id": {"type": "string", "minLength": 1}, "op": {"type": "string"}, "world_size": {"type": "integer"},
                    "placement": _STR, "transport": _STR, **_LABELS}},
                "env": _ENV,
                "rows": {"type": "array", "minItems": 1, "items": collective_row},
            },
        },
        "collectives_import": {
            "type": "object", "required": ["kind", "source_file", "op", "world_size", "rows"],
            "properties": {
                "schema": {"const": "shardscope.collectives-import/1"},
                "source_file": {"type": "string", "minLength": 1}, "op": {"type": "string"},
                # null: the log did not tell its rank count (world_size_source "unknown"); busbw stays as printed
                "world_size": _INT, "source": {"type": "string"}, "placement": _STR, "transport": _STR, **_LABELS,
                "devices": {"type": "array", "items": {"type": "object", "properties": {"name": _STR}}},
                "rows": {"type": "array", "minItems": 1, "items": collective_row},
            },
        },
        "training": {
            "type": "object", "required": ["kind", "job", "outcome"],
            "properties": {
                "schema": {"const": "shardscope.training/1"},
                "job": {"type": "object", "required": ["job_id", "strategy", "model", "world_size"], "properties": {
                    "job_id": {"type": ["string", "null"]}, "strategy": {"type": "string"}, "model": {"type": "string"},
                    "world_size": {"type": "integer"}, "param_count": _INT, "placement": _STR, "dtype": _STR,
                    "micro_batch": _INT, "seq_len": _INT, "deepspeed_config": {"type": ["object", "null"]}, **_LABELS}},
                "env": _ENV,
                "outcome": {"type": "string"},
                "error": _STR,
                "summary": {"type": "object", "properties": {
                    "median_step_time_s": _NUM, "tokens_per_s": _NUM, "mfu": _NUM, "peak_memory_bytes": _INT,
                    "peak_memory_reserved_bytes": _INT,
                    "peak_memory_method": _STR, "comm_time_share": _NUM, "repeats": _INT, "host_calls_per_step": _INT,
                    **dict.fromkeys(("ci95_low_step_time_s", "ci95_high_step_time_s", "ci95_low_tokens_per_s",
                                     "ci95_high_tokens_per_s"), _NUM),
                    "comm_bytes": {"type": ["object", "null"]}}},
                "settings": {"type": ["object", "null"]},
                "steps": {"type": "array", "items": row_shape("training_steps", skip=("run_id",))},
                "ranks": {"type": "array", "items": row_shape("training_memory", skip=("run_id",))},
            },
        },
        "topology": {
            "type": "object", "required": ["schema", "fabric", "gpu_count", "gpus", "links", "islands", "source"],
            "properties": {
                "schema": {"const": "shardscope.topology/1"},
                "fabric": {"type": "string"}, "accelerator": {"type": "string"}, "gpu_count": {"type": "integer"},
                "gpus": {"type": "array", "items": row_shape("gpus", rename={"index": "gpu_index"},
                                                             skip=("topology_hash", "island"), strict=False)},
                "links": {"type": "array", "items": row_shape("links", rename={"a": "gpu_a", "b": "gpu_b"},
                                                              skip=("topology_hash",), strict=False)},
                "islands": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
                "numa_nodes": {"type": "array", "items": {"type": "object"}},
                "source": {"type": "object"},
            },
        },
        "predictions": predictions_shape(row_shape),
        "run_predictions": run_predictions_shape(row_shape),
        "verdicts": verdicts_shape(),
        "doctor": doctor_shape(),
        "search": search_shape(),
    }


def shape_errors(doc: Any, kind: str, path: str) -> list[str]:
    """Every structural problem of ``doc`` as a ``kind`` document, one line each naming the field."""
    validator = jsonschema.Draft202012Validator(document_shapes()[kind])
    errors = sorted(validator.iter_errors(doc), key=lambda e: [(0, p, "") if isinstance(p, int) else (1, 0, str(p))
                                                                for p in e.absolute_path])
    return [f"{path}: field {key_path(e.absolute_path)}: {_message(e)}" for e in errors]


def _message(error: jsonschema.ValidationError) -> str:
    """jsonschema's message without the schema dump; what was found and what was expected."""
    if error.validator == "const":
        what = "a supported version" if list(error.absolute_path)[-1:] == ["schema"] else "allowed here"
        return f"{error.instance!r} is not {what}; expected {error.validator_value!r}"
    if error.validator == "minItems":
        return "is empty; expected at least one row"
    return error.message
