"""Parse AMD ``rocm-smi --showtopo`` into a Topology.

The output is a series of sections under ``=== title ===`` banners: square tables
"Weight between two GPUs", "Hops between two GPUs" and "Link Type between two GPUs"
(``0`` on the diagonal), then "Numa Nodes" with one ``GPU[n] : (Topology) Numa Node: k``
line per GPU. A link's code is its link type (``XGMI``, ``PCIE``); XGMI (Infinity Fabric)
links count as one NVLink each, so islands and fabric classes mean the same as on NVIDIA.
"""

from __future__ import annotations

import re

from shardscope.errors import UserError
from shardscope.topology.model import Gpu, Link, NumaNode, Topology

_BANNER = re.compile(r"^=+\s*(.*?)\s*=+\s*$")
_GPU = re.compile(r"^GPU(\d+)$")
#: ``GPU[0] : (Topology) Numa Node: 0``; some versions print ``GPU 0`` without brackets.
_NUMA_LINE = re.compile(r"^GPU\s*\[?\s*(\d+)\s*\]?\s*:\s*\(Topology\)\s*Numa (Node|Affinity):\s*(-?\d+)")
#: What the diagonal of a rocm-smi table holds.
_SELF = ("0", "X")

LINK_TYPE_TABLE = "Link Type between two GPUs"
#: Link types that join GPUs into islands, as NVLink does.
GPU_FABRIC_LINKS = ("XGMI",)
XGMI_NOTE = "links of type XGMI (AMD Infinity Fabric) count as one NVLink each; islands are XGMI-connected GPUs"

Table = dict[tuple[int, int], str]


def parse_rocm_smi(text: str, source_name: str) -> Topology:
    """Build a Topology from saved ``rocm-smi --showtopo`` text.

    Raises :class:`UserError` naming ``source_name`` when the Link Type table is missing or
    is not a complete square table (see :func:`parse_table`).
    """
    sections = split_sections(text)
    link_types = parse_table(sections.get(LINK_TYPE_TABLE, []), f"{source_name}: the '{LINK_TYPE_TABLE}' table")
    if not link_types:
        raise UserError(
            f"{source_name}: no '{LINK_TYPE_TABLE}' table found; expected complete 'rocm-smi --showtopo' output"
        )
    numa_lines = sections.get("Numa Nodes", [])
    numa = parse_numa(numa_lines)
    indices = sorted({a for a, _ in link_types})
    links = _links(indices, link_types)
    return Topology(
        gpus=[Gpu(index=i, numa_node=numa.get(i)) for i in indices],
        links=links,
        numa_nodes=[NumaNode(id=n) for n in sorted(set(numa.values()))],
        source={"method": "rocm-smi", "file": source_name},
        accelerator="amd",
        notes=[XGMI_NOTE] if any(link.code in GPU_FABRIC_LINKS for link in links) else [],
        warnings=unread_numa_lines(numa_lines),
    )


def split_sections(text: str) -> dict[str, list[str]]:
    """The lines under each ``=== title ===`` banner, by title."""
    sections: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        banner = _BANNER.match(line)
        if banner:
            current = sections.setdefault(banner.group(1), [])
        else:
            current.append(line)
    return sections


def parse_table(lines: list[str], where: str = "table") -> Table:
    """A square GPU table (header of ``GPUn`` names, then one row per GPU) as ``(row, col) -> cell``.

    Empty when there is no header. Raises :class:`UserError` starting with ``where`` when the
    table is not square (GPU0…GPU<n-1> as columns and as rows, each once, n cells per row),
    its diagonal is not ``0`` or it is not symmetric.
    """
    columns: list[int] = []
    rows: list[tuple[int, list[str]]] = []
    for line in lines:
        tokens = line.split()
        if tokens and all(_GPU.match(t) for t in tokens) and not columns:
            columns = [int(t[3:]) for t in tokens]
        elif tokens and columns and (row := _GPU.match(tokens[0])):
            rows.append((int(row.group(1)), tokens[1:]))
    if not columns:
        return {}
    _check_square(columns, rows, where)
    cells = {(r, col): cell for r, row_cells in rows for col, cell in zip(columns, row_cells)}
    _check_cells(columns, cells, where)
    return cells


def _check_square(columns: list[int], rows: list[tuple[int, list[str]]], where: str) -> None:
    """Columns GPU0…GPU<n-1> once each, one row per column, n cells in every row."""
    if sorted(columns) != list(range(len(columns))):
        raise UserError(f"{where} has columns {_names(columns)}; expected GPU0 to GPU{len(columns) - 1}, each once")
    labels = [r for r, _ in rows]
    repeated = next((r for r in labels if labels.count(r) > 1), None)
    if repeated is not None:
        raise UserError(f"{where} has row GPU{repeated} twice; expected one row per GPU")
    missing = [c for c in columns if c not in labels]
    if missing:
        raise UserError(f"{where} has no row for {_names(missing)}; the output looks truncated")
    extra = [r for r in labels if r not in columns]
    if extra:
        raise UserError(f"{where} has a row GPU{extra[0]} but no such column; expected a square table")
    for r, row_cells in rows:
        if len(row_cells) != len(columns):
            raise UserError(f"{where} row GPU{r} has {len(row_cells)} cells, expected {len(columns)}")


def _check_cells(columns: list[int], cells: Table, where: str) -> None:
    """``0`` exactly on the diagonal, and the same cell both ways."""
    for a in columns:
        for b in columns:
            cell = cells[(a, b)]
            if a == b and cell not in _SELF:
                raise UserError(f"{where} has {cell!r} on the diagonal at GPU{a}/GPU{a}; expected 0")
            if a != b and cell in _SELF:
                raise UserError(f"{where} has {cell!r} off the diagonal at GPU{a}/GPU{b}; a row label looks wrong")
            if a < b and cell != cells[(b, a)]:
                raise UserError(
                    f"{where} is not symmetric: GPU{a}/GPU{b} is {cell} but GPU{b}/GPU{a} is {cells[(b, a)]}"
                )


def _names(indices: list[int]) -> str:
    shown = ", ".join(f"GPU{i}" for i in indices[:4])
    return shown if len(indices) <= 4 else f"{shown} and {len(indices) - 4} more"


def parse_numa(lines: list[str]) -> dict[int, int]:
    """GPU index -> NUMA node, from ``Numa Node`` lines, else ``Numa Affinity`` (-1 means none)."""
    found: dict[str, dict[int, int]] = {"Node": {}, "Affinity": {}}
    for line in lines:
        match = _NUMA_LINE.match(line.strip())
        if match and int(match.group(3)) >= 0:
            found[match.group(2)][int(match.group(1))] = int(match.group(3))
    return {**found["Affinity"], **found["Node"]}


_NUMA_ANY = re.compile(r"^GPU\s*\[?\s*(\d+)\s*\]?\s*:\s*\(Topology\)\s*Numa (?:Node|Affinity):\s*(.*?)\s*$")


def unread_numa_lines(lines: list[str]) -> list[str]:
    """Warnings for ``Numa Node:`` values that are not a number (``NaN``…): that GPU's NUMA node stays unknown."""
    warnings = []
    for line in lines:
        match = _NUMA_ANY.match(line.strip())
        if match and not re.fullmatch(r"-?\d+", match.group(2)):
            warnings.append(f"GPU{match.group(1)}'s NUMA line holds {match.group(2)!r}, which is not a NUMA node "
                            "number; its NUMA node is read as unknown")
    return warnings


def _links(indices: list[int], link_types: Table) -> list[Link]:
    """A Link per GPU pair ``a < b`` with the link type as code; XGMI counts as one NVLink."""
    links = []
    for i, a in enumerate(indices):
        for b in indices[i + 1 :]:
            code = (link_types.get((a, b)) or link_types.get((b, a)) or "").upper()
            if code:
                links.append(Link(a=a, b=b, code=code, nvlinks=1 if code in GPU_FABRIC_LINKS else 0))
    return links
