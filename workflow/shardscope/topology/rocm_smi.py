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
_NUMA_LINE = re.compile(r"^GPU\[(\d+)\]\s*:\s*\(Topology\)\s*Numa (Node|Affinity):\s*(-?\d+)")

LINK_TYPE_TABLE = "Link Type between two GPUs"
#: Link types that join GPUs into islands, as NVLink does.
GPU_FABRIC_LINKS = ("XGMI",)
XGMI_NOTE = "links of type XGMI (AMD Infinity Fabric) count as one NVLink each; islands are XGMI-connected GPUs"

Table = dict[tuple[int, int], str]


def parse_rocm_smi(text: str, source_name: str) -> Topology:
    """Build a Topology from saved ``rocm-smi --showtopo`` text.

    Raises :class:`UserError` naming ``source_name`` when the Link Type table is missing.
    """
    sections = split_sections(text)
    link_types = parse_table(sections.get(LINK_TYPE_TABLE, []))
    if not link_types:
        raise UserError(
            f"{source_name}: no '{LINK_TYPE_TABLE}' table found; expected 'rocm-smi --showtopo' output"
        )
    numa = parse_numa(sections.get("Numa Nodes", []))
    indices = sorted({a for a, _ in link_types})
    links = _links(indices, link_types)
    return Topology(
        gpus=[Gpu(index=i, numa_node=numa.get(i)) for i in indices],
        links=links,
        numa_nodes=[NumaNode(id=n) for n in sorted(set(numa.values()))],
        source={"method": "rocm-smi", "file": source_name},
        accelerator="amd",
        notes=[XGMI_NOTE] if any(link.code in GPU_FABRIC_LINKS for link in links) else [],
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


def parse_table(lines: list[str]) -> Table:
    """A square GPU table (header of ``GPUn`` names, then one row per GPU) as ``(row, col) -> cell``."""
    columns: list[int] = []
    cells: Table = {}
    for line in lines:
        tokens = line.split()
        if tokens and all(_GPU.match(t) for t in tokens):
            columns = [int(t[3:]) for t in tokens]
        elif tokens and columns and (row := _GPU.match(tokens[0])):
            cells.update({(int(row.group(1)), col): cell for col, cell in zip(columns, tokens[1:])})
    return cells


def parse_numa(lines: list[str]) -> dict[int, int]:
    """GPU index -> NUMA node, from ``Numa Node`` lines, else ``Numa Affinity`` (-1 means none)."""
    found: dict[str, dict[int, int]] = {"Node": {}, "Affinity": {}}
    for line in lines:
        match = _NUMA_LINE.match(line.strip())
        if match and int(match.group(3)) >= 0:
            found[match.group(2)][int(match.group(1))] = int(match.group(3))
    return {**found["Affinity"], **found["Node"]}


def _links(indices: list[int], link_types: Table) -> list[Link]:
    """A Link per GPU pair ``a < b`` with the link type as code; XGMI counts as one NVLink."""
    links = []
    for i, a in enumerate(indices):
        for b in indices[i + 1 :]:
            code = (link_types.get((a, b)) or link_types.get((b, a)) or "").upper()
            if code:
                links.append(Link(a=a, b=b, code=code, nvlinks=1 if code in GPU_FABRIC_LINKS else 0))
    return links
