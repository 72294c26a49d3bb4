"""topology.json: its JSON schema, validate_topology and load_topology (what plan and the results store read)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from shardscope.errors import UserError
from shardscope.topology.detect import detect_cpu_only
from shardscope.topology.document import load_topology, topology_schema, validate_topology
from shardscope.topology.parse import parse_file

DATA = Path(__file__).resolve().parents[1] / "data" / "topo"
FIXTURES = sorted(p.name for p in DATA.glob("*.txt"))
NVL_PAIRS = DATA / "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt"


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    schema = topology_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_schema_ships_as_package_data() -> None:
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert '"topology/*.schema.json"' in pyproject


@pytest.mark.parametrize("name", FIXTURES)
def test_every_fixture_document_is_valid(name: str) -> None:
    doc = parse_file(DATA / name).to_dict()
    jsonschema.Draft202012Validator(topology_schema()).validate(doc)
    assert validate_topology(doc, name) is doc


def test_cpu_document_is_valid() -> None:
    validate_topology(detect_cpu_only().topology.to_dict(), "cpu")


def test_load_topology_round_trip(tmp_path: Path) -> None:
    doc = parse_file(NVL_PAIRS).to_dict()
    path = tmp_path / "topology.json"
    path.write_text(json.dumps(doc))
    assert load_topology(path) == json.loads(json.dumps(doc))


def _nvl() -> dict[str, Any]:
    return parse_file(NVL_PAIRS).to_dict()


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        node: Any = doc
        *parents, leaf = path.split(".")
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        node[int(leaf) if leaf.isdigit() else leaf] = value
    return change


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (_set("gpus.0.index", "0"), "gpus[0].index"),
        (_set("fabric", "nvlink"), "fabric"),
        (_set("links.0.code", ""), "links[0].code"),
        (_set("gpus.0.colour", "red"), "gpus[0]"),
        (lambda d: d.pop("islands"), "islands"),
        (_set("gpu_count", 9), "gpu_count is 9 but gpus lists 8"),
        (_set("gpus.7.index", 8), "GPU indices"),
        (_set("links.0.b", 9), "link 0-9 names a GPU that is not in gpus"),
        (_set("links.1", {"a": 0, "b": 1, "code": "NV12", "nvlinks": 12}), "link 0-1 appears twice"),
        (_set("links.0.nvlinks", 4), "code NV12 but nvlinks 4"),
        (_set("islands", [[0, 1, 2, 3], [4, 5], [6, 7]]), "islands are"),
        (_set("fabric", "nvswitch"), "fabric is 'nvswitch' but the GPUs and links make it 'nvlink_islands'"),
        (_set("nics.0.nearest_gpus", [12]), "NIC NIC0"),
    ],
    ids=["index-type", "fabric-enum", "empty-code", "unknown-key", "no-islands", "gpu-count", "indices",
         "unknown-gpu", "duplicate-link", "nvlink-count", "islands", "fabric", "nic-gpu"],
)
def test_invalid_documents_are_named(change: Callable[[dict[str, Any]], Any], fragment: str) -> None:
    doc = copy.deepcopy(_nvl())
    change(doc)
    with pytest.raises(UserError) as info:
        validate_topology(doc, "t.json")
    message = str(info.value)
    assert message.startswith("t.json: not a valid topology.json: ") and fragment in message, message
    assert "\n" not in message


def test_switch_and_mesh_are_interchangeable_for_the_links() -> None:
    doc = parse_file(DATA / "01-hgx-h200-nvswitch-nv18-12nics.txt").to_dict()
    doc["fabric"] = "nvlink_mesh"  # what NVML may know and the matrix cannot show
    validate_topology(doc, "t.json")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (json.dumps({"schema": "shardscope.plan/1", "collectives": [], "training": []}),
         "is a 'shardscope.plan/1' document, not a topology.json"),
        (json.dumps({"gpus": []}), 'expected a topology.json object with "schema"'),
        (json.dumps([1, 2]), "found a JSON list"),
        ("{not json", "not valid JSON"),
        ("", "empty"),
    ],
)
def test_load_topology_rejects_what_is_not_a_topology(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "topology.json"
    path.write_text(content)
    with pytest.raises(UserError) as info:
        load_topology(path)
    assert str(info.value).startswith(str(path)) and fragment in str(info.value)


def test_load_topology_refuses_probe_text() -> None:
    with pytest.raises(UserError, match="not valid JSON"):
        load_topology(NVL_PAIRS)


def test_load_topology_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="file not found"):
        load_topology(tmp_path / "nope.json")
