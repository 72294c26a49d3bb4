"""The ``topology.json`` document: its JSON schema, validation, loading and writing.

Every stage that reads a topology calls :func:`load_topology`; every command that writes
one calls :func:`validate_topology` first. Both check the document against ``topology.schema.json``
(draft 2020-12, shipped in this package) and then for what a schema cannot say: GPU
indices ``0…n-1``, links between known GPUs, islands and fabric that follow from the links.
A document that fails says so in one sentence naming the file and the first problem.
"""

from __future__ import annotations

import json
import os
import re
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from shardscope.config import key_path
from shardscope.errors import UserError
from shardscope.fileio import loads_bounded
from shardscope.topology.model import Link, classify_fabric, nvlink_count, nvlink_islands

SCHEMA_ID = "shardscope.topology/1"
SCHEMA_FILE = "topology.schema.json"
#: Classes the links alone cannot tell apart (NVML may know a switch the matrix cannot show).
_SAME_GRAPH = {"nvswitch", "nvlink_mesh"}
_NV = re.compile(r"^NV\d+$")


@cache
def topology_schema() -> dict[str, Any]:
    """The JSON schema of ``topology.json`` (read once from the package)."""
    text = resources.files("shardscope.topology").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    return json.loads(text)


def validate_topology(doc: Any, source_name: str) -> dict[str, Any]:
    """Return ``doc`` when it is a valid ``topology.json``; else raise one :class:`UserError`."""
    if not isinstance(doc, dict):
        raise UserError(f"{source_name}: expected a topology.json object, found a JSON {type(doc).__name__}")
    kind = doc.get("schema")
    if kind is None:
        raise UserError(
            f"{source_name}: expected a topology.json object with \"schema\": \"{SCHEMA_ID}\" "
            "(as written by `shardscope topology detect` or `parse`)"
        )
    if kind != SCHEMA_ID:
        raise UserError(f"{source_name}: is a {kind!r} document, not a topology.json ({SCHEMA_ID!r})")
    error = best_match(jsonschema.Draft202012Validator(topology_schema()).iter_errors(doc))
    if error is not None:
        raise UserError(f"{source_name}: not a valid topology.json: {key_path(error.absolute_path)}: {error.message}")
    problem = consistency_problem(doc)
    if problem is not None:
        raise UserError(f"{source_name}: not a valid topology.json: {problem}")
    return doc


def consistency_problem(doc: dict[str, Any]) -> str | None:
    """The first contradiction inside a schema-valid document (or one of its per-node documents), or None."""
    problem = _nodes_problem(doc)
    if problem is not None:
        return problem
    indices = [g["index"] for g in doc["gpus"]]
    if doc["gpu_count"] != len(indices):
        return f"gpu_count is {doc['gpu_count']} but gpus lists {len(indices)}"
    if sorted(indices) != list(range(len(indices))):
        return f"GPU indices are {sorted(indices)}; expected 0 to {len(indices) - 1}, each once"
    problem = _links_problem(doc["links"], set(indices))
    if problem is not None:
        return problem
    for nic in doc.get("nics", []):
        if not set(nic.get("nearest_gpus", [])) <= set(indices):
            return f"NIC {nic['name']} names a nearest GPU that is not in gpus"
    links = [Link(**link) for link in doc["links"]]
    islands = nvlink_islands(indices, links)
    if doc["islands"] != islands:
        return f"islands are {doc['islands']} but the NVLinks in links make {islands}"
    fabric = classify_fabric(indices, links)
    if doc["fabric"] != fabric and not {doc["fabric"], fabric} <= _SAME_GRAPH:
        return f"fabric is {doc['fabric']!r} but the GPUs and links make it {fabric!r}"
    return None


def _nodes_problem(doc: dict[str, Any]) -> str | None:
    """A topology probed across nodes (``shardscope cluster topology``): a count that matches, each node once and consistent."""
    nodes = doc.get("nodes")
    if nodes is None:
        return None
    if doc["node_count"] != len(nodes):
        return f"node_count is {doc['node_count']} but nodes lists {len(nodes)}"
    names = [n["node"] for n in nodes]
    for i, entry in enumerate(nodes):
        if entry["node"] in names[:i]:
            return f"node {entry['node']} appears twice in nodes"
        problem = consistency_problem(entry["topology"])
        if problem is not None:
            return f"nodes[{i}] ({entry['node']}): {problem}"
    return None


def _links_problem(links: list[dict[str, Any]], gpus: set[int]) -> str | None:
    """Links join two known GPUs ``a < b``, once per pair, with NV# codes matching their count."""
    pairs: set[tuple[int, int]] = set()
    for link in links:
        a, b = link["a"], link["b"]
        if not a < b:
            return f"link {a}-{b} must name its GPUs in increasing order"
        if a not in gpus or b not in gpus:
            return f"link {a}-{b} names a GPU that is not in gpus"
        if (a, b) in pairs:
            return f"link {a}-{b} appears twice"
        pairs.add((a, b))
        if _NV.match(link["code"]) and link.get("nvlinks", 0) != nvlink_count(link["code"]):
            return f"link {a}-{b} has code {link['code']} but nvlinks {link.get('nvlinks', 0)}"
    return None


def load_topology(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a ``topology.json``; the stage-independent way to get a topology.

    Raises :class:`UserError` (one sentence naming ``path``) for a missing, empty, binary,
    malformed or non-topology file, e.g. a plan.json passed by mistake.
    """
    from shardscope.topology.parse import read_text

    text = read_text(path)
    try:
        doc = loads_bounded(text, path)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    return validate_topology(doc, str(path))

