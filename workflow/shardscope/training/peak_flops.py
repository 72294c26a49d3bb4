"""Dense peak matrix FLOP/s by GPU name, for MFU (model FLOPs utilisation).

Vendor datasheet numbers for 16-bit tensor-core math without sparsity. A device not in the
table has no MFU rather than a guessed one; CPUs have none.
"""

from __future__ import annotations

# (substring of the device name, bf16/fp16 dense peak FLOP/s); first match wins, most specific first.
_PEAKS: tuple[tuple[str, float], ...] = (
    ("GH200", 989.4e12),
    ("H200", 989.4e12),
    ("H100 NVL", 835e12),
    ("H100 PCIe", 756e12),
    ("H100", 989.4e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("A10G", 70e12),
    ("A10", 125e12),
    ("L4", 121e12),
    ("V100", 125e12),
)


def peak_flops(device_name: str | None) -> float | None:
    """Peak dense 16-bit FLOP/s of the named GPU, or ``None`` when it is not known."""
    if not device_name:
        return None
    for key, flops in _PEAKS:
        if key in device_name:
            return flops
    return None
