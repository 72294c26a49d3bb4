"""Real emulated fabrics (root, as in CI): bandwidth follows the configured caps, nothing leaks, nothing survives a kill.

Why the bandwidth bands are robust on 2 shared cores: a 2-rank all_reduce moves every byte of
the message once in each direction per call, and its busbw factor is 1, so on a link capped by
tbf at R bit/s busbw is at most R/8 bytes/s, less TCP/IP headers (~5%); CPU contention can only
lower it, and a 200 Mbit/s (25 MB/s) link needs a few percent of one core. The bands are
therefore one-sided-tight: at most 1.05x the cap, at least half of it. The uncapped fabric is
limited by memory copies through the kernel, measured at 0.5-1 GB/s here, far above 4x the cap.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from shardscope.emulated import netns
from shardscope.emulated.fabric import HOST_IFACE, EmulatedFabric
from shardscope.emulated.launch import EmulatedJob, run_collective
from shardscope.emulated.presets import BUILTIN, SLOW_MBIT, preset_from_config

MIB = 1024 * 1024
SWEEP = ["--op", "all_reduce", "-b", str(MIB), "-e", str(4 * MIB), "-f", "4", "-w", "1", "-n", "3", "--dtype", "float32"]


Ours = Callable[[], list[str]]


def clean_env() -> dict[str, str]:
    """The environment of a launcher started by a test: no torchrun variables inherited."""
    env = dict(os.environ)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def peak_busbw_gbps(job: EmulatedJob, tmp_path: Path) -> float:
    """Run the all_reduce sweep over ``job``'s fabric and return the best busbw (GB/s)."""
    out = tmp_path / f"{job.preset.name}-{job.placement}.json"
    doc = run_collective(job, [*SWEEP, "--check", "--job-id", out.stem], str(out), str(out.with_suffix(".log")))
    assert all(row["check_ok"] for row in doc["rows"])
    assert doc["job"]["fabric"] == f"emulated:{job.preset.name}" and doc["env"]["comm_env"]["GLOO_SOCKET_IFNAME"] == HOST_IFACE
    return max(row["busbw_gbps"] for row in doc["rows"])


def test_capped_fabric_is_slower_by_the_configured_ratio(prefix: str, ours: Ours, tmp_path: Path) -> None:
    x4 = preset_from_config("pcie_x4", {"hosts": 2, "links": [{"a": "h0", "b": "s0", "rate_mbit": 4 * SLOW_MBIT},
                                                              {"a": "h1", "b": "s0", "rate_mbit": 4 * SLOW_MBIT}]})
    busbw = {p.name: peak_busbw_gbps(EmulatedJob(p, prefix=prefix, timeout_s=180), tmp_path)
             for p in (BUILTIN["fast"], BUILTIN["pcie_like"], x4)}
    cap_gbps = SLOW_MBIT * 1e6 / 8 / 1e9
    print(f"\nall_reduce busbw, 2 ranks: fast {busbw['fast']:.4f} GB/s, pcie_like {busbw['pcie_like']:.4f} GB/s "
          f"(cap {cap_gbps:.4f}), pcie_x4 {busbw['pcie_x4']:.4f} GB/s")
    assert 0.5 * cap_gbps <= busbw["pcie_like"] <= 1.05 * cap_gbps  # measured / configured rate
    assert 2.5 <= busbw["pcie_x4"] / busbw["pcie_like"] <= 4.4  # configured ratio 4
    assert busbw["fast"] >= 4 * busbw["pcie_like"]
    assert ours() == []


def test_crossing_nvl_groups_is_the_cliff(prefix: str, ours: Ours, tmp_path: Path) -> None:
    nvl = BUILTIN["nvl_groups"]
    inside = peak_busbw_gbps(EmulatedJob(nvl, "in_group", prefix=prefix, timeout_s=180), tmp_path)
    across = peak_busbw_gbps(EmulatedJob(nvl, "across_groups", prefix=prefix, timeout_s=180), tmp_path)
    print(f"\nnvl_groups all_reduce busbw, 2 ranks: in one group {inside:.4f} GB/s, across groups {across:.4f} GB/s")
    assert across <= 1.05 * SLOW_MBIT * 1e6 / 8 / 1e9 and inside >= 4 * across


def test_traffic_stays_inside_the_fabric_and_all_of_it_goes(prefix: str, ours: Ours) -> None:
    with EmulatedFabric(BUILTIN["nvl_groups"], prefix=prefix) as fabric:
        assert sorted(ours()) == sorted(fabric.namespaces)
        # no interface of the machine's own namespace is the peer of one of ours (others may add theirs meanwhile)
        assert not [line for line in netns.run(["ip", "-o", "-d", "link"]).stdout.splitlines() if f"link-netns {prefix}" in line]
        for ns in fabric.namespaces:
            for line in netns.run(["ip", "-n", ns, "-o", "-d", "link"]).stdout.splitlines():
                assert "link-netnsid" not in line, line  # a veth peer outside our named namespaces
                if "link-netns " in line:
                    assert line.split("link-netns ")[1].split()[0] in fabric.namespaces, line
        for i in range(4):
            ns = fabric.host_namespace(i)
            routes = netns.run(["ip", "-n", ns, "route", "show", "table", "all"]).stdout
            assert "default" not in routes
            addrs = netns.run(["ip", "-n", ns, "-o", "-4", "addr"]).stdout
            assert f"{fabric.host_address(i)}/24" in addrs and addrs.count("inet ") == 2  # lo and eth0 only
        trunk = netns.run(["tc", "-n", fabric.names.switch, "qdisc", "show"]).stdout
        assert trunk.count("tbf") == 2 and "rate 200Mbit" in trunk
        assert netns.cleanup(prefix) == []  # a live owner's fabric is never a leftover
        assert sorted(ours()) == sorted(fabric.namespaces)
    assert ours() == []


def _launcher(tmp_path: Path, prefix: str) -> subprocess.Popen[str]:
    """A long all_reduce job over pcie_like (400 x 4 MiB at 25 MB/s: ~70 s), to be killed."""
    out = tmp_path / "killed.json"
    cmd = [sys.executable, "-m", "shardscope.emulated", "collectives", "--preset", "pcie_like", "--op", "all_reduce",
           "-b", str(4 * MIB), "-e", str(4 * MIB), "-w", "1", "-n", "400", "--prefix", prefix, "--timeout-s", "120",
           "--out", str(out), "--log", str(tmp_path / "killed.log")]
    return subprocess.Popen(cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_ranks(ours: Ours, timeout_s: float = 60.0) -> dict[str, list[int]]:
    """Namespaces -> pids once both host namespaces run torchrun and its worker."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = {ns: netns.namespace_pids(ns) for ns in ours()}
        hosts = [ns for ns in pids if ns.endswith(("-h0", "-h1"))]
        if len(hosts) == 2 and all(len(pids[ns]) >= 2 for ns in hosts):
            time.sleep(1.0)  # into the timed loop
            return {ns: netns.namespace_pids(ns) for ns in ours()}
        time.sleep(0.2)
    pytest.fail(f"the ranks did not start within {timeout_s:g} s")


def _all_dead(pids: list[int], timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{p}").exists() and "Z" not in Path(f"/proc/{p}/stat").read_text().split()[2] for p in pids):
            return True
        time.sleep(0.1)
    return False


def _worker_pid(pids: list[int]) -> int:
    for pid in pids:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        if b"shardscope.collectives" in cmdline and b"torch.distributed.run" not in cmdline:
            return pid
    raise AssertionError(f"no worker among {pids}")


def test_sigkilled_launcher_leaves_namespaces_that_cleanup_removes(prefix: str, ours: Ours, tmp_path: Path) -> None:
    launcher = _launcher(tmp_path, prefix)
    try:
        running = _wait_for_ranks(ours)
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=10)
        assert sorted(netns.leftovers(prefix)) == sorted(running)  # no atexit after SIGKILL: leftovers
        proc = subprocess.run([sys.executable, "-m", "shardscope.emulated", "cleanup", "--prefix", prefix], env=clean_env(),
                              capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0 and f"removed {len(running)} namespaces" in proc.stdout, proc.stderr
        assert ours() == []
        assert _all_dead([p for pids in running.values() for p in pids])
        assert not (tmp_path / "killed.json").exists()
    finally:
        launcher.kill()
        launcher.communicate(timeout=10)


def test_sigkilled_rank_fails_the_job_and_the_launcher_removes_everything(prefix: str, ours: Ours, tmp_path: Path) -> None:
    launcher = _launcher(tmp_path, prefix)
    try:
        running = _wait_for_ranks(ours)
        rank1 = next(ns for ns in running if ns.endswith("-h1"))
        os.kill(_worker_pid(running[rank1]), signal.SIGKILL)
        _, err = launcher.communicate(timeout=60)
        assert launcher.returncode == 2 and "failed with status" in err and "\n" not in err.strip(), err
        assert ours() == []  # no cleanup command needed
        assert _all_dead([p for pids in running.values() for p in pids])
        assert not (tmp_path / "killed.json").exists()
    finally:
        launcher.kill()
        launcher.communicate(timeout=10)


def test_sigterm_tears_the_fabric_down(prefix: str, ours: Ours, tmp_path: Path) -> None:
    launcher = _launcher(tmp_path, prefix)
    try:
        running = _wait_for_ranks(ours)
        launcher.send_signal(signal.SIGTERM)
        launcher.communicate(timeout=60)
        assert launcher.returncode == -signal.SIGTERM
        assert ours() == []
        assert _all_dead([p for pids in running.values() for p in pids])
    finally:
        launcher.kill()
        launcher.communicate(timeout=10)
