"""Figure 3's whole-peak panel: a log axis when DeepSpeed's whole reduce bucket dwarfs the other strategies' peaks."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from shardscope.figures.plots_training import _whole_peak_panel  # noqa: E402


def _rows(peaks: dict[str, float]) -> pd.DataFrame:
    rows = []
    for strategy, peak in peaks.items():
        for method, model in (("measured", None), ("modeled", "implementation")):
            rows.append({"method": method, "memory_model": model, "strategy": strategy, "param_bytes": peak * 0.2,
                         "grad_bytes": peak * 0.2, "optim_bytes": peak * 0.3, "activation_bytes": peak * 0.2,
                         "buffer_bytes": peak * 0.1, "tracked_peak_bytes": peak, "capacity_bytes": None})
    return pd.DataFrame(rows)


def _draw(peaks: dict[str, float]) -> plt.Axes:
    fig, ax = plt.subplots()
    assert _whole_peak_panel(ax, _rows(peaks), list(peaks))
    plt.close(fig)
    return ax


def test_a_2_gb_bucket_beside_20_mb_peaks_is_drawn_on_a_log_axis() -> None:
    ax = _draw({"ddp": 20e6, "fsdp": 12e6, "zero2": 2.02e9})
    assert ax.get_yscale() == "log" and "log scale" in ax.get_ylabel()
    assert ax.get_ylim()[0] == 12e6 * 0.1 / 1e9 / 2  # in GB (the largest peak's unit): a floor under the smallest part
    # issue 32: never stacked on a log axis (a stacked part starts above 0 and the log axis hides it)
    assert ax.patches and all(patch.get_y() == 0 for patch in ax.patches)


def test_a_linear_axis_stacks_the_parts() -> None:
    ax = _draw({"ddp": 20e6, "fsdp": 12e6})
    assert any(patch.get_y() > 0 for patch in ax.patches)


def test_peaks_of_one_order_of_magnitude_stay_linear() -> None:
    ax = _draw({"ddp": 20e6, "fsdp": 12e6, "zero2": 30e6})
    assert ax.get_yscale() == "linear" and "log" not in ax.get_ylabel()
