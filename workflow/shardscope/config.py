"""Validate the pipeline config against its JSON schema and say what is wrong in one sentence.

jsonschema's own messages print the whole sub-schema; users need the key path and what was
expected, e.g. ``config key training.strategies[0]: 'ddpp' is not one of ['ddp', …]``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from jsonschema.exceptions import best_match

from shardscope.errors import UserError


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
    schema = yaml.safe_load(Path(schema_path).read_text())
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


def config_hash(config: dict[str, Any]) -> str:
    """A short hash of the effective config, stored with every result."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]
