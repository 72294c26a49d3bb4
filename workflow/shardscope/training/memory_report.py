"""The human-readable table of ``shardscope memory``: GB (1e9 bytes) as the seed article writes them.

Models too small to show in GB (the CPU presets) are printed in MB (1e6 bytes); the header
says which unit a table uses.
"""

from __future__ import annotations

from typing import Any

GB = 1e9
MB = 1e6


def _unit(rows: list[dict[str, Any]]) -> tuple[str, float]:
    return ("GB", GB) if max(r["total_bytes"] for r in rows) >= GB else ("MB", MB)


def _count(n_params: int) -> str:
    return f"{n_params / 1e9:.2f} B" if n_params >= 1e9 else f"{n_params / 1e6:.2f} M"


def _estimate_cell(estimate: dict[str, Any] | None, unit: str, scale: float) -> str:
    if estimate is None:
        return "-"
    if estimate.get("gpu_bytes") is None:
        return "n/a (" + str(estimate.get("error", "unavailable")) + ")"
    return f"{estimate['gpu_bytes'] / scale:.2f} {unit} ({estimate['function']}, {estimate['options']})"


def format_memory_table(rows: list[dict[str, Any]]) -> str:
    """Header lines stating the assumptions, then one line per strategy with a fits yes/no column.

    Why a header: the numbers are only as good as the bytes-per-parameter assumption, so the
    output always says which one it used, that it is modeled, and what ``fits`` leaves out.
    """
    first = rows[0]
    per = first["bytes_per_param"]
    unit, scale = _unit(rows)
    lines = [
        f"{first['model']}: {_count(first['n_params'])} parameters, {first['gpus']} GPU(s) of "
        f"{first['gpu_memory_bytes'] / GB:g} GB; modeled per-GPU model states (activations and buffers excluded)",
        f"bytes per parameter: params {per['param_bytes']:g} + grads {per['grad_bytes']:g} + optimizer "
        f"{per['optim_bytes']:g} ({per['description']}); 1 {unit} = 1e{9 if unit == 'GB' else 6} bytes",
        f"{'strategy':>13}  {'params':>11}  {'grads':>11}  {'optimizer':>11}  {'total':>11}  fits  DeepSpeed's estimator (per GPU)",
    ]
    for row in rows:
        cells = "  ".join(f"{row[k] / scale:8.2f} {unit}" for k in ("param_bytes", "grad_bytes", "optim_bytes", "total_bytes"))
        lines.append(f"{row['strategy']:>13}  {cells}  {'yes' if row['fits'] else 'no':>4}  "
                     f"{_estimate_cell(row.get('deepspeed_estimate'), unit, scale)}")
    return "\n".join(lines) + "\n"
