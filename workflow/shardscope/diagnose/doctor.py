"""``shardscope doctor``: check this node and tie each finding to the shortfall it explains.

Every check is a pure function of recorded inputs (:mod:`.pci`, :mod:`.host`, :func:`check_peer_pairs`);
this module only *reads* the live system (files, ``lspci``, ``systemd-detect-virt``, NVML, the
collectives worker) and hands the readings over. A check whose tool, privilege or hardware is
missing returns a ``skipped`` finding that says which.

The peer check: CUDA can report peer access as possible on a pair whose P2P writes are
silently wrong (platforms that do not support P2P through their root complex, ACS misconfigured,
patched drivers). For each GPU pair it runs the collectives worker with ``--check`` on those two
GPUs (``CUDA_VISIBLE_DEVICES=a,b``, NCCL choosing P2P where it can) and fails the pair when
peer access is reported OK but the result has wrong elements.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shardscope.diagnose.findings import Finding, skipped
from shardscope.diagnose.host import (
    check_iommu,
    check_nccl_env,
    check_numa_binding,
    check_virtualization,
)
from shardscope.diagnose.pci import (
    LinkReading,
    acs_bus_ids_from_topology,
    check_acs,
    check_pcie_links,
)

SCHEMA = "shardscope.doctor/1"
#: Seconds one external command may take before the doctor gives up on it.
COMMAND_TIMEOUT_S = 20.0


def read_text(path: str | os.PathLike[str]) -> str | None:
    """A file's text, or None when it is missing or unreadable."""
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def run_command(argv: Sequence[str], timeout_s: float = COMMAND_TIMEOUT_S) -> tuple[int, str] | None:
    """(exit status, stdout + stderr) of a command, or None when it is not installed or timed out."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.returncode, (done.stdout or "") + (done.stderr or "")


def check_peer_pairs(results: Sequence[Mapping[str, Any]], source: str = "collectives worker --check") -> Finding:
    """The peer finding from per-pair results ``{pair: [a, b], peer_access: bool, check_ok: bool|None, wrong: int|None, error}``."""
    if not results:
        return skipped("peer_check", source, "fewer than two GPUs: no pair to check")
    read = f"{source}: " + "; ".join(
        f"GPUs {r['pair'][0]},{r['pair'][1]} peer access {'yes' if r.get('peer_access') else 'no'}, check "
        + ("ok" if r.get("check_ok") else "failed" if r.get("check_ok") is False else f"not run ({r.get('error')})")
        for r in results)
    lying = [r for r in results if r.get("peer_access") and r.get("check_ok") is False]
    failed = [r for r in results if r.get("check_ok") is False and not r.get("peer_access")]
    if lying:
        pairs = ", ".join(f"{r['pair'][0]}-{r['pair'][1]} ({r.get('wrong')} wrong elements)" for r in lying)
        return Finding("peer_check", "fail", read, f"peer access reported but the collective result is wrong on {pairs}",
                       action="run with NCCL_P2P_DISABLE=1 on this node until fixed; check ACS/IOMMU (P2P through the root "
                              "complex) and the driver; do not trust results measured with P2P here",
                       explains="correctness and speed of every P2P transfer between these GPUs",
                       details={"pairs": [list(r["pair"]) for r in lying]})
    if failed:
        return Finding("peer_check", "fail", read, "a collective on a GPU pair returned wrong results",
                       action="check the GPUs and driver (nvidia-smi -q ECC, dmesg Xid errors)",
                       explains="correctness of every collective on these GPUs", details={"pairs": [list(r["pair"]) for r in failed]})
    return Finding("peer_check", "ok", read, "every pair's collective result is correct")


# --------------------------------------------------------------------------- live readers


def _nvml() -> tuple[Any, str | None]:
    """(the initialised pynvml module, None) or (None, why it is unavailable)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, None
    except Exception as exc:  # noqa: BLE001 -- no library, no driver, no GPU: NVMLError and ImportError alike
        return None, f"NVML unavailable ({type(exc).__name__}: {str(exc) or 'no NVIDIA driver'})"


def nvml_readings() -> tuple[list[LinkReading], list[str], str | None, str | None]:
    """(link readings, GPU bus ids, GPU virtualization mode, why NVML is unavailable) from NVML."""
    nvml, why = _nvml()
    if nvml is None:
        return [], [], None, why
    readings, bus_ids, mode = [], [], None
    try:
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            bus = nvml.nvmlDeviceGetPciInfo(h).busId
            bus = bus.decode() if isinstance(bus, bytes) else str(bus)
            bus_ids.append(bus)
            pstate = nvml.nvmlDeviceGetPerformanceState(h)
            readings.append(LinkReading(bus, nvml.nvmlDeviceGetCurrPcieLinkGeneration(h), nvml.nvmlDeviceGetMaxPcieLinkGeneration(h),
                                        nvml.nvmlDeviceGetCurrPcieLinkWidth(h), nvml.nvmlDeviceGetMaxPcieLinkWidth(h),
                                        f"P{pstate}", None))
            if mode is None:
                try:
                    mode = {0: "None", 1: "Pass-Through", 2: "vGPU", 3: "Host vGPU", 4: "Host vSGA"}.get(
                        nvml.nvmlDeviceGetVirtualizationMode(h), "unknown")
                except Exception:  # noqa: BLE001 -- older drivers lack the call
                    mode = None
    finally:
        nvml.nvmlShutdown()
    return readings, bus_ids, mode, None


def live_acs(bus_ids: Sequence[str]) -> Finding:
    """ACS from ``lspci -vvv`` of this machine (root shows the ACS capability)."""
    out = run_command(["lspci", "-vvv"])
    if out is None:
        return skipped("pcie_acs", "lspci -vvv", "lspci is not installed (package pciutils) or did not answer")
    rc, text = out
    if rc != 0:
        return skipped("pcie_acs", "lspci -vvv", f"lspci failed with status {rc}")
    if "ACSCtl" not in text and os.geteuid() != 0:
        return skipped("pcie_acs", "lspci -vvv", "ACS controls are only shown to root: run `sudo shardscope doctor`")
    return check_acs(text, bus_ids)


def live_iommu() -> Finding:
    """IOMMU mode from /proc/cmdline, the kernel log (dmesg, may need root) and /sys/class/iommu."""
    cmdline = read_text("/proc/cmdline")
    dmesg = run_command(["dmesg"])
    try:
        units = sorted(os.listdir("/sys/class/iommu"))
    except OSError:
        units = None
    return check_iommu(cmdline, dmesg[1] if dmesg and dmesg[0] == 0 else None, units)


def live_env() -> Finding:
    """NCCL variables NCCL would use here (environment and nccl.conf files)."""
    from shardscope.nccl_env import nccl_effective_env

    return check_nccl_env(nccl_effective_env(), "environment and nccl.conf")


def live_numa(topology: Mapping[str, Any]) -> Finding:
    """This process's allowed CPUs against the topology's GPUs, NUMA nodes and NICs."""
    if not hasattr(os, "sched_getaffinity"):
        return skipped("numa_binding", "sched_getaffinity", "this platform does not report CPU affinity")
    return check_numa_binding(set(os.sched_getaffinity(0)), topology)


def live_virtualization(gpu_mode: str | None) -> Finding:
    """Signs of a VM or container on this machine."""
    readings: dict[str, Any] = {}
    for flag, key in (("--vm", "detect_virt_vm"), ("--container", "detect_virt_container")):
        out = run_command(["systemd-detect-virt", flag])
        if out is not None:
            readings[key] = out[1].strip().splitlines()[0] if out[1].strip() else "none"
    for name in ("product_name", "sys_vendor"):
        value = read_text(f"/sys/class/dmi/id/{name}")
        if value is not None:
            readings[f"dmi_{name}"] = value.strip()
    cpuinfo = read_text("/proc/cpuinfo") or ""
    flags_line = next((line for line in cpuinfo.splitlines() if line.startswith("flags")), "")
    readings["cpu_hypervisor_flag"] = " hypervisor" in flags_line
    readings["dockerenv"] = os.path.exists("/.dockerenv")
    readings["cgroup"] = read_text("/proc/1/cgroup") or ""
    readings["gpu_virtualization_mode"] = gpu_mode
    try:
        st = os.statvfs("/dev/shm")
        readings["shm_bytes"] = st.f_frsize * st.f_blocks
    except OSError:
        pass
    return check_virtualization(readings, "systemd-detect-virt, /sys/class/dmi, /proc/cpuinfo, /.dockerenv, /proc/1/cgroup")


def pair_check_command(out: Path, job_id: str, port: int, cpu: bool = False) -> list[str]:
    """The torchrun command of one pair check: all_reduce 1-64 MiB with ``--check``, one timed iteration."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(port),
           "-m", "shardscope.collectives", "--op", "all_reduce", "--check", "-b", "1048576", "-e", "67108864",
           "-f", "8", "--warmup", "1", "--iters", "1", "--job-id", job_id, "--out", str(out)]
    return cmd + (["--cpu", "-e", "1048576"] if cpu else [])


def run_pair_check(pair: tuple[int, int], workdir: Path, port: int, peer_access: bool, cpu: bool = False,
                   timeout_s: float = 180.0) -> dict[str, Any]:
    """One pair's entry for :func:`check_peer_pairs`: run the worker on GPUs ``pair`` and read its check."""
    a, b = pair
    out = workdir / f"pair-{a}-{b}.json"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=f"{a},{b}")
    entry: dict[str, Any] = {"pair": [a, b], "peer_access": peer_access, "check_ok": None}
    try:
        done = subprocess.run(pair_check_command(out, f"doctor-peer-{a}-{b}", port, cpu), env=env, capture_output=True,
                              text=True, timeout=timeout_s, check=False)
        doc = json.loads(out.read_text()) if done.returncode == 0 and out.exists() else None
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        entry["error"] = type(exc).__name__
        return entry
    if doc is None:
        entry["error"] = f"worker exited with status {done.returncode}"
        return entry
    rows = doc.get("rows", [])
    entry["check_ok"] = bool(rows) and all(r.get("check_ok") for r in rows)
    entry["wrong"] = sum(int(r.get("wrong") or 0) for r in rows)
    return entry


def live_peer_checks(gpu_count: int, timeout_s: float = 180.0) -> Finding:
    """Run the collectives worker with ``--check`` on every GPU pair (module docstring)."""
    if gpu_count < 2:
        return skipped("peer_check", "torch.cuda", f"{gpu_count} GPU(s): a peer check needs two")
    import torch

    with tempfile.TemporaryDirectory(prefix="shardscope-doctor-") as tmp:
        results = [run_pair_check((a, b), Path(tmp), 29600 + n % 100, bool(torch.cuda.can_device_access_peer(a, b)),
                                  timeout_s=timeout_s)
                   for n, (a, b) in enumerate(itertools.combinations(range(gpu_count), 2))]
    return check_peer_pairs(results)


def run_doctor(topology: Mapping[str, Any] | None = None, peer_check: bool = True) -> dict[str, Any]:
    """All checks on this machine; the ``shardscope.doctor/1`` document. ``topology`` defaults to a fresh probe."""
    if topology is None:
        from shardscope.topology.detect import detect

        topology = detect().topology.to_dict()
    readings, bus_ids, gpu_mode, nvml_why = nvml_readings()
    bus_ids = bus_ids or acs_bus_ids_from_topology(topology)
    findings = [
        live_acs(bus_ids) if bus_ids else skipped("pcie_acs", "topology", "no GPU: ACS matters only on GPU (and NIC) paths"),
        live_iommu(),
        check_pcie_links(readings, "NVML") if readings else skipped("pcie_link", "NVML", nvml_why or "no GPU"),
        live_peer_checks(len(readings)) if peer_check and len(readings) >= 2 else skipped(
            "peer_check", "NVML/torch.cuda", "fewer than two GPUs: no pair to check" if peer_check else "disabled (--no-peer-check)"),
        live_env(),
        live_numa(topology),
        live_virtualization(gpu_mode),
    ]
    counts = {s: sum(f.status == s for f in findings) for s in ("ok", "info", "warn", "fail", "skipped")}
    return {
        "schema": SCHEMA, "kind": "doctor", "host": socket.gethostname(),
        "checked_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "topology": {"fabric": topology.get("fabric"), "gpu_count": topology.get("gpu_count", len(topology.get("gpus", [])))},
        "findings": [f.to_dict() for f in findings], "summary": counts,
    }


def format_report(doc: Mapping[str, Any]) -> str:
    """The doctor document as text: one block per finding (status, conclusion, what was read, what to do)."""
    lines = [f"shardscope doctor on {doc['host']} ({doc['topology']['fabric']}, {doc['topology']['gpu_count']} GPU(s))"]
    for f in doc["findings"]:
        lines.append(f"[{f['status'].upper():>7}] {f['check']}: {f['concluded']}")
        lines.append(f"          read: {f['read']}")
        if f.get("explains"):
            lines.append(f"          explains: {f['explains']}")
        if f.get("action"):
            lines.append(f"          do: {f['action']}")
    summary = ", ".join(f"{n} {s}" for s, n in doc["summary"].items() if n)
    lines.append(f"summary: {summary}")
    return "\n".join(lines) + "\n"
