"""Validate the pipeline config against its JSON schema and say what is wrong in one sentence.

jsonschema's own messages print the whole sub-schema; users need the key path and what was
expected, e.g. ``config key training.strategies[0]: 'ddpp' is not one of ['ddp', …]``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from shardscope.errors import UserError


def key_path(path: Any) -> str:
    """``['training', 'strategies', 0]`` -> ``training.strategies[0]``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _deepest(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    # oneOf/anyOf errors carry the real reasons in their context; report the most specific one.
    while error.context:
        error = max(error.context, key=lambda e: len(e.absolute_path))
    return error


def validate_config(config: dict[str, Any], schema_path: str | Path) -> None:
    """Raise UserError naming the first invalid key (by position in the file) and what it expected."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        error = errors[0]
        specific = _deepest(error)
        path = key_path(specific.absolute_path if len(specific.absolute_path) >= len(error.absolute_path) else error.absolute_path)
        raise UserError(f"invalid config key {path}: {specific.message}")


def config_hash(config: dict[str, Any]) -> str:
    """A short hash of the effective config, stored with every result."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]
