"""``shardscope topology parse FILE``: read a saved probe output or topology.json.

The format is sniffed from the content, not the file name: a JSON object is a
``topology.json``; text with rocm-smi's table titles is ``rocm-smi --showtopo``; anything
else is taken as ``nvidia-smi topo -m`` (whose parser says so clearly when it finds no matrix).
"""

from __future__ import annotations

import codecs
import json
import os
from pathlib import Path

from shardscope.errors import UserError
from shardscope.topology.model import Topology, from_dict
from shardscope.topology.nvidia_smi import parse_nvidia_smi
from shardscope.topology.rocm_smi import LINK_TYPE_TABLE, parse_rocm_smi

_ROCM_MARKERS = ("ROCm System Management Interface", LINK_TYPE_TABLE)


def parse_file(path: str | os.PathLike[str]) -> Topology:
    """Parse the topology saved in ``path`` (nvidia-smi, rocm-smi or topology.json)."""
    return parse_text(read_text(path), str(path))


def parse_text(text: str, source_name: str) -> Topology:
    """Parse topology text whose format is sniffed; ``source_name`` names it in errors."""
    kind = sniff_format(text)
    if kind == "json":
        return _from_json(text, source_name)
    if kind == "rocm-smi":
        return parse_rocm_smi(text, source_name)
    return parse_nvidia_smi(text, source_name)


def sniff_format(text: str) -> str:
    """``"json"``, ``"rocm-smi"`` or ``"nvidia-smi"``, from the content."""
    if text.lstrip().startswith("{"):
        return "json"
    if any(marker in text for marker in _ROCM_MARKERS):
        return "rocm-smi"
    return "nvidia-smi"


def read_text(path: str | os.PathLike[str]) -> str:
    """The file's text; UTF-16 with a byte-order mark (Windows shell redirects) is decoded too."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8-sig", errors="replace")


def _from_json(text: str, source_name: str) -> Topology:
    """A Topology from a ``topology.json`` document, with one clear error when it is not one."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise UserError(f"{source_name}: not valid JSON ({where}: {exc.msg})") from None
    if not isinstance(doc, dict) or "gpus" not in doc:
        raise UserError(f"{source_name}: expected a topology.json object with a 'gpus' list")
    try:
        return from_dict(doc)
    except (TypeError, ValueError, KeyError) as exc:
        raise UserError(f"{source_name}: not a valid topology.json ({exc})") from None
