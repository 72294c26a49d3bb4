"""``shardscope topology parse FILE``: read a saved probe output or topology.json.

The format is sniffed from the content, not the file name: a JSON object is a
``topology.json``; text with rocm-smi's table titles is ``rocm-smi --showtopo``; anything
else is taken as ``nvidia-smi topo -m`` (whose parser says so clearly when it finds no matrix).
Empty and binary files are refused before any parser sees them.
"""

from __future__ import annotations

import codecs
import json
import os
import re

from shardscope.errors import UserError
from shardscope.fileio import TOPOLOGY_MAX_INPUT_MIB, loads_bounded, read_input_bytes
from shardscope.topology.model import Topology, from_dict
from shardscope.topology.document import validate_topology
from shardscope.topology.nvidia_smi import parse_nvidia_smi
from shardscope.topology.rocm_smi import LINK_TYPE_TABLE, parse_rocm_smi

_ROCM_MARKERS = ("ROCm System Management Interface", LINK_TYPE_TABLE)
_TEXT_CONTROLS = "\t\n\r\x0b\x0c\x1b"
#: What is not text: the replacement character of undecodable bytes, and control characters other than _TEXT_CONTROLS.
_NOT_TEXT = re.compile("[\ufffd" + "".join(re.escape(chr(c)) for c in range(1, 32) if chr(c) not in _TEXT_CONTROLS) + "]")
EXPECTED_INPUT = "saved 'nvidia-smi topo -m' or 'rocm-smi --showtopo' output, or a topology.json"


def parse_file(path: str | os.PathLike[str], max_input_mib: float | None = None) -> Topology:
    """Parse the topology saved in ``path`` (nvidia-smi, rocm-smi or topology.json); see :func:`read_text`."""
    return parse_text(read_text(path, max_input_mib), str(path))


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
    if text.lstrip().startswith(("{", "[")):
        return "json"
    if any(marker in text for marker in _ROCM_MARKERS):
        return "rocm-smi"
    return "nvidia-smi"


def read_text(path: str | os.PathLike[str], max_input_mib: float | None = None) -> str:
    """The file's text, refusing empty, binary and too large files with one clear sentence.

    The size is checked before anything is read (``max_input_mib``, default
    :data:`shardscope.fileio.TOPOLOGY_MAX_INPUT_MIB`). UTF-8 (with or without a byte-order mark)
    and UTF-16 (Windows shell redirects; with a byte-order mark, or recognised by its pattern
    of zero bytes) are decoded.
    """
    data = read_input_bytes(path, TOPOLOGY_MAX_INPUT_MIB if max_input_mib is None else max_input_mib, EXPECTED_INPUT)
    if not data.strip():
        raise UserError(f"{path}: the file is empty; expected {EXPECTED_INPUT}")
    text = decode_text(data)
    if text is None:
        raise UserError(f"{path}: the file holds binary data, not text; expected {EXPECTED_INPUT}")
    return text


def decode_text(data: bytes) -> str | None:
    """``data`` decoded as UTF-8 or UTF-16; None when it does not look like text at all."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        text = data.decode("utf-16", errors="replace")
    elif b"\x00" in data:
        encoding = _utf16_without_bom(data)
        if encoding is None:
            return None
        text = data.decode(encoding, errors="replace")
    else:
        text = data.decode("utf-8-sig", errors="replace")
    return text if _looks_like_text(text) else None


def _utf16_without_bom(data: bytes) -> str | None:
    """``utf-16-le``/``-be`` when every other byte is zero (ASCII text in UTF-16), else None."""
    even, odd = data[0::2], data[1::2]
    if not even or not odd:
        return None
    if odd.count(0) > 0.9 * len(odd) and even.count(0) < 0.1 * len(even):
        return "utf-16-le"
    if even.count(0) > 0.9 * len(even) and odd.count(0) < 0.1 * len(odd):
        return "utf-16-be"
    return None


def _looks_like_text(text: str) -> bool:
    """No NUL, and at most 2% undecodable or control characters (tabs, newlines and ESC allowed)."""
    if "\x00" in text:
        return False
    return len(_NOT_TEXT.findall(text)) <= 0.02 * len(text)


def _from_json(text: str, source_name: str) -> Topology:
    """A Topology from a ``topology.json`` document, with one clear error when it is not one."""
    try:
        doc = loads_bounded(text, source_name)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise UserError(f"{source_name}: not valid JSON ({where}: {exc.msg})") from None
    return from_dict(validate_topology(doc, source_name))
