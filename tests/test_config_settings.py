"""The config's one source of truth: defaults in the schema only, the settings dataclasses mirroring it (issue 34).

Every optional key of workflow/schemas/config.schema.yaml declares its ``default:``; every key has a
``description:`` that is, word for word, the docstring of its field in shardscope/settings.py; the dataclasses have
exactly the schema's keys, nested as the schema nests them; they are frozen; and the planner reads the same plan
from a mapping as from the settings built of it.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from factories import default_config
from shardscope.config import SCHEMA_PATH, config_hash, validate_config, with_defaults
from shardscope.plan.machine import MachineProbe
from shardscope.plan.planner import make_plan
from shardscope.settings import PlannerSettings, Settings, planner_settings, settings
from shardscope.topology.detect import detect_cpu_only
from shardscope.topology.parse import parse_file

REPO = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load(SCHEMA_PATH.read_text())
#: Where the settings dataclasses are written (a sweep is the job specs' own).
SOURCES = [REPO / "workflow" / "shardscope" / name for name in ("settings.py", "contracts/jobs.py")]
#: Keys whose value stays a mapping in the settings, read and checked by the stage that owns it: a model's
#: dimensions (shardscope.contracts.models: a key left out is the preset's) and the emulated fabric definitions
#: (shardscope.emulated.presets).
LEAVES = {"cpu.model", "gpu.model", "training.memory_bound.model", "emulated.fabrics"}
BARE = MachineProbe(which=lambda name: None, emulated_problem=lambda delay, prefix: "no root here")


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with its ``$ref`` replaced by the definition (the node's own keys kept over the definition's)."""
    while "$ref" in node:
        target = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def section(node: dict[str, Any]) -> dict[str, Any] | None:
    """The mapping ``node`` describes, where it is one with named keys: ``properties`` and ``required``, merged over
    ``allOf`` (the first occurrence of a key kept) and taken from the mapping branch of a ``oneOf``; else None."""
    node = resolve(node)
    if "allOf" in node:
        parts = [section(part) or {} for part in node["allOf"]]
        merged: dict[str, Any] = {"properties": {}, "required": []}
        for part in parts:
            for key, sub in part.get("properties", {}).items():
                merged["properties"].setdefault(key, sub)
            merged["required"] += part.get("required", [])
        return merged
    if "oneOf" in node:
        found = [section(option) for option in node["oneOf"]]
        return next((f for f in found if f), None)
    return node if "properties" in node else None


def schema_keys(node: dict[str, Any] = SCHEMA, path: str = "") -> dict[str, dict[str, Any]]:
    """Every key of the config (dotted path -> its schema node), the leaves' insides left out."""
    found: dict[str, dict[str, Any]] = {}
    for key, sub in (section(node) or {}).get("properties", {}).items():
        where = f"{path}.{key}" if path else key
        found[where] = sub
        if where not in LEAVES:
            found.update(schema_keys(sub, where))
    return found


def docstrings() -> dict[str, dict[str, str]]:
    """class name -> field -> its docstring (whitespace collapsed), read from the source of :data:`SOURCES`."""
    found: dict[str, dict[str, str]] = {}
    classes = [n for path in SOURCES for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef)]
    for cls in classes:
        docs = found.setdefault(cls.name, {})
        for field, after in zip(cls.body, [*cls.body[1:], None]):
            if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name):
                doc = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                text = after.value.value if doc else ""
                docs[field.target.id] = " ".join(str(text).split())
    return found


def setting_fields(cls: type[Any] = Settings, path: str = "") -> dict[str, tuple[type[Any], str]]:
    """Every field of the settings (dotted path -> (its dataclass, field name)), nested sections' too."""
    found: dict[str, tuple[type[Any], str]] = {}
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        where = f"{path}.{field.name}" if path else field.name
        found[where] = (cls, field.name)
        hint = hints[field.name]
        options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        for option in options:
            if dataclasses.is_dataclass(option):
                found.update(setting_fields(option, where))
    return found


def walk(node: Any, pointer: str = "#") -> typing.Iterator[tuple[str, dict[str, Any]]]:
    """Every mapping of the schema document with its JSON pointer."""
    if isinstance(node, dict):
        yield pointer, node
        for key, sub in node.items():
            yield from walk(sub, f"{pointer}/{key}")
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            yield from walk(sub, f"{pointer}/{i}")


def test_every_optional_key_declares_its_default() -> None:
    """Defaults live in one place: each key of a mapping is required or has ``default:`` (a model's dimensions
    excepted: a key left out there is the preset's)."""
    missing = [f"{pointer}/properties/{key}" for pointer, node in walk(SCHEMA)
               if not pointer.startswith("#/$defs/model/")
               for key, sub in (node.get("properties") or {}).items()
               if isinstance(sub, dict) and key not in node.get("required", []) and "default" not in sub]
    assert not missing, missing


def test_every_default_is_valid_for_its_key() -> None:
    defaults = [(pointer, node) for pointer, node in walk(SCHEMA) if "default" in node]
    assert len(defaults) > 30
    for pointer, node in defaults:
        schema = {"$defs": SCHEMA["$defs"], **{k: v for k, v in node.items() if k != "default"}}
        assert not list(jsonschema.Draft202012Validator(schema).iter_errors(node["default"])), pointer


def test_the_settings_have_exactly_the_schema_keys_nested_alike() -> None:
    keys, settings_keys = set(schema_keys()), set(setting_fields())
    assert keys == settings_keys, (sorted(keys - settings_keys), sorted(settings_keys - keys))
    assert {"training.search.limit", "emulated.training.seq_len", "cpu.sweep.iters", "topology.file"} <= keys


def test_each_field_docstring_is_its_keys_schema_description() -> None:
    docs, fields = docstrings(), setting_fields()
    for path, node in schema_keys().items():
        description = " ".join(str(resolve(node).get("description", "")).split())
        assert description, f"{path}: the schema gives no description"
        cls, name = fields[path]
        owner = next(c for c in cls.__mro__ if name in docs.get(c.__name__, {}))
        assert docs[owner.__name__][name] == description, path


def test_the_settings_are_frozen() -> None:
    built = settings(default_config())
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.training.strategies = ("ddp",)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.results = "elsewhere"  # type: ignore[misc]


def test_defaults_are_filled_at_every_depth_and_the_config_is_left_as_written() -> None:
    config = default_config()
    for key in ("cluster", "emulated"):
        del config[key]
    del config["cpu"]["repeats"]
    config["training"] = {"strategies": ["ddp"], "search": {"limit": 4}}
    written = copy.deepcopy(config)
    filled = with_defaults(config)
    assert config == written and config_hash(config) == config_hash(written)
    validate_config(filled, SCHEMA_PATH)
    built = settings(config)
    assert (built.cluster.nodes, built.cluster.gpus_per_node, built.emulated.enabled, built.emulated.sweep.iters) == (
        1, None, False, 3)
    assert (built.cpu.repeats, built.gpu.ranks, built.training.world_sizes, built.training.conditions.pcie) == (
        1, None, "max", ())
    assert (built.training.search.strategies, built.training.search.global_batch) == (None, None)


def contains(filled: Any, written: Any) -> bool:
    """Whether ``filled`` holds every value of ``written`` as written (mappings may have more keys)."""
    if isinstance(written, dict):
        return isinstance(filled, dict) and all(key in filled and contains(filled[key], v)
                                                for key, v in written.items())
    return bool(filled == written)


def test_the_shipped_config_filled_in_is_still_valid_and_keeps_every_value_written() -> None:
    config = default_config()
    filled = with_defaults(config)
    validate_config(filled, SCHEMA_PATH)
    assert contains(filled, config) and filled != config  # gpu.ranks, at least, is filled in


@pytest.mark.parametrize("source", ["cpu", "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt"])
def test_the_plan_is_the_same_from_a_mapping_and_from_its_settings(source: str) -> None:
    probed = detect_cpu_only().topology if source == "cpu" else parse_file(REPO / "tests" / "data" / "topo" / source)
    topology = probed.to_dict()
    config = default_config()
    built = planner_settings(config)
    assert isinstance(built, PlannerSettings) and planner_settings(built) is built
    assert make_plan(copy.deepcopy(topology), config, BARE) == make_plan(copy.deepcopy(topology), built, BARE)
