"""The small device layer: process-group setup, timing and memory for GPU and CPU alike.

Everything device-specific lives here so that collectives and training run the same code
on a GPU node (NCCL, CUDA events, CUDA memory stats) and on a laptop (gloo, a barrier plus
``perf_counter``, process RSS).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import resource
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from shardscope.nccl_env import nccl_conf_files, nccl_effective_env  # noqa: F401 - re-exported: part of this layer

#: Environment variables that change what NCCL or gloo do; stored with every result.
_COMM_ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MASTER_")


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in the job: rank, world size and the device it owns."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str

    @property
    def is_cuda(self) -> bool:
        """True when this rank computes on a CUDA device."""
        return self.device.type == "cuda"


def cpu_threads_per_rank(local_world_size: int) -> int:
    """Intra-op threads for one CPU rank: the usable cores shared evenly among local ranks.

    Snakemake sets OMP_NUM_THREADS to the rule's thread count and torchrun passes it on to
    every rank, which would oversubscribe the cores; SHARDSCOPE_THREADS_PER_RANK overrides.
    """
    explicit = os.environ.get("SHARDSCOPE_THREADS_PER_RANK")
    if explicit:
        return max(int(explicit), 1)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(usable // max(local_world_size, 1), 1)


def init_distributed(prefer_gpu: bool = True, timeout_s: float | None = None) -> DistContext:
    """Join the process group torchrun prepared (NCCL on GPUs, gloo on CPUs) and pin the device.

    ``timeout_s`` bounds every collective of the group (gloo raises, NCCL's watchdog aborts),
    so a rank that never joins ends the job instead of hanging it; None keeps torch's default.
    """
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout_s}")
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size)))
    use_cuda = prefer_gpu and torch.cuda.is_available()
    if use_cuda:
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
        threads = cpu_threads_per_rank(local_world_size)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)
    if not dist.is_initialized():
        if "MASTER_ADDR" not in os.environ:
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29500")
        kwargs: dict[str, Any] = {"backend": backend, "rank": rank, "world_size": world_size}
        if use_cuda:
            kwargs["device_id"] = device
        if timeout_s is not None:
            kwargs["timeout"] = _dt.timedelta(seconds=timeout_s)
        dist.init_process_group(**kwargs)
    return DistContext(rank, world_size, local_rank, local_world_size, device, backend)


def synchronize(ctx: DistContext) -> None:
    """Wait for this rank's queued device work to finish (a no-op on CPU, where ops are eager)."""
    if ctx.is_cuda:
        torch.cuda.synchronize(ctx.device)


def timing_method(ctx: DistContext) -> str:
    """How :class:`Timer` measures on this rank: ``cuda_events`` on GPU, ``perf_counter`` on CPU."""
    return "cuda_events" if ctx.is_cuda else "perf_counter"


class Timer:
    """Wall time of a region of device work: CUDA events on GPU, ``perf_counter`` on CPU."""

    def __init__(self, ctx: DistContext) -> None:
        self._ctx = ctx
        self._start_event: Any = None
        self._stop_event: Any = None
        self._t0 = 0.0
        self._t1 = 0.0

    def start(self) -> None:
        """Mark the start of the region on this rank's stream (or clock)."""
        if self._ctx.is_cuda:
            self._start_event = torch.cuda.Event(enable_timing=True)
            self._stop_event = torch.cuda.Event(enable_timing=True)
            self._start_event.record()
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> float:
        """Mark the end of the region, wait for it, and return its duration in seconds."""
        if self._ctx.is_cuda:
            self._stop_event.record()
            self._stop_event.synchronize()
            return self._start_event.elapsed_time(self._stop_event) / 1e3
        self._t1 = time.perf_counter()
        return self._t1 - self._t0


def reset_peak_memory(ctx: DistContext) -> None:
    """Start a new peak-memory window (CUDA only; the CPU high-water mark cannot be reset)."""
    if ctx.is_cuda:
        torch.cuda.reset_peak_memory_stats(ctx.device)


def peak_memory_bytes(ctx: DistContext) -> tuple[int, str]:
    """Peak memory of this rank and how it was measured (``cuda_max_allocated`` or ``rss_peak``)."""
    if ctx.is_cuda:
        return int(torch.cuda.max_memory_allocated(ctx.device)), "cuda_max_allocated"
    # ru_maxrss is in KiB on Linux.
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "rss_peak"


def device_names(ctx: DistContext) -> list[str]:
    """Names of the devices visible to this rank (the CPU model on CPU runs)."""
    if ctx.is_cuda:
        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    from shardscope.topology.cpu import probe_cpu

    return [str(probe_cpu().get("model") or platform.machine())]


def comm_library_version(ctx: DistContext) -> str:
    """NCCL's version on GPU runs, ``gloo`` (bundled with torch) otherwise."""
    if ctx.backend == "nccl":
        return "nccl " + ".".join(str(v) for v in torch.cuda.nccl.version())
    return f"gloo (torch {torch.__version__})"


def gpu_driver_version() -> str | None:
    """The NVIDIA kernel driver version (``550.54.15``) from NVML, else /proc; None without one."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001, S110 -- no library, no driver, no GPU (NVMLError and others): try /proc
        pass
    try:
        text = Path("/proc/driver/nvidia/version").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)", text)
    return match[1] if match else None


def device_pci_bus_ids(ctx: DistContext) -> list[str] | None:
    """PCI bus ids (``0000:04:00``, as nccl-tests prints them) of the visible GPUs; None on CPU."""
    if not ctx.is_cuda:
        return None
    ids = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        bus = getattr(props, "pci_bus_id", None)
        if bus is None:
            return None
        ids.append(f"{getattr(props, 'pci_domain_id', 0):04x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}")
    return ids


def environment(ctx: DistContext) -> dict[str, Any]:
    """The environment a result was measured in: host, versions, devices, comm variables.

    On NCCL runs it adds the effective NCCL variables (environment and nccl.conf files) and
    the GPU driver version, since both change what a bandwidth number means.
    """
    env: dict[str, Any] = {
        "host": socket.gethostname(),
        "measured_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "backend": ctx.backend,
        "comm_library": comm_library_version(ctx),
        "cuda": torch.version.cuda if ctx.is_cuda else None,
        "device_type": ctx.device.type,
        "devices": device_names(ctx),
        "world_size": ctx.world_size,
        "local_world_size": ctx.local_world_size,
        "threads_per_rank": torch.get_num_threads(),
        "comm_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(_COMM_ENV_PREFIXES)},
        "nccl_env": nccl_effective_env() if ctx.backend == "nccl" else None,
        "gpu_driver": gpu_driver_version() if ctx.is_cuda else None,
        "device_pci_bus_ids": device_pci_bus_ids(ctx),
        "timing": timing_method(ctx),
        "git_rev": os.environ.get("SHARDSCOPE_GIT_REV"),
        "config_hash": os.environ.get("SHARDSCOPE_CONFIG_HASH"),
    }
    return env
