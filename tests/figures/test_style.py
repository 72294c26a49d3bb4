"""Number formats that every figure and caption uses."""

from __future__ import annotations

import pytest

from shardscope.figures.style import format_params


@pytest.mark.parametrize(("n", "text"), [(7.24e9, "7.24 B"), (124e6, "124 M"), (999.4e6, "999 M"),
                                          (999.9e6, "1 B"), (1.5e11, "150 B"), (8e6, "8 M")])
def test_parameter_counts_round_before_the_unit_is_chosen(n, text):
    assert format_params(n) == text
