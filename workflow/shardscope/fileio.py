"""Atomic file writing and JSON reading shared by every stage.

Outputs are written to a temporary file beside the target and renamed into place, so a
crash or a failed validation never leaves a partial file that a later step would trust.
"""

from __future__ import annotations

import json
import math
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
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:  # a write on a full disk names no file: name the target
            raise OSError(exc.errno, exc.strerror, str(target)) from exc
        raise
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def dump_json(obj: Any) -> str:
    """Serialise ``obj`` the one way every stage does: sorted keys, two-space indent.

    NaN and infinities have no JSON spelling (``NaN`` in a file is invalid JSON that other tools
    refuse), so they are refused with a UserError naming the first path that holds one; a
    writer whose value is genuinely unknown writes ``None`` itself and says why.
    """
    try:
        return json.dumps(obj, indent=2, sort_keys=True, default=str, allow_nan=False) + "\n"
    except ValueError:
        where = non_finite_path(obj)
        if where is None:
            raise
        raise UserError(f"refusing to write JSON with a non-finite number at {where}; expected finite numbers "
                        "(JSON has no NaN or Infinity)") from None


def non_finite_path(obj: Any, path: str = "$") -> str | None:
    """The JSON path (``$.rows[3].busbw_gbps``) of the first NaN or infinity in ``obj``, or None."""
    if isinstance(obj, float):
        return None if math.isfinite(obj) else f"{path} ({obj})"
    if isinstance(obj, dict):
        for key in sorted(obj, key=str):
            found = non_finite_path(obj[key], f"{path}.{key}")
            if found:
                return found
    elif isinstance(obj, list | tuple):
        for index, item in enumerate(obj):
            found = non_finite_path(item, f"{path}[{index}]")
            if found:
                return found
    return None


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically."""
    return atomic_write_text(path, dump_json(obj))


#: The deepest nesting any reader accepts in a JSON document: ours nest under ten levels (plan.json, results,
#: topology.json); a document nested deeper is not one of them, and 100,000 levels stopped Python's parser with a traceback.
MAX_JSON_DEPTH = 64


def loads_bounded(text: str | bytes, where: str | os.PathLike[str]) -> Any:
    """``json.loads(text)``, refusing (one UserError naming ``where``) a document nested over :data:`MAX_JSON_DEPTH` levels.

    Every reader of JSON goes through here. A malformed document still raises ``json.JSONDecodeError``,
    so that each caller keeps its own sentence for it.
    """
    too_deep = UserError(f"{where}: JSON nested more than {MAX_JSON_DEPTH} levels deep; expected a shardscope or "
                         f"nccl-tests document (they nest under ten)")
    try:
        doc = json.loads(text)
    except RecursionError:
        raise too_deep from None
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise too_deep
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values() if isinstance(v, dict | list))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value if isinstance(v, dict | list))
    return doc


def read_json(path: str | os.PathLike[str]) -> Any:
    """Read a JSON file, turning a missing, malformed or too deeply nested file into one clear UserError."""
    try:
        with open(path, encoding="utf-8") as handle:
            return loads_bounded(handle.read(), path)
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None


#: Input files larger than this are refused before they are read (raise it with ``--max-input-mib``):
#: every nccl-tests log and NCCL log we know of is far smaller, and a file this size is read in
#: under 5 s of CPU and 300 MB (``benchmarks/huge_inputs.py``); a huge file would cost minutes and gigabytes.
DEFAULT_MAX_INPUT_MIB = 32.0
#: The same for topology files (probe text, topology.json): the largest we know of (``nvidia-smi
#: topo -m`` of 72 GPUs with their NICs) is well under 1 MiB, so a larger file is some other file.
TOPOLOGY_MAX_INPUT_MIB = 4.0


def check_input_size(path: str | os.PathLike[str], max_input_mib: float | None = None, what: str = "input file") -> int:
    """The size of ``path`` in bytes; a UserError, before anything is read, when it is over the limit.

    Also turns a missing path or a directory into one clear sentence.
    """
    limit = DEFAULT_MAX_INPUT_MIB if max_input_mib is None else max_input_mib
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if os.path.isdir(path):
        raise UserError(f"{path}: cannot be read (it is a directory); expected {what}")
    if info.st_size > limit * 2**20:
        raise UserError(f"{path}: is {info.st_size / 2**20:.1f} MiB, over the {limit:g} MiB limit for {what}; "
                        f"pass --max-input-mib {math.ceil(info.st_size / 2**20)} to read it anyway")
    return info.st_size


def read_input_bytes(path: str | os.PathLike[str], max_input_mib: float | None = None, what: str = "input file") -> bytes:
    """The bytes of ``path`` after :func:`check_input_size` (missing, directory and too-large files refused)."""
    check_input_size(path, max_input_mib, what)
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def read_input_text(path: str | os.PathLike[str], max_input_mib: float | None = None, what: str = "input file") -> str:
    """:func:`read_input_bytes` decoded as UTF-8 (undecodable bytes become U+FFFD, for the parsers to name)."""
    return read_input_bytes(path, max_input_mib, what).decode("utf-8", errors="replace")


def add_max_input_flag(parser: Any, default_mib: float = DEFAULT_MAX_INPUT_MIB) -> None:
    """Add ``--max-input-mib`` (the input size limit of :func:`check_input_size`) to an argparse parser.

    ``default_mib`` is the limit the command applies without the flag (shown in the help).
    """
    parser.add_argument("--max-input-mib", type=float, default=None, metavar="MIB",
                        help=f"refuse input files larger than this (default {default_mib:g} MiB)")


def write_output(text: str, out: str | None) -> None:
    """Print ``text`` to stdout, or write it atomically to ``out`` when given."""
    if out is None or out == "-":
        print(text, end="" if text.endswith("\n") else "\n")
    else:
        atomic_write_text(out, text)
