"""The human-readable table of ``shardscope memory``: GB (1e9 bytes) as the seed article writes them.

Models too small to show in GB (the CPU presets) are printed in MB (1e6 bytes); the header
says which unit a table uses.
"""

from __future__ import annotations

from typing import Any

from shardscope.costmodel.memory_peak import ALLOCATOR_CACHE_FRACTION, ALLOCATOR_RESERVE_FRACTION

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


def _label(row: dict[str, Any]) -> str:
    """The strategy as printed: HSDP with its shard-group size (``hsdp g=4``: sharded over 4, replicated across the rest)."""
    return f"{row['strategy']} g={row['shard_group']}" if row.get("shard_group") else row["strategy"]


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
        lines.append(f"{_label(row):>13}  {cells}  {'yes' if row['fits'] else 'no':>4}  "
                     f"{_estimate_cell(row.get('deepspeed_estimate'), unit, scale)}")
    return "\n".join(lines) + "\n"


def _overhead_words(peak: dict[str, Any]) -> str:
    """What the overhead column holds: a fraction calibrated from a measured run, else on the reserved basis the
    caching allocator's modeled reserve (so the header never says 0 beside a column that is not)."""
    fraction = peak["assumptions"].get("overhead_fraction") or 0
    if fraction:
        return f"overhead {fraction:g} of the peak (calibrated from a measured run)"
    if peak.get("basis") == "allocated":
        return "overhead 0 (the allocated basis: tensors alive, no allocator reserve)"
    return (f"overhead: the caching allocator's reserve, {ALLOCATOR_RESERVE_FRACTION:.1%} of the allocated peak, and "
            f"the blocks it keeps cached in the room the GPU leaves, up to {ALLOCATOR_CACHE_FRACTION:.1%} in all ("
            "'fits' is decided without the cache, which the allocator frees before it fails; a fraction calibrated "
            "from a measured run replaces both)")


def format_peak_table(rows: list[dict[str, Any]]) -> str:
    """The whole modeled peak per strategy, every term, and the largest micro-batch that fits the GPU.

    Rows start with ``peak`` so that they read as a second table under the model states one.
    """
    if not rows or "peak" not in rows[0]:
        return ""
    first = rows[0]["peak"]["assumptions"]
    scale_rows = [{"total_bytes": r["peak"]["peak_bytes"]} for r in rows]
    unit, scale = _unit(scale_rows)
    lines = [
        "",
        f"whole peak per GPU (modeled): seq {first['seq_len']}, micro-batch {first['micro_batch']}, "
        f"activation checkpointing {first['checkpointing']}, attention {first['attention']}, "
        f"{'GELU as gelu_new eager ops, ' if first.get('mlp_activation') == 'eager_tanh' else ''}"
        f"{_overhead_words(rows[0]['peak'])}",
        "  activations: the tensors autograd saves (per block and the output side); buffers: the temporaries of "
        "the peak phase (logits, gradient buckets, gathered parameters, optimizer step)",
        "  states: as this code's strategies hold them (unless bytes per parameter are given), the same whole peak "
        "advise, predict and the report give; device: the peak and what is held outside the allocator (CUDA context, "
        "NCCL buffers), as nvidia-smi shows it; fits: the device column less the allocator's cache within the usable "
        "share of the GPU's memory",
        *([f"  DeepSpeed (ZeRO) buckets and ZeRO-3's reuse distance from {first['deepspeed']['source']}"]
          if first.get("deepspeed") else []),
        f"{'':5}{'strategy':>13}  {'states':>11}  {'activations':>11}  {'buffers':>11}  {'overhead':>11}  {'peak':>11}  "
        f"{'device':>11}  "
        f"{'phase':>8}  fits  largest micro-batch",
    ]
    for row in rows:
        peak = dict(row["peak"])
        peak["overhead_bytes"] += peak.get("cache_bytes", 0)  # the overhead as the run shows it: reserve and cache
        cells = "  ".join(f"{peak[k] / scale:8.2f} {unit}" for k in
                          ("state_bytes", "activation_bytes", "buffer_bytes", "overhead_bytes", "peak_bytes",
                           "device_bytes"))
        lines.append(f"peak {_label(row):>13}  {cells}  {peak['peak_phase']:>8}  {'yes' if row['peak_fits'] else 'no':>4}  "
                     f"{row['largest_micro_batch']}")
    lines.append("terms per phase (peak phase first):")
    for row in rows:
        phases = row["peak"]["phases"]
        order = [row["peak"]["peak_phase"]] + [p for p in phases if p != row["peak"]["peak_phase"]]
        parts = "; ".join(f"{name}: " + ", ".join(f"{k} {v / scale:.2f}" for k, v in phases[name].items() if v) for name in order)
        lines.append(f"  phases of {_label(row)}: {parts} ({unit})")
    return "\n".join(lines) + "\n"
