"""Nominal per-direction bandwidth of the links reference runs name, each with its source.

These are vendor or specification numbers, not measurements: figure 1 draws them as
horizontal "nominal" lines so a reader sees how close a measured bus bandwidth gets to what
the link is sold as. GB/s means 1e9 bytes per second, as in nccl-tests.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NominalLink:
    """A link's nominal bandwidth in one direction and where that number comes from."""

    name: str
    per_direction_gbps: float
    source: str


#: Link key (as in ``reference/runs.json``) -> nominal per-direction bandwidth.
NOMINAL_LINKS: dict[str, NominalLink] = {
    "pcie3_x16": NominalLink(
        "PCIe 3.0 x16", 15.75,
        "PCI-SIG PCI Express Base Specification 3.0: 8 GT/s per lane, 128b/130b encoding, 16 lanes"),
    "pcie4_x16": NominalLink(
        "PCIe 4.0 x16", 31.5,
        "PCI-SIG PCI Express Base Specification 4.0: 16 GT/s per lane, 128b/130b encoding, 16 lanes"),
    "pcie5_x16": NominalLink(
        "PCIe 5.0 x16", 63.0,
        "PCI-SIG PCI Express Base Specification 5.0: 32 GT/s per lane, 128b/130b encoding, 16 lanes"),
    "ib_hdr_4x": NominalLink(
        "InfiniBand HDR (200 Gb/s)", 25.0,
        "NVIDIA ConnectX-6 VPI datasheet: HDR InfiniBand, 200 Gb/s per port, i.e. 25 GB/s per direction"),
    "nvlink2_v100": NominalLink(
        "NVLink 2 (V100 SXM2)", 150.0,
        "NVIDIA Tesla V100 datasheet: 300 GB/s NVLink bandwidth per GPU, both directions together"),
    "nvlink3_a100": NominalLink(
        "NVLink 3 (A100 SXM)", 300.0,
        "NVIDIA A100 datasheet: 600 GB/s NVLink bandwidth per GPU, both directions together"),
    "nvlink4_h100": NominalLink(
        "NVLink 4 (H100/H200 SXM)", 450.0,
        "NVIDIA H100 datasheet: 900 GB/s NVLink bandwidth per GPU, both directions together"),
}


def nominal_link(key: str | None) -> NominalLink | None:
    """The nominal link for ``key``, or None when the key is empty or unknown (nothing is drawn)."""
    return NOMINAL_LINKS.get(key) if key else None
