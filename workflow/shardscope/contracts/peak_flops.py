"""Dense peak matrix FLOP/s by GPU name, for MFU (model FLOPs utilisation).

Vendor datasheet numbers for 16-bit (bf16, else fp16) tensor math with fp32 accumulation and
without sparsity, per GPU. GeForce cards are listed at their fp32-accumulate rate (the rate
mixed-precision training gets; the fp16-accumulate rate is twice it). GPUs without 16-bit
tensor cores (GeForce 10, P100) are listed at their fp16/fp32 vector rate. A device not in the
table has no MFU rather than a guessed one; CPUs have none.

Sources: NVIDIA datasheets (A100, H100, H200, H800, H20, L40S, L40, L20, L4, A10, A10G, A40,
RTX A6000/A5000, T4, V100, B200, B300 and GB200 NVL72: per-GPU value = the board's dense
figure, half the "with sparsity" one), the Ada and Blackwell GeForce/RTX PRO architecture
white papers (RTX 4090 165.2, RTX 5090 209.5, RTX 6000 Ada 364.2, RTX PRO 6000 503.8 TFLOP/s),
the Ampere GA102 and Turing white papers (RTX 3090 71, RTX 3080 59.5, RTX 2080 Ti 56.9; TITAN RTX and
Quadro RTX 6000/8000 130.5, full-rate fp32 accumulate), the Ada white paper (RTX 4080 97.5), the A30
datasheet (165 bf16 dense), AMD Instinct datasheets (MI300X/MI325X 1307.4, MI300A 980.6, MI210 181, MI100 92.3 bf16
TFLOP/s; MI250X 383 and MI250 362.1 per OAM, listed per GCD, 191.5 and 181.05: ROCm and torch enumerate each of an
OAM's two GCDs as one GPU).
"""

from __future__ import annotations

# (substring of the device name, bf16/fp16 dense peak FLOP/s); first match wins, most specific first.
_PEAKS: tuple[tuple[str, float], ...] = (
    ("GB300", 2500e12),
    ("B300", 2250e12),
    ("GB200", 2500e12),
    ("B200", 2250e12),
    ("GH200", 989.4e12),
    ("H200", 989.4e12),
    ("H100 NVL", 835e12),
    ("H100 PCIe", 756e12),
    ("H100", 989.4e12),
    ("H800", 989.4e12),
    ("H20", 148e12),
    ("A800", 312e12),
    ("A100", 312e12),
    ("RTX PRO 6000", 503.8e12),
    ("RTX 6000 Ada", 364.2e12),
    ("L40S", 362e12),
    ("L40", 181e12),
    ("L20", 119.5e12),
    ("A10G", 70e12),
    ("A10", 125e12),
    ("L4", 121e12),
    ("V100", 125e12),
    ("T4", 65e12),
    ("RTX 4090", 165.2e12),
    ("RTX 5090", 209.5e12),
    ("RTX 3090", 71e12),
    ("3090", 71e12),
    ("RTX 2080 Ti", 56.9e12),
    ("TITAN RTX", 130.5e12),
    ("Quadro RTX 8000", 130.5e12),
    ("Quadro RTX 6000", 130.5e12),
    ("A30", 165e12),
    ("RTX 4080", 97.5e12),
    ("RTX 3080", 59.5e12),
    ("MI100", 92.3e12),
    ("A6000", 154.8e12),
    ("A5000", 111.1e12),
    ("A40", 149.7e12),
    ("P100", 18.7e12),
    ("GTX 1080", 11.3e12),
    ("1080", 11.3e12),
    ("MI325X", 1307.4e12),
    ("MI300X", 1307.4e12),
    ("MI300A", 980.6e12),
    ("MI250X", 191.5e12),
    ("MI250", 181.05e12),
    ("MI210", 181e12),
)


#: Dense fp32 FLOP/s on the CUDA cores (non-tensor; AMD: fp32 vector), per GPU, from the same datasheets and white
#: papers. A float32 run's matmuls run here: TF32 tensor math is off by default for matmuls since PyTorch 1.12
#: (``torch.backends.cuda.matmul.allow_tf32 = False``), and Volta/Turing have none.
_FP32_PEAKS: tuple[tuple[str, float], ...] = (
    ("GB300", 80e12), ("B300", 75e12), ("GB200", 80e12), ("B200", 75e12),
    ("GH200", 67e12), ("H200", 67e12), ("H100 NVL", 60e12), ("H100 PCIe", 51e12), ("H100", 67e12),
    ("H800", 67e12), ("H20", 44e12), ("A800", 19.5e12), ("A100", 19.5e12),
    ("RTX PRO 6000", 125e12), ("RTX 6000 Ada", 91.1e12), ("L40S", 91.6e12), ("L40", 90.5e12), ("L20", 59.8e12),
    ("A10G", 31.2e12), ("A10", 31.2e12), ("L4", 30.3e12), ("V100", 15.7e12), ("T4", 8.1e12),
    ("RTX 4090", 82.6e12), ("RTX 5090", 104.8e12), ("RTX 3090", 35.6e12), ("3090", 35.6e12),
    ("RTX 2080 Ti", 13.4e12), ("TITAN RTX", 16.3e12), ("Quadro RTX 8000", 16.3e12), ("Quadro RTX 6000", 16.3e12),
    ("A30", 10.3e12), ("RTX 4080", 48.7e12), ("RTX 3080", 29.8e12), ("MI100", 23.1e12), ("A6000", 38.7e12),
    ("A5000", 27.8e12), ("A40", 37.4e12), ("P100", 9.3e12), ("GTX 1080", 11.3e12), ("1080", 11.3e12),
    ("MI325X", 163.4e12), ("MI300X", 163.4e12), ("MI300A", 122.6e12), ("MI250X", 23.95e12), ("MI250", 22.65e12),
    ("MI210", 22.6e12),
)

#: fp32 over dense 16-bit peak per architecture, for a GPU whose own fp32 rate the table lacks (a ``--peak-tflops``
#: device): the ratio of that generation's datacenter part above (V100 15.7/125, TITAN RTX 16.3/130.5, A100
#: 19.5/312, A10 31.2/125, L40S 91.6/362, H100 67/989.4, B200 75/2250, MI300X 163.4/1307.4, P100 9.3/18.7).
FP32_SHARE_BY_ARCH: dict[str, float] = {
    "pascal": 0.5, "volta": 0.126, "turing": 0.125, "ampere": 0.0625, "ga10x": 0.25, "ada": 0.25,
    "hopper": 0.068, "blackwell": 0.033, "cdna": 0.125,
}


def _lookup(table: tuple[tuple[str, float], ...], device_name: str | None) -> float | None:
    if not device_name:
        return None
    return next((flops for key, flops in table if key in device_name), None)


def float32_peak_flops(device_name: str | None, peak16: float, arch: str = "unknown") -> float:
    """Dense fp32 FLOP/s of a GPU whose dense 16-bit peak is ``peak16``: the table's value where the device is known,
    else ``peak16`` times its architecture's fp32 share (:data:`FP32_SHARE_BY_ARCH`; 1/8 for an unknown one).

    A float32 step is priced at this rate: without tensor-core math its matmuls run on the CUDA cores, 4-30x
    slower than the 16-bit peak a mixed-precision run reaches.
    """
    return _lookup(_FP32_PEAKS, device_name) or peak16 * FP32_SHARE_BY_ARCH.get(arch, 0.125)


def peak_flops(device_name: str | None) -> float | None:
    """Peak dense 16-bit FLOP/s of the named GPU, or ``None`` when it is not known."""
    return _lookup(_PEAKS, device_name)
