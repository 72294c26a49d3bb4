"""Atomic file writing and JSON reading shared by every stage.

Outputs are written to a temporary file beside the target and renamed into place, so a
crash or a failed validation never leaves a partial file that a later step would trust.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from shardscope.errors import UserError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file and an atomic rename."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def dump_json(obj: Any) -> str:
    """Serialise ``obj`` the one way every stage does: sorted keys, two-space indent."""
    return json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n"


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically."""
    return atomic_write_text(path, dump_json(obj))


def read_json(path: str | os.PathLike[str]) -> Any:
    """Read a JSON file, turning a missing or malformed file into one clear UserError."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None


def write_output(text: str, out: str | None) -> None:
    """Print ``text`` to stdout, or write it atomically to ``out`` when given."""
    if out is None or out == "-":
        print(text, end="" if text.endswith("\n") else "\n")
    else:
        atomic_write_text(out, text)
