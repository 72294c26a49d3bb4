"""Host checks: IOMMU mode, NCCL variables that force slow paths, NUMA binding, virtualisation.

Each check is a pure function of recorded inputs (text or values) returning a
:class:`~shardscope.diagnose.findings.Finding`; :mod:`shardscope.diagnose.doctor` reads them
from the live system.

- **IOMMU**: with the IOMMU translating DMA (``intel_iommu=on``/``amd_iommu=on`` without
  ``iommu=pt``; kernel log ``iommu: Default domain type: Translated``), GPU peer traffic and
  GPU<->NIC RDMA go through address translation, and ACS redirect is typically on: NCCL's
  shallow pipelining loses most of the bandwidth (NVIDIA/nccl#2409: 13 -> 48 GB/s per rail after
  ``iommu=pt`` and clearing ACS). Passthrough (``iommu=pt``) or no IOMMU is fine.
- **NCCL variables**: values in the environment or nccl.conf that switch off fast transports
  or pin a slow algorithm (:data:`SLOW_SETTINGS`).
- **NUMA binding**: a process allowed only on CPUs of another NUMA node than its GPU pays the
  socket link for every host-staged copy; and a GPU whose nearest NIC is ``SYS``/``NODE``/``PHB``
  sends GPUDirect RDMA through the CPU (NVIDIA/nccl-tests#293).
- **Virtualisation**: in a VM the PCI tree NCCL sees is the hypervisor's (often flat, no
  switches, no NUMA), P2P may be disabled and ACS is usually on; in a container the host's
  tree is seen but ``/dev/shm`` may be too small for NCCL's SHM transport.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from shardscope.diagnose.findings import Finding

_DOMAIN = re.compile(r"iommu: Default domain type: (?P<type>\w+)(?P<cmdline> \(set via kernel command line\))?")


def parse_cmdline(cmdline: str) -> dict[str, str]:
    """``key=value`` (and bare ``key``) tokens of a kernel command line; the last occurrence wins."""
    out: dict[str, str] = {}
    for token in cmdline.split():
        if token == "--":
            break
        key, _, value = token.partition("=")
        out[key] = value
    return out


def check_iommu(cmdline: str | None, dmesg: str | None = None, iommu_units: Sequence[str] | None = None,
                source: str = "/proc/cmdline") -> Finding:
    """The IOMMU-mode finding from the kernel command line, kernel log and ``/sys/class/iommu`` (module docstring)."""
    read_parts = []
    args = parse_cmdline(cmdline or "")
    if cmdline is not None:
        iommu_args = {k: v for k, v in args.items() if "iommu" in k}
        read_parts.append(f"{source}: {iommu_args or 'no iommu argument'}")
    domain = None
    if dmesg and (m := _DOMAIN.search(dmesg)):
        domain = m["type"]
        read_parts.append(f"kernel log: Default domain type {domain}")
    if iommu_units is not None:
        read_parts.append(f"/sys/class/iommu: {len(iommu_units)} unit(s)" + (f" ({', '.join(iommu_units[:4])})" if iommu_units else ""))
    read = "; ".join(read_parts) or "nothing"
    passthrough = args.get("iommu") == "pt" or args.get("iommu.passthrough") == "1" or domain == "Passthrough"
    off = args.get("intel_iommu") == "off" or args.get("amd_iommu") == "off" or args.get("iommu") == "off"
    on_flag = args.get("intel_iommu") == "on" or args.get("amd_iommu") in ("on", "force_isolation")
    translated = domain == "Translated" or args.get("iommu.passthrough") == "0" or (on_flag and not passthrough)
    units = bool(iommu_units)
    details = {"passthrough": passthrough, "translated": translated and not passthrough, "iommu_units": len(iommu_units or [])}
    if passthrough:
        return Finding("iommu", "ok", read, "IOMMU in passthrough mode (iommu=pt): DMA is not translated", details=details)
    if iommu_units is not None and not iommu_units:
        return Finding("iommu", "ok", read, "no IOMMU unit in /sys/class/iommu: nothing translates device DMA (the kernel's "
                       "default domain type only applies where an IOMMU exists)", details=details)
    if translated or (units and not off):
        why = "the kernel log says DMA is translated" if domain == "Translated" else (
            "the IOMMU is enabled without iommu=pt" if on_flag or args.get("iommu.passthrough") == "0"
            else "IOMMU units are present and nothing sets passthrough")
        status = "fail" if domain == "Translated" or on_flag else "warn"
        return Finding("iommu", status, read, f"IOMMU translates device DMA: {why}",
                       action="add iommu=pt to the kernel command line (keeps the IOMMU for VMs, passes host DMA through); "
                              "clear ACS redirect on the GPU/NIC bridges too (NVIDIA/nccl#2409)",
                       explains="GPU<->GPU P2P over PCIe and GPU<->NIC GPUDirect RDMA", details=details)
    if off or (cmdline is not None and not units):
        return Finding("iommu", "ok", read, "no IOMMU translating device DMA", details=details)
    return Finding("iommu", "info", read, "IOMMU mode unknown (no kernel log or /sys/class/iommu reading)", details=details)


#: NCCL variables that force a slow path: name -> (predicate on the value, what it costs).
SLOW_SETTINGS: dict[str, tuple[Any, str]] = {
    "NCCL_P2P_DISABLE": (lambda v: v.strip() not in ("", "0"), "no P2P between GPUs: NVLink and PCIe P2P unused, copies staged through host memory (SHM)"),
    "NCCL_P2P_LEVEL": (lambda v: v.strip().upper() in ("LOC", "0"), "P2P only within one GPU: every GPU pair goes through SHM or the network"),
    "NCCL_SHM_DISABLE": (lambda v: v.strip() not in ("", "0"), "no shared-memory transport: GPU pairs without P2P fall back to the network (sockets)"),
    "NCCL_IB_DISABLE": (lambda v: v.strip() not in ("", "0"), "no InfiniBand/RoCE: inter-node traffic over TCP sockets"),
    "NCCL_NET": (lambda v: v.strip().lower() == "socket", "network forced to TCP sockets"),
    "NCCL_NVLS_ENABLE": (lambda v: v.strip() == "0", "NVLink SHARP off: all-reduce on NVSwitch loses its in-switch reduction"),
    "NCCL_ALGO": (lambda v: bool(v.strip()), "algorithm pinned: NCCL cannot pick the fastest per size"),
    "NCCL_PROTO": (lambda v: bool(v.strip()), "protocol pinned: LL/LL128 cap large-message bandwidth, Simple raises small-message latency"),
    "NCCL_NET_GDR_LEVEL": (lambda v: v.strip().upper() in ("0", "LOC"), "GPUDirect RDMA off: network traffic staged through host memory"),
    "NCCL_CUMEM_ENABLE": (lambda v: v.strip() == "0", "cuMem off: P2P/IPC legacy path (slower in NVIDIA/nccl#2409)"),
    "NCCL_IB_SPLIT_DATA_ON_QPS": (lambda v: v.strip() == "1", "each message striped over all QPs: shrinks the in-flight window (~2x slower on RoCE, NVIDIA/nccl#2409)"),
    "NCCL_MAX_NCHANNELS": (lambda v: v.strip().isdigit() and int(v) < 4, "few channels: too few SMs drive the links"),
    "NCCL_MAX_CTAS": (lambda v: v.strip().isdigit() and int(v) < 4, "few CTAs: too few SMs drive the links"),
    "NCCL_IGNORE_CPU_AFFINITY": (lambda v: v.strip() == "1", "NCCL ignores the GPU's CPU affinity: proxy threads may run on the far socket"),
    "NCCL_BUFFSIZE": (lambda v: v.strip().isdigit() and int(v) < (1 << 20), "small staging buffers: fewer bytes in flight per step"),
}


def check_nccl_env(effective: Mapping[str, Any], source: str = "environment") -> Finding:
    """The NCCL-variables finding: ``effective`` maps names to values (or to ``{value, source}`` as
    :func:`shardscope.nccl_env.nccl_effective_env` returns them)."""
    values = {k: (v.get("value") if isinstance(v, Mapping) else v) for k, v in effective.items() if k.startswith("NCCL_")}
    origin = {k: (v.get("source") if isinstance(v, Mapping) else source) for k, v in effective.items() if k.startswith("NCCL_")}
    read = f"{source}: " + (", ".join(f"{k}={v}" for k, v in sorted(values.items())) or "no NCCL_* variable set")
    slow = {k: SLOW_SETTINGS[k][1] for k, v in values.items() if k in SLOW_SETTINGS and v is not None and SLOW_SETTINGS[k][0](str(v))}
    if not slow:
        return Finding("nccl_env", "ok", read, "no NCCL variable forces a slow path", details={"variables": values})
    text = "; ".join(f"{k}={values[k]} ({origin[k]}): {why}" for k, why in sorted(slow.items()))
    return Finding("nccl_env", "warn", read, text,
                   action="unset these unless a benchmark labels them on purpose (shardscope's pcie transport sets "
                          "NCCL_P2P_DISABLE=1 and NCCL_NVLS_ENABLE=0 only for its own jobs)",
                   explains="the transports or algorithms NCCL may use: every collective of the job",
                   details={"variables": values, "slow": sorted(slow)})


def parse_cpu_list(text: str | None) -> set[int]:
    """CPUs of a Linux CPU list (``0-23,48-71``); empty for an empty or unreadable list."""
    cpus: set[int] = set()
    for part in (text or "").replace(" ", "").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            cpus.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            return set()
    return cpus


def check_numa_binding(allowed_cpus: set[int], topology: Mapping[str, Any], source: str = "sched_getaffinity") -> Finding:
    """The NUMA finding: the process's CPUs against each GPU's local CPUs, and each GPU's path to its NIC."""
    gpus = [g for g in topology.get("gpus", []) if isinstance(g, Mapping)]
    numa = {int(n["id"]): parse_cpu_list(n.get("cpus")) for n in topology.get("numa_nodes", []) if isinstance(n, Mapping) and "id" in n}
    spans = sorted(i for i, cpus in numa.items() if cpus & allowed_cpus)
    read = f"{source}: CPUs {_compact(allowed_cpus)}; NUMA nodes {sorted(numa)}; {len(gpus)} GPU(s)"
    problems, details = [], {"allowed_cpus": _compact(allowed_cpus), "numa_nodes_spanned": spans}
    far_gpus = []
    for g in gpus:
        local = parse_cpu_list(g.get("cpu_affinity")) or numa.get(g.get("numa_node"), set())  # type: ignore[arg-type]
        if local and not (local & allowed_cpus):
            far_gpus.append(g.get("index"))
    if far_gpus:
        problems.append(f"the process may run only on CPUs {_compact(allowed_cpus)}, none local to GPU(s) {far_gpus}: "
                        "host-staged copies and NCCL's proxy threads cross the socket link")
    far_nic = [(g.get("index"), g.get("nearest_nic_code")) for g in gpus
               if str(g.get("nearest_nic_code") or "").upper() in ("SYS", "NODE", "PHB")]
    if far_nic:
        problems.append("GPU(s) " + ", ".join(f"{i} ({c})" for i, c in far_nic) + " reach their nearest NIC only through "
                        "the CPU: GPUDirect RDMA crosses the host bridge or the socket link (NVIDIA/nccl-tests#293)")
    details["gpus_far_from_process"] = far_gpus
    details["gpus_far_from_nic"] = [i for i, _ in far_nic]
    if problems:
        return Finding("numa_binding", "warn", read, "; ".join(problems),
                       action="bind each rank to its GPU's NUMA node (torchrun --local-ranks-filter/numactl, or leave "
                              "NCCL's automatic affinity on); put multi-node jobs on GPUs that share a PCIe switch with a NIC",
                       explains="host-staged (SHM) copies and GPU<->NIC traffic", details=details)
    if not gpus:
        return Finding("numa_binding", "info", read,
                       f"no GPU: the process may run on NUMA node(s) {spans}; nothing to be far from", details=details)
    return Finding("numa_binding", "ok", read, "the process may run on CPUs local to every GPU, and NICs are near their GPUs",
                   details=details)


def _compact(cpus: set[int]) -> str:
    """``{0,1,2,5}`` -> ``0-2,5``."""
    runs: list[list[int]] = []
    for c in sorted(cpus):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)


#: DMI product/vendor strings of hypervisors (systemd's detect-virt table, src/basic/virt.c).
VM_DMI = ("KVM", "OpenStack", "KubeVirt", "Amazon EC2", "QEMU", "VMware", "VMW", "innotek GmbH", "VirtualBox", "Xen",
          "Bochs", "Parallels", "BHYVE", "Hyper-V", "Apple Virtualization", "Google Compute Engine", "Virtual Machine")


def check_virtualization(readings: Mapping[str, Any], source: str = "host") -> Finding:
    """The virtualisation finding from recorded readings.

    Keys (all optional): ``detect_virt_vm`` and ``detect_virt_container`` (``systemd-detect-virt
    --vm/--container`` output, ``none`` when bare), ``dmi_product_name``, ``dmi_sys_vendor``,
    ``cpu_hypervisor_flag`` (bool), ``dockerenv`` (bool), ``cgroup`` (``/proc/1/cgroup`` text),
    ``gpu_virtualization_mode`` (NVML/nvidia-smi ``Virtualization Mode``), ``shm_bytes``.
    """
    vm_signs, ct_signs = [], []
    vm = str(readings.get("detect_virt_vm") or "").strip()
    ct = str(readings.get("detect_virt_container") or "").strip()
    if vm and vm != "none":
        vm_signs.append(f"systemd-detect-virt --vm: {vm}")
    if ct and ct != "none":
        ct_signs.append(f"systemd-detect-virt --container: {ct}")
    dmi = " ".join(str(readings.get(k) or "") for k in ("dmi_product_name", "dmi_sys_vendor"))
    if hit := next((v for v in VM_DMI if v.lower() in dmi.lower()), None):
        vm_signs.append(f"DMI names {hit!r}")
    if readings.get("cpu_hypervisor_flag"):
        vm_signs.append("CPU flag 'hypervisor'")
    mode = str(readings.get("gpu_virtualization_mode") or "").strip()
    if mode and mode.lower() not in ("none", "n/a"):
        vm_signs.append(f"GPU virtualization mode {mode!r}")
    if readings.get("dockerenv"):
        ct_signs.append("/.dockerenv exists")
    cgroup = str(readings.get("cgroup") or "")
    if re.search(r"docker|kubepods|containerd|lxc|libpod", cgroup):
        ct_signs.append("/proc/1/cgroup names a container runtime")
    read = f"{source}: " + ("; ".join(vm_signs + ct_signs) or "no sign of a VM or container")
    details = {"vm": bool(vm_signs), "container": bool(ct_signs), "vm_signs": vm_signs, "container_signs": ct_signs}
    concl, action = [], []
    if vm_signs:
        concl.append("a virtual machine: NCCL sees the hypervisor's PCI tree (often flat, without switches or NUMA), "
                     "P2P may be disabled and ACS is usually on")
        action.append("give NCCL the host's topology (NCCL_TOPO_FILE), pass GPUs with their PCIe switches and enable "
                      "ATS/ACS settings per the NVIDIA VM guide; compare with a bare-metal run")
    shm = readings.get("shm_bytes")
    small = isinstance(shm, int) and shm < (1 << 30)
    if ct_signs:
        concl.append("a container" + (f" with a {shm >> 20} MiB /dev/shm, too small for NCCL's SHM transport" if small else ""))
        action.append("run with --ipc=host or --shm-size of several GiB so SHM and CUDA IPC work")
    if not concl:
        return Finding("virtualization", "ok", read, "bare metal: NCCL sees the real PCI tree", details=details)
    return Finding("virtualization", "warn" if vm_signs or small else "info", read, "; ".join(concl), action="; ".join(action),
                   explains="the topology NCCL detects and whether P2P works" if vm_signs else None, details=details)
