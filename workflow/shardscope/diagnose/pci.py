"""PCIe checks: ACS on the bridges in the GPU paths, and GPU links below their maximum.

**ACS** (Access Control Services) on a bridge with request/completion redirect on
(``ACSCtl: ReqRedir+ CmpltRedir+``) sends every peer-to-peer transaction up to the root
complex (and through the IOMMU), so GPU<->GPU P2P over PCIe and GPU<->NIC GPUDirect RDMA slow
down or hang (NCCL troubleshooting guide, "PCI Access Control Services"; NVIDIA/nccl#304,
#2079, #2409). ``SrcValid+`` alone only validates requester ids. A bridge is *in a GPU's path*
when the GPU's bus lies in the bridge's ``secondary..subordinate`` range (``lspci -vvv``
``Bus:`` line). Output of ``lspci -vvv | grep ACSCtl`` (no device headers) is accepted too:
then which bridges carry GPUs is unknown.

**Link state**: NVML (``nvmlDeviceGetCurr/MaxPcieLinkGeneration/Width``), ``nvidia-smi -q``
(``GPU Link Info``) or sysfs (``current_link_width``…). A width below the maximum halves (x8) or
quarters (x4) every PCIe transfer; a generation below the maximum does too, but GPUs drop the
generation when idle to save power, so it only counts at performance state P0 (or when the
state is unknown it is reported as information).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shardscope.diagnose.findings import Finding

_DEVICE = re.compile(r"^(?:(?P<domain>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})\.(?P<fn>[0-7])\s+(?P<desc>.+)$")
_BUS = re.compile(r"Bus: primary=([0-9a-fA-F]+), secondary=([0-9a-fA-F]+), subordinate=([0-9a-fA-F]+)")
_ACSCTL = re.compile(r"ACSCtl:\s*(?P<flags>(?:\w+[+-]\s*)+)")
_LNKCAP = re.compile(r"LnkCap:.*?Speed (?P<speed>[\d.]+)GT/s.*?Width x(?P<width>\d+)")
_LNKSTA = re.compile(r"LnkSta:\s*Speed (?P<speed>[\d.]+)GT/s(?P<down> \(downgraded\))?, Width x(?P<width>\d+)")
_REDIRECT_FLAGS = ("ReqRedir", "CmpltRedir")

#: PCIe transfer rate (GT/s) -> generation.
GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


@dataclass
class PciDevice:
    """One device block of ``lspci -vvv`` (fields the checks use)."""

    bdf: str
    description: str
    domain: int = 0
    bus: int = 0
    secondary: int | None = None
    subordinate: int | None = None
    acs: dict[str, bool] | None = None
    link_cap: tuple[float, int] | None = None
    link_sta: tuple[float, int] | None = None

    @property
    def is_bridge(self) -> bool:
        """A bridge (has a bus range) or a port."""
        return self.secondary is not None or "bridge" in self.description.lower()

    @property
    def acs_redirect(self) -> bool:
        """Request or completion redirect enabled: peer traffic goes up to the root complex."""
        return bool(self.acs) and any(self.acs.get(f) for f in _REDIRECT_FLAGS)

    @property
    def acs_any(self) -> bool:
        """Any ACS control bit enabled (``+`` anywhere in ACSCtl)."""
        return bool(self.acs) and any(self.acs.values())

    def covers(self, domain: int, bus: int) -> bool:
        """Whether ``domain:bus`` lies behind this bridge."""
        return self.secondary is not None and self.domain == domain and self.secondary <= bus <= (self.subordinate or self.secondary)


@dataclass
class LspciReport:
    """Parsed ``lspci -vvv`` output: device blocks, and ACSCtl lines that had no device header."""

    devices: list[PciDevice] = field(default_factory=list)
    orphan_acs: list[dict[str, bool]] = field(default_factory=list)


def _flags(text: str) -> dict[str, bool]:
    return {m[1]: m[2] == "+" for m in re.finditer(r"(\w+)([+-])", text)}


def parse_lspci(text: str) -> LspciReport:
    """Parse ``lspci -vvv`` (or ``-vvvxxx``, or its ``grep ACSCtl``) into :class:`LspciReport`."""
    report = LspciReport()
    current: PciDevice | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        if not raw[:1].isspace() and (m := _DEVICE.match(line.strip())):
            current = PciDevice(bdf=line.split()[0], description=m["desc"], domain=int(m["domain"] or "0", 16),
                                bus=int(m["bus"], 16))
            report.devices.append(current)
            continue
        if m := _ACSCTL.search(line):
            flags = _flags(m["flags"])
            if current is None:
                report.orphan_acs.append(flags)
            else:
                current.acs = flags
            continue
        if current is None:
            continue
        if m := _BUS.search(line):
            current.secondary, current.subordinate = int(m[2], 16), int(m[3], 16)
        elif m := _LNKCAP.search(line):
            current.link_cap = (float(m["speed"]), int(m["width"]))
        elif m := _LNKSTA.search(line):
            current.link_sta = (float(m["speed"]), int(m["width"]))
    return report


def _split_bus_id(bus_id: str) -> tuple[int, int] | None:
    """(domain, bus) of ``0000:3b:00.0``, ``00000000:3B:00.0`` or ``3b:00.0``; None when unreadable."""
    m = re.match(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):[0-9a-fA-F]{2}(?:\.[0-7])?$", bus_id.strip())
    return (int(m[1] or "0", 16), int(m[2], 16)) if m else None


def check_acs(lspci_text: str, gpu_bus_ids: Sequence[str] = (), source: str = "lspci -vvv") -> Finding:
    """The ACS finding: redirect on a bridge in a GPU path fails; elsewhere it warns (module docstring)."""
    report = parse_lspci(lspci_text)
    with_acs = [d for d in report.devices if d.acs is not None]
    read = f"{source}: {len(report.devices)} device(s), {len(with_acs) + len(report.orphan_acs)} ACSCtl line(s)"
    if not with_acs and not report.orphan_acs:
        return Finding("pcie_acs", "info", read, "no ACSCtl line: no bridge exposes ACS (or lspci ran without root, "
                       "which hides extended capabilities)", action="run `sudo lspci -vvv` to see ACS controls")
    gpus = [g for g in (_split_bus_id(b) for b in gpu_bus_ids) if g is not None]
    on_path = {d.bdf: [b for b, g in zip(gpu_bus_ids, gpus, strict=False) if d.covers(*g)] for d in with_acs}
    redirect = [d for d in with_acs if d.acs_redirect]
    redirect_gpu = [d for d in redirect if on_path[d.bdf]]
    orphans_on = [f for f in report.orphan_acs if any(f.values())]
    orphans_redirect = [f for f in report.orphan_acs if any(f.get(x) for x in _REDIRECT_FLAGS)]
    details: dict[str, Any] = {
        "bridges_with_acs_redirect": [d.bdf for d in redirect],
        "bridges_with_acs_on": [d.bdf for d in with_acs if d.acs_any],
        "gpu_paths": {bdf: gpus_ for bdf, gpus_ in on_path.items() if gpus_},
        "acsctl_lines_without_device": len(report.orphan_acs),
        "acsctl_lines_with_bits_on": len(orphans_on),
    }
    explains = "GPU<->GPU P2P over PCIe and GPU<->NIC GPUDirect RDMA (redirected through the root complex)"
    fix = ("disable ACS redirect on these bridges: in the BIOS (ACS / IO virtualization), `pci=noacs` on the kernel "
           "command line, or at runtime `setpci -s <bdf> ECAP_ACS+6.w=0000` (as root, until reboot); keep it on only "
           "where VMs need device isolation")
    if redirect_gpu:
        names = ", ".join(f"{d.bdf} (above {', '.join(on_path[d.bdf])})" for d in redirect_gpu)
        return Finding("pcie_acs", "fail", read, f"ACS request/completion redirect is on in the GPU path: {names}",
                       action=fix, explains=explains, details=details)
    if redirect or orphans_redirect:
        where = ", ".join(d.bdf for d in redirect) or f"{len(orphans_redirect)} ACSCtl line(s) without device headers"
        if gpus and redirect and not orphans_redirect:
            known = " (none of them is above a known GPU)"
        else:
            known = "; which bridges carry GPUs is unknown: pass full `lspci -vvv` output and the GPUs' bus ids"
        return Finding("pcie_acs", "warn", read, f"ACS redirect is on at {where}{known}", action=fix, explains=explains,
                       details=details)
    if orphans_on or any(d.acs_any for d in with_acs):
        return Finding("pcie_acs", "info", read, "ACS source validation (SrcValid+) is on but no redirect: peer traffic "
                       "is not sent to the root complex", details=details)
    return Finding("pcie_acs", "ok", read, "ACS controls are all off", details=details)


@dataclass(frozen=True)
class LinkReading:
    """One GPU's PCIe link: current and maximum generation and width, and its performance state."""

    bus_id: str
    gen_current: int | None
    gen_max: int | None
    width_current: int | None
    width_max: int | None
    pstate: str | None = None
    name: str | None = None


def _int(text: str | None) -> int | None:
    m = re.search(r"\d+", text or "")
    return int(m[0]) if m else None


def parse_nvidia_smi_q(text: str) -> list[LinkReading]:
    """The link readings of every GPU in ``nvidia-smi -q`` output (``GPU Link Info`` sections)."""
    readings: list[LinkReading] = []
    gpu: dict[str, Any] | None = None
    section: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if m := re.match(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$", line):
            if gpu:
                readings.append(LinkReading(**gpu))
            gpu = {"bus_id": m[1], "gen_current": None, "gen_max": None, "width_current": None, "width_max": None,
                   "pstate": None, "name": None}
            section = None
            continue
        if gpu is None:
            continue
        key, _, value = (part.strip() for part in line.partition(":"))
        if line in ("PCIe Generation", "Link Width"):
            section = line
        elif key == "Product Name":
            gpu["name"] = value
        elif key == "Performance State":
            gpu["pstate"] = value
        elif section and key in ("Max", "Current"):
            gpu[("gen_" if section == "PCIe Generation" else "width_") + key.lower()] = _int(value)
            if section == "Link Width" and key == "Current":
                section = None
    if gpu:
        readings.append(LinkReading(**gpu))
    return readings


def parse_sysfs_link(text: str) -> list[LinkReading]:
    """Link readings from ``tail -v -n +1 /sys/bus/pci/devices/<bdf>/*_link_*`` output."""
    values: dict[str, dict[str, str]] = {}
    current: tuple[str, str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if m := re.match(r"^==> /sys/bus/pci/devices/([^/]+)/(\w+) <==$", line):
            current = (m[1], m[2])
        elif current and line:
            values.setdefault(current[0], {})[current[1]] = line
            current = None
    out = []
    for bdf, v in values.items():
        speeds = [GEN_BY_GTS.get(float(s.split()[0])) if s and s.split()[0].replace(".", "").isdigit() else None
                  for s in (v.get("current_link_speed"), v.get("max_link_speed"))]
        out.append(LinkReading(bdf, speeds[0], speeds[1], _int(v.get("current_link_width")), _int(v.get("max_link_width"))))
    return out


def check_pcie_links(readings: Iterable[LinkReading], source: str) -> Finding:
    """The link-state finding (module docstring): width below max fails; generation below max fails at P0."""
    items = list(readings)
    if not items:
        return Finding("pcie_link", "skipped", source, "no GPU link readings")
    read = f"{source}: " + "; ".join(
        f"{r.bus_id} Gen{r.gen_current}/{r.gen_max} x{r.width_current}/x{r.width_max}" + (f" {r.pstate}" if r.pstate else "")
        for r in items)
    narrow = [r for r in items if r.width_current and r.width_max and r.width_current < r.width_max]
    busy = [r for r in items if r.gen_current and r.gen_max and r.gen_current < r.gen_max and r.pstate == "P0"]
    idle = [r for r in items if r.gen_current and r.gen_max and r.gen_current < r.gen_max and r.pstate != "P0"]
    explains = "every PCIe transfer of these GPUs (P2P over PCIe, SHM staging, GPU<->NIC), scaled by current/max"
    if narrow or busy:
        parts = [f"{r.bus_id} runs x{r.width_current} of x{r.width_max}" for r in narrow]
        parts += [f"{r.bus_id} runs Gen{r.gen_current} of Gen{r.gen_max} while busy (P0)" for r in busy]
        return Finding("pcie_link", "fail", read, "; ".join(parts),
                       action="reseat the GPU or move it to a full x16 slot, check riser/bifurcation and BIOS link "
                              "settings; in a VM the hypervisor may expose a narrower link",
                       explains=explains, details={"narrow": [r.bus_id for r in narrow], "slow_busy": [r.bus_id for r in busy]})
    if idle:
        return Finding("pcie_link", "info", read,
                       f"{', '.join(r.bus_id for r in idle)} below the maximum generation while not busy: GPUs lower the "
                       "link generation when idle to save power", action="read the link again while a collective runs")
    return Finding("pcie_link", "ok", read, "every GPU link runs at its maximum generation and width")


def acs_bus_ids_from_topology(topology: Mapping[str, Any] | None) -> list[str]:
    """The GPUs' PCI bus ids in a topology.json document (empty when it has none)."""
    return [str(g["pci_bus_id"]) for g in (topology or {}).get("gpus", []) if g.get("pci_bus_id")]
