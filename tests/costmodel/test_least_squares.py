"""The pure-Python non-negative least squares the step calibration fits with."""

from __future__ import annotations

import pytest
from shardscope.costmodel.least_squares import nnls, solve


def test_solve_finds_the_solution_and_refuses_a_singular_system() -> None:
    assert solve([[2.0, 1.0], [1.0, 3.0]], [5.0, 10.0]) == pytest.approx([1.0, 3.0])
    assert solve([[1.0, 2.0], [2.0, 4.0]], [1.0, 2.0]) is None


def test_nnls_recovers_exact_coefficients_and_clamps_a_negative_one_at_zero() -> None:
    rows = [[1.0, x, x * x] for x in (0.5, 1.0, 2.0, 3.0, 5.0)]
    exact = [0.2, 1.5, 0.25]
    b = [sum(r * c for r, c in zip(row, exact)) for row in rows]
    x, rss = nnls(rows, b)
    assert x == pytest.approx(exact) and rss == pytest.approx(0.0, abs=1e-18)
    # data made with a negative third coefficient: the constrained optimum holds it at 0 and fits the rest
    b = [row[0] + row[1] - 0.1 * row[2] for row in rows]
    x, rss = nnls(rows, b)
    assert x[2] == 0.0 and min(x) >= 0 and rss > 0


def test_a_required_column_stays_positive_or_the_fit_says_it_cannot() -> None:
    rows = [[1.0, 1.0], [1.0, 2.0], [1.0, 3.0]]
    x, _ = nnls(rows, [3.0, 2.0, 1.0], required=[1])  # falling data: the slope would want to be negative
    assert x == pytest.approx([0.0, 10 / 14])  # the slope alone, through the origin, is the best with it positive
    with pytest.raises(ValueError, match="required"):
        nnls([[1.0], [1.0]], [-1.0, -2.0], required=[0])


def test_columns_of_very_different_magnitudes_are_not_taken_for_singular() -> None:
    # FLOPs (1e9) beside call counts (1..10): the step calibration's columns
    rows = [[f * 1e9, calls] for f, calls in ((0.5, 1), (0.6, 9), (0.55, 6), (0.52, 2))]
    b = [r[0] * 5e-10 + r[1] * 2e-3 for r in rows]
    x, _ = nnls(rows, b, required=[0])
    assert x == pytest.approx([5e-10, 2e-3])
