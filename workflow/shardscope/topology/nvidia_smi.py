"""Parse ``nvidia-smi topo -m`` (also ``--matrix`` and the PCIe-only ``-mp``) into a Topology.

The matrix has been printed in many shapes since 2015: tab-separated or with tab stops
expanded to (not always aligned) spaces, ANSI underline codes around the header when the
command ran on a terminal, ``SOC`` before drivers renamed it ``SYS``, NICs as ``mlx5_N`` or
``NICn`` columns (with a NIC Legend), and optional ``CPU Affinity``, ``NUMA Affinity`` and
``GPU NUMA ID`` columns. Data cells never contain spaces, so rows are split on whitespace;
only the header needs care, because its column names do.

NUMA nodes come from the ``NUMA Affinity`` column (else ``GPU NUMA ID``) where numeric. When
neither is, GPUs are grouped by their distinct ``CPU Affinity`` strings: two or more groups
become inferred NUMA nodes 0, 1, ... (in order of the first GPU of each group) and the GPUs
are assigned to them; a single shared string becomes one node 0 that no GPU is assigned to,
since it says nothing about where each GPU sits; no affinity at all gives no NUMA nodes.
Every inference is recorded in ``Topology.notes``.

Before anything is derived, :func:`shardscope.topology.matrix_check.check_matrix` refuses a
table that is cut short, has a cell missing, a repeated or stray row label, a diagonal
that is not ``X`` or codes that differ between ``a``/``b`` and ``b``/``a``; text with no
matrix at all is named for what it is (an nvidia-smi error message, a header without rows).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from shardscope.errors import UserError
from shardscope.topology.cpu import cpu_count_from_list
from shardscope.topology.matrix_check import check_matrix
from shardscope.topology.model import PCIE_PATH_CODES, Gpu, Link, Nic, NumaNode, Topology, nvlink_count

#: SGR codes such as ESC[4m, also when a web copy lost the ESC byte and left ``[4m``.
_ANSI = re.compile(r"\x1b?\[[0-9;]*m")
_GPU = re.compile(r"^GPU(\d+)$")
_NIC_ALIAS = re.compile(r"^NIC\d+$")
_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|[A-Za-z][A-Za-z0-9]*_\d+)$")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_PCI_MATRIX_FLAG = re.compile(r"\btopo\s+(-mp|--matrix_pci)\b")
_LEGEND_CODE = re.compile(r"^\s*(\S+)\s*=", re.MULTILINE)
#: What nvidia-smi prints instead of a matrix when it cannot run (driver missing, no device…).
_SMI_ERROR = re.compile(
    r"(NVIDIA-SMI has failed|Failed to (run|initialize)|No devices were found|couldn't communicate with the NVIDIA driver"
    r"|Unable to determine the device handle|command not found|not recognized as)",
    re.IGNORECASE,
)
_ROW_START = re.compile(r"^\s*GPU\d+\s+(X|NV\d+|[A-Z]{3,4})\b")

#: Extra column names that contain spaces; the header is split so that they survive.
KNOWN_COLUMNS = ("GPU NUMA ID", "CPU Affinity", "NUMA Affinity")
#: Old matrix codes and the names current drivers print for them.
LEGACY_CODES = {"SOC": "SYS"}
#: PCIe path codes from nearest to farthest (nvidia-smi's legend order).
PATH_RANK = PCIE_PATH_CODES
_MISSING = ("", "N/A")
PCIE_ONLY_NOTE = (
    "this is the PCIe-only view (nvidia-smi topo -mp): NVLinks, if any, are hidden in it, "
    "so links and fabric reflect PCIe paths only"
)


@dataclass
class Matrix:
    """The table as printed: device columns, extra columns, and each row's cells by column."""

    devices: list[str]
    extras: list[str]
    codes: dict[str, dict[str, str]]
    values: dict[str, dict[str, str]]
    #: Every row as printed, ``(label, cells)``, repeated labels kept (for the consistency checks).
    rows: list[tuple[str, list[str]]] = field(default_factory=list)
    #: Labels of device rows directly below the table that the header does not name.
    stray: list[str] = field(default_factory=list)

    def code(self, row: str, column: str) -> str | None:
        """The cell at ``row``/``column``, read from the transposed cell when the row lacks it."""
        return self.codes.get(row, {}).get(column) or self.codes.get(column, {}).get(row)


def parse_nvidia_smi(text: str, source_name: str) -> Topology:
    """Build a Topology from saved ``nvidia-smi topo -m`` text (any driver generation).

    Raises :class:`UserError` naming ``source_name`` when the text holds no matrix, or one
    that is not a complete square table (see :mod:`shardscope.topology.matrix_check`).
    """
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    matrix = find_matrix(lines)
    if matrix is None:
        raise UserError(no_matrix_message(lines, source_name))
    check_notes = check_matrix(matrix, source_name)
    value_warnings = _unread_values(matrix)
    gpus, numa_nodes, numa_notes = _numa(_gpus(matrix))
    links = _links(matrix, gpus)
    pcie_only = is_pcie_only_view(text, links)
    notes = _code_notes(matrix) + check_notes + numa_notes + _socket_notes(numa_nodes, links)
    if pcie_only:
        notes.append(PCIE_ONLY_NOTE)
    return Topology(
        gpus=gpus,
        links=links,
        numa_nodes=numa_nodes,
        nics=_nics(matrix, _nic_legend(lines)),
        source={"method": "nvidia-smi", "file": source_name},
        accelerator="nvidia",
        pcie_only_view=pcie_only,
        notes=notes,
        warnings=value_warnings,
    )


def no_matrix_message(lines: list[str], source_name: str) -> str:
    """One sentence saying why no matrix was found: an nvidia-smi error, a cut, or no matrix at all."""
    error = next((line.strip() for line in lines if _SMI_ERROR.search(line)), None)
    if error is not None:
        first = re.split(r"(?<=[.!])\s", error, maxsplit=1)[0].rstrip(".")
        return f"{source_name}: holds an error message instead of a topology matrix ({first[:160]!r})"
    if any(_header_like(line) for line in lines):
        return (
            f"{source_name}: the matrix header naming GPU0... is followed by no GPU rows; "
            "the output looks truncated"
        )
    if any(_ROW_START.match(line) for line in lines):
        return f"{source_name}: matrix rows found but no header row naming the columns; the output looks truncated"
    return (
        f"{source_name}: no GPU topology matrix found; expected 'nvidia-smi topo -m' output "
        "with a header row naming GPU0... and one row per GPU with X on the diagonal"
    )


def _header_like(line: str) -> bool:
    """A line that names GPU0 among its cells and holds no X: a matrix header."""
    tokens = line.split()
    return "GPU0" in tokens and "X" not in tokens


def find_matrix(lines: list[str]) -> Matrix | None:
    """The first header row (GPU0 among its cells, no X) followed by device rows, parsed."""
    for i, line in enumerate(lines):
        if not _header_like(line):
            continue
        matrix = _read_matrix(split_header(line), lines[i + 1 :])
        if matrix is not None:
            return matrix
    return None


def split_header(line: str) -> list[str]:
    """Header cells, keeping multi-word names such as ``CPU Affinity`` whole.

    Cells are separated by tabs or runs of two or more spaces; a cell that still holds
    several words (imperfect alignment) is split again on device names and known columns.
    """
    cells: list[str] = []
    for chunk in re.split(r"\t+| {2,}", line.strip()):
        if chunk:
            cells.extend(_split_chunk(chunk.split()))
    return cells


def _split_chunk(words: list[str]) -> list[str]:
    """Split one header chunk into device names, known columns and runs of other words."""
    cells: list[str] = []
    pending: list[str] = []
    i = 0
    while i < len(words):
        known = next((k for k in KNOWN_COLUMNS if words[i : i + len(k.split())] == k.split()), None)
        if known is None and not _DEVICE.match(words[i]):
            pending.append(words[i])
            i += 1
            continue
        if pending:
            cells.append(" ".join(pending))
            pending = []
        cells.append(known or words[i])
        i += len(known.split()) if known else 1
    if pending:
        cells.append(" ".join(pending))
    return cells


def _read_matrix(header: list[str], body: list[str]) -> Matrix | None:
    """Parse the rows below ``header``; None unless at least one GPU row is found.

    Rows end at a blank line or a line that does not start with a device name; a device row
    the header does not name (``GPU8`` under GPU0…GPU7) is kept in ``stray`` for the checks.
    """
    rows: list[tuple[str, list[str]]] = []
    stray: list[str] = []
    for line in body:
        tokens = line.split()
        if tokens and tokens[0] in header:
            rows.append((tokens[0], tokens[1:]))
        elif tokens and rows and _DEVICE.match(tokens[0]):
            stray.append(tokens[0])
        else:
            break
    devices = _device_columns(header, {label for label, _ in rows})
    if not any(_GPU.match(label) for label, _ in rows if label in devices):
        return None
    extras = header[len(devices) :]
    codes = {label: dict(zip(devices, cells)) for label, cells in rows}
    values = {label: dict(zip(extras, cells[len(devices) :])) for label, cells in rows}
    return Matrix(devices=devices, extras=extras, codes=codes, values=values, rows=rows, stray=stray)


def _device_columns(header: list[str], row_labels: set[str]) -> list[str]:
    """The leading header cells that name devices (rows of the matrix or device-like names)."""
    devices: list[str] = []
    for cell in header:
        if cell not in row_labels and not _DEVICE.match(cell):
            break
        devices.append(cell)
    return devices


def _value(matrix: Matrix, row: str, column: str) -> str | None:
    """An extra column's value for ``row``; None when absent or ``N/A``."""
    value = matrix.values.get(row, {}).get(column)
    return None if value is None or value in _MISSING else value


def _unread_values(matrix: Matrix) -> list[str]:
    """Warnings for NUMA cells that are neither a node number nor N/A (``NaN``, ``0x1``): they are not used."""
    warnings = []
    for label in matrix.codes:
        if not _GPU.match(label):
            continue
        for column in ("NUMA Affinity", "GPU NUMA ID"):
            value = _value(matrix, label, column)
            if value is not None and not value.isdigit():
                warnings.append(f"row {label}, column {column} holds {value!r}, which is not a NUMA node number; "
                                "the GPU's NUMA node is read as unknown from it")
    return warnings


def _int_or_none(value: str | None) -> int | None:
    """``value`` as an int when it is a plain non-negative number."""
    return int(value) if value is not None and value.isdigit() else None


def _gpus(matrix: Matrix) -> list[Gpu]:
    """One Gpu per GPU row, with CPU affinity and the numeric NUMA node where printed."""
    gpus = []
    for label in matrix.codes:
        match = _GPU.match(label)
        if match is None:
            continue
        numa = _int_or_none(_value(matrix, label, "NUMA Affinity"))
        if numa is None:
            numa = _int_or_none(_value(matrix, label, "GPU NUMA ID"))
        nics, code = _nearest_nics(matrix, label)
        gpus.append(
            Gpu(
                index=int(match.group(1)),
                numa_node=numa,
                cpu_affinity=_value(matrix, label, "CPU Affinity"),
                nearest_nics=nics,
                nearest_nic_code=code,
            )
        )
    return sorted(gpus, key=lambda g: g.index)


def _nearest_nics(matrix: Matrix, gpu_label: str) -> tuple[tuple[str, ...], str | None]:
    """The NIC columns closest to one GPU (ties kept, in column order) and their path code."""
    reach = {
        name: normalise_code(code)
        for name in matrix.devices
        if not _GPU.match(name) and (code := matrix.codes.get(gpu_label, {}).get(name)) is not None
    }
    best = min(reach.values(), key=_rank, default=None)
    return tuple(name for name, code in reach.items() if code == best), best


def normalise_code(code: str) -> str:
    """The current name of a matrix code (``SOC`` becomes ``SYS``)."""
    return LEGACY_CODES.get(code, code)


def _links(matrix: Matrix, gpus: list[Gpu]) -> list[Link]:
    """A Link for every GPU pair ``a < b`` that the matrix has a cell for."""
    links = []
    for i, first in enumerate(gpus):
        for second in gpus[i + 1 :]:
            raw = matrix.code(f"GPU{first.index}", f"GPU{second.index}")
            if raw is not None:
                code = normalise_code(raw)
                links.append(Link(a=first.index, b=second.index, code=code, nvlinks=nvlink_count(code)))
    return links


def _code_notes(matrix: Matrix) -> list[str]:
    """Notes on legacy codes the matrix used, so the raw spelling is not lost."""
    seen = {cell for row in matrix.codes.values() for cell in row.values()}
    return [
        f"the matrix uses {old}, the old name of {new}; links and NICs record it as {new}"
        for old, new in LEGACY_CODES.items()
        if old in seen
    ]


def _nic_legend(lines: list[str]) -> dict[str, str]:
    """``NICn`` -> device name (``mlx5_0``…) from the NIC Legend, when printed."""
    return {m.group(1): m.group(2) for m in map(_NIC_LEGEND.match, lines) if m}


def _rank(code: str) -> int:
    """Position of a PCIe path code from near to far; unknown codes rank last."""
    return PATH_RANK.index(code) if code in PATH_RANK else len(PATH_RANK)


def _nics(matrix: Matrix, legend: dict[str, str]) -> list[Nic]:
    """Every non-GPU device column with the GPUs nearest to it and the code they share."""
    gpu_labels = [d for d in matrix.devices if _GPU.match(d)]
    nics = []
    for name in matrix.devices:
        if _GPU.match(name):
            continue
        reach = {int(g[3:]): normalise_code(c) for g in gpu_labels if (c := matrix.code(g, name)) is not None}
        best = min(reach.values(), key=_rank, default=None)
        nics.append(
            Nic(
                name=name,
                device=legend.get(name, None if _NIC_ALIAS.match(name) else name),
                nearest_gpus=tuple(sorted(g for g, c in reach.items() if c == best)),
                nearest_code=best,
            )
        )
    return nics


def _numa(gpus: list[Gpu]) -> tuple[list[Gpu], list[NumaNode], list[str]]:
    """NUMA nodes from the GPUs' NUMA ids, else inferred from CPU affinity (see module doc)."""
    ids = sorted({g.numa_node for g in gpus if g.numa_node is not None})
    if ids:
        return gpus, [_numa_node(i, [g for g in gpus if g.numa_node == i]) for i in ids], []
    groups = list(dict.fromkeys(g.cpu_affinity for g in gpus if g.cpu_affinity is not None))
    if not groups:
        return gpus, [], []
    nodes = [NumaNode(id=i, cpus=cpus, cores=cpu_count_from_list(cpus) or None) for i, cpus in enumerate(groups)]
    if len(groups) == 1:
        note = "no NUMA ids in the matrix; one NUMA node 0 assumed from the CPU affinity all GPUs share"
        return gpus, nodes, [note]
    assigned = [
        dataclasses.replace(g, numa_node=groups.index(g.cpu_affinity)) if g.cpu_affinity is not None else g
        for g in gpus
    ]
    note = f"no NUMA ids in the matrix; NUMA nodes 0-{len(groups) - 1} inferred from distinct CPU affinity groups"
    return assigned, nodes, [note]


def _socket_notes(numa_nodes: list[NumaNode], links: list[Link]) -> list[str]:
    """A warning when SYS paths contradict a single NUMA node (NUMA hidden from the OS or BIOS)."""
    if len(numa_nodes) == 1 and any(link.code == "SYS" for link in links):
        return ["SYS paths show GPUs on different CPU sockets although the matrix shows a single NUMA node"]
    return []


def _numa_node(node_id: int, members: list[Gpu]) -> NumaNode:
    """A NUMA node whose CPUs are the affinity printed for the GPUs on it."""
    cpus = next((g.cpu_affinity for g in members if g.cpu_affinity is not None), None)
    return NumaNode(id=node_id, cpus=cpus, cores=cpu_count_from_list(cpus) or None)


def is_pcie_only_view(text: str, links: list[Link]) -> bool:
    """Whether the text is ``topo -mp`` output: said on its command line, or a legend without NV#.

    A legend naming ``SYS`` (drivers of 2018 on) but not ``NV#`` comes from ``-mp``; older
    legends (``SOC``) predate ``-mp``, and a matrix with NV# cells is never the PCIe view.
    """
    if any(link.nvlinks for link in links):
        return False
    if _PCI_MATRIX_FLAG.search(text):
        return True
    _, found, legend = text.partition("Legend:")
    codes = set(_LEGEND_CODE.findall(legend)) if found else set()
    return "SYS" in codes and "NV#" not in codes
