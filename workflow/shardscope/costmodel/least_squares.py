"""Small non-negative least squares in pure Python, for fits of a handful of parameters (no numpy import).

The step calibration (:mod:`shardscope.costmodel.step_calibration`) fits four or five coefficients
to seven or so measured runs; numpy would cost more to import than the fit takes. :func:`nnls`
solves ``min ||A x - b||²`` subject to ``x ≥ 0`` exactly for so few columns, by solving the
unconstrained problem on every subset of the columns (the others held at 0) and keeping the best
feasible solution: the optimum of a convex problem over the non-negative orthant is the
unconstrained optimum of the columns that are positive in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

#: More columns than this and subset enumeration (2^columns solves) stops being cheap.
MAX_COLUMNS = 8


def solve(matrix: list[list[float]], rhs: list[float]) -> list[float] | None:
    """``x`` with ``matrix · x = rhs`` by Gaussian elimination with partial pivoting; None when singular."""
    n = len(rhs)
    m = [row[:] + [rhs[i]] for i, row in enumerate(matrix)]
    scale = max((abs(v) for row in matrix for v in row), default=0.0) or 1.0
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) <= 1e-12 * scale:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            if f:
                for c in range(col, n + 1):
                    m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return x


def _least_squares(rows: Sequence[Sequence[float]], b: Sequence[float], cols: Sequence[int]) -> list[float] | None:
    """Unconstrained least squares on columns ``cols`` (normal equations on unit-norm columns, so columns of very
    different magnitudes, FLOPs beside call counts, do not look singular); None when they are degenerate."""
    norms = [sum(r[i] * r[i] for r in rows) ** 0.5 for i in cols]
    if any(n == 0 for n in norms):
        return None
    gram = [[sum(r[i] * r[j] for r in rows) / (ni * nj) for j, nj in zip(cols, norms)] for i, ni in zip(cols, norms)]
    moment = [sum(r[i] * bi for r, bi in zip(rows, b)) / ni for i, ni in zip(cols, norms)]
    x = solve(gram, moment)
    return None if x is None else [v / n for v, n in zip(x, norms)]


def nnls(rows: Sequence[Sequence[float]], b: Sequence[float], required: Sequence[int] = ()) -> tuple[list[float], float]:
    """Non-negative least squares ``min ||rows · x - b||²``, ``x ≥ 0``; columns in ``required`` must stay positive.

    Returns (x, residual sum of squares). Raises ValueError for more than :data:`MAX_COLUMNS`
    columns or when no subset that holds every required column is solvable with positive values there.
    """
    width = len(rows[0]) if rows else 0
    if width > MAX_COLUMNS:
        raise ValueError(f"nnls by subsets takes at most {MAX_COLUMNS} columns, got {width}")
    optional = [c for c in range(width) if c not in required]
    best: tuple[list[float], float] | None = None
    for k in range(len(optional) + 1):
        for extra in combinations(optional, k):
            cols = sorted((*required, *extra))
            if not cols:
                continue
            x_sub = _least_squares(rows, b, cols)
            if x_sub is None or any(v < 0 for v in x_sub) or any(x_sub[cols.index(c)] <= 0 for c in required):
                continue
            x = [0.0] * width
            for c, v in zip(cols, x_sub):
                x[c] = v
            rss = sum((sum(ri * xi for ri, xi in zip(r, x)) - bi) ** 2 for r, bi in zip(rows, b))
            if best is None or rss < best[1] - 1e-18:
                best = (x, rss)
    if best is None:
        raise ValueError("no non-negative least-squares solution keeps the required columns positive")
    return best
