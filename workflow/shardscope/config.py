"""Validate the pipeline config against its JSON schema and say what is wrong in one sentence; fill in its defaults.

jsonschema's own messages print the whole sub-schema; users need the key path and what was
expected, e.g. ``config key training.strategies[0]: 'ddpp' is not one of ['ddp', …]``.

The schema is also where every optional key's default is declared (``default:``, once);
:func:`with_defaults` fills them in, as Snakemake's ``validate(..., set_default=True)`` does.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from jsonschema.exceptions import best_match

from shardscope.errors import UserError

#: The pipeline config's schema. Its one file is ``workflow/schemas/config.schema.yaml`` (where Snakemake's
#: convention and a module read from a Git host find it); the package holds a link to it, which a built wheel
#: carries as the file itself (package data), so an installed ``shardscope plan`` fills the same defaults.
SCHEMA_PATH = Path(__file__).parent / "config.schema.yaml"


def key_path(path: Any) -> str:
    """``['training', 'strategies', 0]`` -> ``training.strategies[0]``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _message(error: jsonschema.ValidationError) -> str:
    # A failed oneOf says only "not valid under any of the given schemas"; the schema's
    # description says what was expected instead.
    expected = error.schema.get("description") if isinstance(error.schema, dict) else None
    if error.validator in ("oneOf", "anyOf") and expected:
        return f"{error.instance!r} is not valid; expected {expected}"
    return error.message


def validate_config(config: dict[str, Any], schema_path: str | Path) -> None:
    """Raise UserError naming the most relevant invalid key and what it expected."""
    schema = _schema(str(schema_path))
    error = best_match(jsonschema.Draft202012Validator(schema).iter_errors(config))
    if error is not None:
        raise UserError(f"invalid config key {key_path(error.absolute_path)}: {_message(error)}")
    check_topology_file(config)


def check_topology_file(config: dict[str, Any], base: str | Path = ".") -> None:
    """Raise UserError when ``topology.file`` is set but is not a readable file (relative to ``base``).

    Checked with the config, so a typo stops the run before any job, not inside the topology rule.
    """
    name = (config.get("topology") or {}).get("file")
    if not name:
        return
    path = Path(base) / name
    expected = "expected a saved `nvidia-smi topo -m` / `rocm-smi --showtopo` output or a topology.json"
    if not path.is_file():
        raise UserError(f"invalid config key topology.file: {name} {'is not a file' if path.exists() else 'does not exist'}; {expected}")
    if not os.access(path, os.R_OK):
        raise UserError(f"invalid config key topology.file: {name} is not readable; {expected}")


@functools.cache
def _schema(path: str) -> dict[str, Any]:
    """The schema at ``path``, read once per process (:func:`with_defaults` runs at every plan)."""
    return yaml.safe_load(Path(path).read_text())


@functools.cache
def _default_filling() -> type[jsonschema.Draft202012Validator]:
    """A validator that, wherever a ``properties`` keyword applies to a mapping, first sets each absent key that
    declares a ``default:`` to a copy of it (the extension Snakemake's ``validate(..., set_default=True)`` uses)."""
    base = jsonschema.Draft202012Validator
    properties = base.VALIDATORS["properties"]

    def fill(validator: Any, declared: dict[str, Any], instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
        if validator.is_type(instance, "object"):
            for key, sub in declared.items():
                if isinstance(sub, dict) and "default" in sub and key not in instance:
                    instance[key] = copy.deepcopy(sub["default"])
        yield from properties(validator, declared, instance, schema)

    return jsonschema.validators.extend(base, {"properties": fill})


def with_defaults(config: Mapping[str, Any], schema_path: str | Path = SCHEMA_PATH) -> dict[str, Any]:
    """A copy of ``config`` with the schema's ``default:`` of every absent optional key filled in, at every depth
    (a section filled in by default gets its own keys' defaults too). ``config`` itself is left as written.

    Meant for a validated config; an invalid one is filled where it is a mapping and otherwise left as it is, for
    the planner's own checks to name the key."""
    filled = copy.deepcopy(dict(config))
    for _ in _default_filling()(_schema(str(schema_path))).iter_errors(filled):
        pass  # validity is validate_config's business; walking the schema is what fills the defaults
    return filled


def config_hash(config: dict[str, Any]) -> str:
    """A short hash of the config as written (before :func:`with_defaults`), stored with every result.

    As written, not default-filled: the hash of a config is then the same as before the defaults moved into the
    schema (results stored earlier stay comparable), and a plan made from the same file is byte-identical. A
    default changed in the schema is a code change, which every result records as its ``git_rev``."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]
