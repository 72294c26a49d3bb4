"""What each job records about its environment (shardscope.device), beyond versions and devices.

The NCCL variables NCCL will use come from the environment first, then from NCCL's
configuration files; the driver version from NVML or /proc. Both are read from files here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from shardscope import device
from shardscope.device import (
    DistContext,
    environment,
    nccl_conf_files,
    nccl_effective_env,
    timing_method,
)

CPU_CTX = DistContext(rank=0, world_size=2, local_rank=0, local_world_size=2, device=torch.device("cpu"), backend="gloo")


def test_environment_wins_over_conf_files_and_user_file_over_system_file(tmp_path: Path) -> None:
    user, system = tmp_path / "user.conf", tmp_path / "nccl.conf"
    user.write_text("NCCL_DEBUG=INFO\nNCCL_ALGO = Ring \n# NCCL_PROTO=LL\n")
    system.write_text("NCCL_DEBUG=WARN\nNCCL_ALGO=Tree\nNCCL_SOCKET_IFNAME==ens1f0\nnot a setting\n")
    env = {"NCCL_P2P_DISABLE": "1", "NCCL_DEBUG": "VERSION", "PATH": "/bin"}

    assert nccl_effective_env(env, [user, system]) == {
        "NCCL_ALGO": {"value": "Ring", "source": str(user)},
        "NCCL_DEBUG": {"value": "VERSION", "source": "env"},
        "NCCL_P2P_DISABLE": {"value": "1", "source": "env"},
        "NCCL_SOCKET_IFNAME": {"value": "=ens1f0", "source": str(system)},
    }


def test_missing_conf_files_are_skipped(tmp_path: Path) -> None:
    assert nccl_effective_env({"NCCL_NVLS_ENABLE": "0"}, [tmp_path / "absent", tmp_path]) == {
        "NCCL_NVLS_ENABLE": {"value": "0", "source": "env"}}


def test_conf_file_locations_follow_nccl() -> None:
    assert nccl_conf_files({"HOME": "/home/u"}) == [Path("/home/u/.nccl.conf"), Path("/etc/nccl.conf")]
    assert nccl_conf_files({"HOME": "/home/u", "NCCL_CONF_FILE": "/x/my.conf"}) == [Path("/x/my.conf"), Path("/etc/nccl.conf")]


def test_driver_version_from_proc_when_nvml_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_pynvml(name: str, *args: object, **kwargs: object) -> object:
        if name == "pynvml":
            raise ImportError("no NVML here")
        return real_import(name, *args, **kwargs)

    proc_file = tmp_path / "version"
    proc_file.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build\n"
                         "GCC version:  gcc version 12.3.0\n")
    real_path = Path

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    monkeypatch.setattr(device, "Path", lambda p: proc_file if p == "/proc/driver/nvidia/version" else real_path(p))
    assert device.gpu_driver_version() == "550.54.15"
    proc_file.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Mar  5 22:42:21 UTC 2024\n")
    assert device.gpu_driver_version() == "535.161.08"
    proc_file.unlink()
    assert device.gpu_driver_version() is None


def test_cpu_environment_records_timing_and_leaves_gpu_fields_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    env = environment(CPU_CTX)
    assert timing_method(CPU_CTX) == env["timing"] == "perf_counter"
    assert env["nccl_env"] is None and env["gpu_driver"] is None and env["device_pci_bus_ids"] is None
    assert env["comm_env"]["NCCL_DEBUG"] == "WARN"  # still listed among the communication variables
    assert env["backend"] == "gloo" and env["torch"] == torch.__version__


def test_nccl_environment_lists_the_effective_nccl_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same function on an NCCL context (only the backend label matters for these fields).
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    monkeypatch.setattr(device, "comm_library_version", lambda ctx: "nccl 2.21.5")
    ctx = DistContext(0, 2, 0, 2, torch.device("cpu"), "nccl")
    env = environment(ctx)
    assert env["nccl_env"]["NCCL_P2P_DISABLE"] == {"value": "1", "source": "env"}
    assert env["comm_library"] == "nccl 2.21.5"


def test_init_distributed_rejects_a_non_positive_timeout() -> None:
    with pytest.raises(ValueError, match="timeout"):
        device.init_distributed(prefer_gpu=False, timeout_s=0)
