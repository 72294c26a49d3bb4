"""Consistency checks on a parsed ``nvidia-smi topo -m`` matrix, before anything is derived from it.

A saved matrix can be cut short, have a cell dropped, or carry a wrong row label; reading
such a table would give a wrong but confident topology. nvidia-smi always prints a square
table: one row per column, ``X`` exactly on the diagonal, GPU columns ``GPU0``…``GPU<n-1>``
once each, the same cells in every GPU row, and the same code for ``a``/``b`` as for
``b``/``a``. Any violation among GPUs is a :class:`UserError` naming the file and the first
offending row or cell. A NIC whose row and column disagree is only noted: the GPU rows are
used for it, and no GPU placement depends on it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from shardscope.errors import UserError

if TYPE_CHECKING:
    from shardscope.topology.nvidia_smi import Matrix

_GPU = re.compile(r"^GPU(\d+)$")
#: What a link cell may hold: X, NV<n>, or an upper-case path code (PIX, PXB, PHB, NODE, SYS, SOC…).
_CODE = re.compile(r"^(X|NV\d+|[A-Z][A-Z0-9]{1,7})$")
EXPECTED_CODES = "X, NV#, PIX, PXB, PHB, NODE or SYS"
#: The most NVLinks one GPU pair can have (every current GPU drives at most 18 in total).
MAX_PAIR_NVLINKS = 18
_NV = re.compile(r"^NV(\d+)$")
#: Characters no printed matrix holds: undecodable bytes (U+FFFD) and control characters other than tab.
_NOT_TEXT = re.compile(r"[\ufffd\x00-\x08\x0b-\x1f\x7f]")


def is_link_code(cell: str) -> bool:
    """Whether a cell can be a matrix code (``X``, ``NV12``, ``PIX``…) rather than a value such as ``0-95``."""
    return bool(_CODE.match(cell))


def check_matrix(matrix: Matrix, source_name: str) -> list[str]:
    """Raise :class:`UserError` when the matrix is not a complete square table; return notes on NICs."""
    where = f"{source_name}: "
    _check_text(matrix, where)
    _check_gpu_columns(matrix, where)
    _check_rows_present(matrix, where)
    for label, cells in matrix.rows:
        _check_row(matrix, label, cells, where)
    _check_uniform_gpu_rows(matrix, where)
    return _check_symmetry(matrix, where)


def _check_text(matrix: Matrix, where: str) -> None:
    """Every header name and cell is text: a cell holding undecodable bytes would be read as a value."""
    for column in [*matrix.devices, *matrix.extras]:
        if _NOT_TEXT.search(column):
            raise UserError(f"{where}the matrix header names a column {ascii(column)}, which holds bytes that are not "
                            "text; expected device names and column titles")
    for label, cells in matrix.rows:
        names = [*matrix.devices, *(matrix.extras if _GPU.match(label) else [])]
        for index, cell in enumerate(cells):
            if _NOT_TEXT.search(cell):
                column = names[index] if index < len(names) else f"cell {index + 1}"
                raise UserError(f"{where}row {label}, column {column} holds {ascii(cell)}, which has bytes that are not "
                                "text; expected a link code or a printed value (the file is damaged)")


def _gpu_columns(matrix: Matrix) -> list[str]:
    return [d for d in matrix.devices if _GPU.match(d)]


def _check_gpu_columns(matrix: Matrix, where: str) -> None:
    """GPU columns are GPU0…GPU<n-1>, each once; no device column is named twice."""
    seen: set[str] = set()
    for column in matrix.devices:
        if column in seen:
            raise UserError(f"{where}the matrix header names column {column} twice; expected each device once")
        seen.add(column)
    indices = sorted(int(c[3:]) for c in _gpu_columns(matrix))
    if indices != list(range(len(indices))):
        names = ", ".join(f"GPU{i}" for i in indices)
        raise UserError(f"{where}the matrix header names GPU columns {names}; expected GPU0 to GPU{len(indices) - 1}")


def _check_rows_present(matrix: Matrix, where: str) -> None:
    """Every row label is a column, appears once, and every column has its row."""
    if matrix.stray:
        raise UserError(
            f"{where}row {matrix.stray[0]} has no column in the matrix header; expected a square table"
        )
    labels: set[str] = set()
    for label, _ in matrix.rows:
        if label in labels:
            raise UserError(f"{where}row {label} appears twice in the matrix; expected one row per device")
        labels.add(label)
    missing = [d for d in matrix.devices if d not in labels]
    if missing:
        raise UserError(
            f"{where}the matrix has no row for {_list(missing)} although the header names "
            f"{'it' if len(missing) == 1 else 'them'}; the output looks truncated"
        )


def _list(names: list[str], most: int = 4) -> str:
    """``GPU4, GPU5 and 2 more``: a short list for one-sentence messages."""
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more"


def _check_row(matrix: Matrix, label: str, cells: list[str], where: str) -> None:
    """One row: enough cells, link codes in the device columns, X exactly on the diagonal."""
    width = len(matrix.devices)
    if len(cells) < width:
        raise UserError(
            f"{where}row {label} has {len(cells)} cells, expected at least {width} (one per device column); "
            "the row is cut short or a cell is missing"
        )
    limit = width + (len(matrix.extras) if _GPU.match(label) else 0)
    if len(cells) > limit:
        raise UserError(f"{where}row {label} has {len(cells)} cells but the header names only {limit} columns for it")
    for column, cell in zip(matrix.devices, cells):
        if not is_link_code(cell):
            raise UserError(
                f"{where}row {label}, column {column} holds {cell!r}, which is not a link code; expected "
                f"{EXPECTED_CODES} (a cell is missing or the row is shifted)"
            )
        nv = _NV.match(cell)
        if nv and not 1 <= int(nv.group(1)) <= MAX_PAIR_NVLINKS:
            raise UserError(
                f"{where}row {label}, column {column} holds {cell}; expected NV1 to NV{MAX_PAIR_NVLINKS} "
                "(no GPU has more NVLinks to one peer)"
            )
        if column == label and cell != "X":
            raise UserError(
                f"{where}the diagonal cell {label}/{label} is {cell!r}; expected X (a cell is missing or a row label is wrong)"
            )
        if column != label and cell == "X":
            raise UserError(
                f"{where}cell {label}/{column} is X, which only the diagonal may hold; "
                "a cell is missing or a row label is wrong"
            )


def _check_uniform_gpu_rows(matrix: Matrix, where: str) -> None:
    """Every GPU row fills the same columns (a dropped CPU or NUMA affinity value shifts the rest)."""
    widths = [(label, len(cells)) for label, cells in matrix.rows if _GPU.match(label)]
    if not widths:
        return
    first, width = widths[0]
    for label, other in widths[1:]:
        if other != width:
            raise UserError(
                f"{where}row {label} has {other} cells while row {first} has {width}; "
                "expected every GPU row to fill the same columns"
            )


def _check_symmetry(matrix: Matrix, where: str) -> list[str]:
    """GPU pairs must read the same both ways; a NIC that does not is noted, not fatal."""
    notes: list[str] = []
    devices = matrix.devices
    for i, a in enumerate(devices):
        for b in devices[i + 1 :]:
            ab, ba = matrix.codes[a][b], matrix.codes[b][a]
            if ab == ba:
                continue
            if _GPU.match(a) and _GPU.match(b):
                raise UserError(
                    f"{where}the matrix is not symmetric: {a}/{b} is {ab} but {b}/{a} is {ba}; "
                    "expected the same code both ways"
                )
            if not notes:
                notes.append(
                    f"NIC paths are not symmetric in the matrix ({a}/{b} is {ab}, {b}/{a} is {ba}); "
                    "each NIC's distance to a GPU is read from the GPU's row"
                )
    return notes
