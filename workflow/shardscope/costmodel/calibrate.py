"""Fit the model's latency and bandwidth efficiency to measured collective times on a known topology.

The uncalibrated model uses NCCL's constants. Measured rows (our ``collectives`` results, or
an imported nccl-tests log) on the same machine refine it per op: with ``A`` the model's
large-message algorithm bandwidth for the row's job, the fit is

    ``t = alpha + S / (efficiency × A)``

by least squares on relative error (each row weighted by 1/t², so an 8 B row and an 8 GB row
count alike). ``efficiency`` is how much of the modeled bandwidth the machine really reaches
(1.0: exactly the model; 0.8: 20% less) and ``alpha`` the fixed cost per call; a prediction
with a :class:`Calibration` uses both instead of NCCL's latency tables.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shardscope.contracts.names import OPS
from shardscope.errors import UserError

#: Fewest rows (distinct sizes) a fit needs.
MIN_ROWS = 3


@dataclass(frozen=True)
class Calibration:
    """A fitted latency and bandwidth efficiency for one collective op."""

    op: str
    alpha_s: float
    """Fixed time per call, seconds (at least 0)."""
    efficiency: float
    """Reached bandwidth over the model's bandwidth (positive)."""
    rows: int
    rms_relative_error: float
    """Root-mean-square relative error of the fitted times over the rows used."""

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown collective {self.op!r}")
        if not (self.alpha_s >= 0 and math.isfinite(self.alpha_s)):
            raise ValueError(f"alpha must be a finite time of at least 0, got {self.alpha_s!r}")
        if not (self.efficiency > 0 and math.isfinite(self.efficiency)):
            raise ValueError(f"efficiency must be positive, got {self.efficiency!r}")
        if self.rows < MIN_ROWS:
            raise ValueError(f"a calibration needs at least {MIN_ROWS} rows, got {self.rows}")

    def time_s(self, size_bytes: float, model_algbw_gbps: float) -> float:
        """Calibrated time of one call of ``size_bytes`` whose modeled bandwidth is ``model_algbw_gbps``."""
        return self.alpha_s + size_bytes / (self.efficiency * model_algbw_gbps * 1e9)

    def to_dict(self) -> dict[str, Any]:
        """Plain dictionary for JSON output and the predictions document."""
        return {"op": self.op, "alpha_s": self.alpha_s, "efficiency": self.efficiency, "rows": self.rows,
                "rms_relative_error": self.rms_relative_error}


def _fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Weighted least squares of ``t = a + b·x`` with weights 1/t²; ``a`` clamped at 0."""
    w = [1.0 / (t * t) for _, t in points]
    sw = sum(w)
    sx = sum(wi * x for wi, (x, _) in zip(w, points))
    sy = sum(wi * t for wi, (_, t) in zip(w, points))
    sxx = sum(wi * x * x for wi, (x, _) in zip(w, points))
    sxy = sum(wi * x * t for wi, (x, t) in zip(w, points))
    det = sw * sxx - sx * sx
    if det > 0:
        b = (sw * sxy - sx * sy) / det
        a = (sy - b * sx) / sw
        if a >= 0 and b > 0:
            return a, b
    b = sxy / sxx if sxx > 0 else 0.0  # through the origin: no measurable latency
    return 0.0, b


def calibrate(rows: Iterable[Mapping[str, Any]], model_algbw: Callable[[str, int], float]) -> dict[str, Calibration]:
    """Fit one :class:`Calibration` per op from rows with ``op``, ``world_size``, ``size_bytes``, ``time_s``.

    ``model_algbw(op, world_size)`` is the model's large-message algorithm bandwidth (GB/s) for
    a job of that size on the calibrated topology. Ops with fewer than :data:`MIN_ROWS` usable
    rows are left out; a UserError says when no op can be fitted.
    """
    by_op: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        try:
            op, n = str(row["op"]), int(row["world_size"])
            size, time_s = float(row["size_bytes"]), float(row["time_s"])
        except (KeyError, TypeError, ValueError):
            continue
        if op not in OPS or n < 2 or size <= 0 or not (time_s > 0 and math.isfinite(time_s)):
            continue
        algbw = model_algbw(op, n)
        if not (algbw > 0 and math.isfinite(algbw)):
            continue
        by_op.setdefault(op, []).append((size / (algbw * 1e9), time_s))
    fits: dict[str, Calibration] = {}
    for op, points in sorted(by_op.items()):
        if len({x for x, _ in points}) < MIN_ROWS:
            continue
        alpha, slope = _fit(points)
        if slope <= 0:
            continue
        errors = [((alpha + slope * x) - t) / t for x, t in points]
        fits[op] = Calibration(op=op, alpha_s=alpha, efficiency=1.0 / slope, rows=len(points),
                               rms_relative_error=math.sqrt(sum(e * e for e in errors) / len(errors)))
    if not fits:
        raise UserError(f"no collective could be calibrated: each op needs at least {MIN_ROWS} rows of distinct sizes "
                        "with op, world_size >= 2, size_bytes and time_s")
    return fits


def load_rows(path: str) -> list[dict[str, Any]]:
    """Measured rows from a file: a collectives / collectives_import result, or an nccl-tests log or ``-J`` JSON."""
    from shardscope.collectives.nccl_tests import read_nccl_tests
    from shardscope.fileio import read_json

    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            head = handle.read(4096).lstrip()
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if head.startswith("{"):
        doc = read_json(path)
        if isinstance(doc, dict) and doc.get("kind") in ("collectives", "collectives_import"):
            return rows_from_document(doc, path)
    result = read_nccl_tests(path)
    return [dict(row, op=result.op, world_size=result.world_size) for row in result.rows]


def rows_from_document(doc: Any, source: str) -> list[dict[str, Any]]:
    """The measured rows of a ``collectives`` or ``collectives_import`` result document."""
    if not isinstance(doc, dict) or doc.get("kind") not in ("collectives", "collectives_import") or not isinstance(doc.get("rows"), list):
        raise UserError(f"{source}: not a collectives result (expected kind 'collectives' or 'collectives_import' with 'rows')")
    world = doc.get("world_size") or doc.get("job", {}).get("world_size")
    return [dict(r, world_size=r.get("world_size", world)) for r in doc["rows"] if isinstance(r, dict)]
