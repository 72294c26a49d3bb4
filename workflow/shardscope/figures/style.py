"""Shared look of every figure: names and colours of strategies, unit formatting, saving."""

from __future__ import annotations

import math
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogFormatterSciNotation, LogLocator  # noqa: E402

#: Left to right: least sharded first; each island-aware variant beside its flat neighbour (hpZ after ZeRO-3, HSDP after FSDP).
STRATEGY_ORDER = ["ddp", "zero0", "zero1", "zero2", "fsdp_grad_op", "zero3", "zero3_hpz", "fsdp", "hsdp"]
STRATEGY_NAMES = {"ddp": "DDP", "zero0": "ZeRO-0", "zero1": "ZeRO-1", "zero2": "ZeRO-2",
                  "fsdp_grad_op": "FSDP grad-op", "zero3": "ZeRO-3", "zero3_hpz": "ZeRO-3 hpZ", "fsdp": "FSDP", "hsdp": "HSDP",
                  "none": "nothing fits (more GPUs or offload)"}
_PALETTE = sns.color_palette("colorblind", 10)
#: Palette slots: the seven flat strategies keep the colours they always had, the island-aware ones take the next two.
_COLOR_SLOTS = ["ddp", "zero0", "zero1", "zero2", "fsdp_grad_op", "zero3", "fsdp", "hsdp", "zero3_hpz"]
STRATEGY_COLORS = {s: _PALETTE[i] for i, s in enumerate(_COLOR_SLOTS)} | {"none": (0.85, 0.85, 0.85)}
MEMORY_PARTS = [("param_bytes", "parameters"), ("grad_bytes", "gradients"), ("optim_bytes", "optimizer state")]
DPI = 130


def strategy_name(strategy: str) -> str:
    """Display name of a strategy key (``zero3`` -> ``ZeRO-3``)."""
    return STRATEGY_NAMES.get(strategy, strategy)


def format_bytes_binary(value: float) -> str:
    """A message size in binary units, as nccl-tests sweeps are powers of two (``4194304`` -> ``4 MiB``)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            number = value / scale
            return f"{number:.0f} {unit}" if number == int(number) else f"{number:.3g} {unit}"
    return f"{value:.0f} B"


def format_gbps(value: float) -> str:
    """A bandwidth in GB/s with three significant digits or two decimals, whichever is finer."""
    return f"{value:.2f} GB/s" if value < 100 else f"{value:.1f} GB/s"


def format_params(n: float) -> str:
    """A parameter count in millions or billions (``7.24e9`` -> ``7.24 B``), rounded before the unit is chosen.

    ``999.9e6`` reads ``1 B``, not ``1e+03 M`` (three significant digits round it up to a thousand).
    """
    millions = float(f"{n / 1e6:.3g}")
    return f"{n / 1e9:.3g} B" if millions >= 1000 else f"{millions:.3g} M"


def memory_unit(max_bytes: float) -> tuple[str, float]:
    """The decimal unit (label, bytes) that keeps the largest bar between 1 and 1000."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if max_bytes >= scale:
            return unit, scale
    return "bytes", 1.0


def log2_bytes_axis(ax: plt.Axes, low_bytes: float, high_bytes: float) -> None:
    """A log-2 message-size axis labelled in B/KiB/MiB/GiB, every power of 4 (16 when it spans many decades)."""
    ax.set_xscale("log", base=2)
    span = math.log2(max(high_bytes, 2.0) / max(low_bytes, 1.0))
    ax.xaxis.set_major_locator(LogLocator(base=16 if span > 22 else 4, numticks=30))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_bytes_binary(v)))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.tick_params(axis="x", labelrotation=45)


_SUPERSCRIPT = str.maketrans("0123456789-+.", "\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079\u207b\u207a\u22c5")


class PlainLogFormatter(LogFormatterSciNotation):
    """matplotlib's log-axis labels (``10⁻³``, ``2×10⁰``) as plain text with Unicode superscripts.

    The stock formatter writes them as mathtext (``$\\mathdefault{10^{-3}}$``), which matplotlib
    parses and lays out anew for every renderer: on the five figures that was a tenth of their
    drawing time. Which ticks get a label is matplotlib's own choice; only the wording differs.
    """

    def __call__(self, x: float, pos: int | None = None) -> str:
        """The stock label of tick ``x``, without mathtext."""
        text = super().__call__(x, pos)
        if not (text.startswith("$") and text.endswith("$")):
            return text
        body = text.strip("$").replace("\\mathdefault{", "", 1)
        body = body[:-1] if body.endswith("}") else body
        base, _, exponent = body.replace("\\times", "\u00d7").partition("^")
        return base + exponent.strip("{}").translate(_SUPERSCRIPT)


def log_axis(ax: plt.Axes, which: str = "y") -> None:
    """Put ``ax``'s ``which`` axis on a log-10 scale with plain-text labels (:class:`PlainLogFormatter`)."""
    axis = ax.yaxis if which == "y" else ax.xaxis
    (ax.set_yscale if which == "y" else ax.set_xscale)("log")
    axis.set_major_formatter(PlainLogFormatter())  # as matplotlib's log scale sets its formatters
    axis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False))


def empty(message: str) -> plt.Figure:
    """A small figure that says there is nothing to draw yet (the file still exists)."""
    fig, ax = plt.subplots(figsize=(6, 2.5))
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True)
    return fig


def save(fig: plt.Figure, path: Path, fmt: str) -> None:
    """Save ``fig`` to ``path`` through a temporary file and a rename (never a half-written figure)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format=fmt, dpi=DPI, bbox_inches="tight")
    os.replace(tmp, path)
