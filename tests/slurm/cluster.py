"""Helpers of the real-Slurm tests: run .ci/slurm.sh as root, the gate, the cluster's environment.

These tests start daemons, so they run only when asked: ``SHARDSCOPE_SYSTEM_TESTS=1`` (``.ci/run``
sets it). The cluster has its own folder (``SHARDSCOPE_SLURM_DIR``), config, munge key and socket,
ports and state; Slurm's commands find its config through the wrappers in ``<folder>/bin``, put
first on ``PATH`` for the tests and every process they start (Slurm jobs inherit ``PATH``). The
machine's /etc/slurm and /etc/munge are never read or written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SLURM_SH = REPO / ".ci" / "slurm.sh"
SYSTEM_TESTS = "SHARDSCOPE_SYSTEM_TESTS"
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol")


def system_tests_only() -> None:
    """Skip unless the user asked for tests that start daemons on this machine."""
    if os.environ.get(SYSTEM_TESTS) != "1":
        pytest.skip(f"starts Slurm daemons on this machine; set {SYSTEM_TESTS}=1 to run it (.ci/run does)")


def unavailable(reason: str) -> None:
    """Fail where system tests were asked for in CI, else skip, with the reason."""
    if os.environ.get("CI"):
        pytest.fail(f"the Slurm test must run in CI, but {reason}")
    pytest.skip(reason)


def as_root() -> list[str]:
    """The prefix that runs .ci/slurm.sh as root: nothing, sudo -n, or a skip with the reason."""
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True, check=False).returncode == 0:
        return ["sudo", "-n", "--preserve-env=SHARDSCOPE_SLURM_DIR,SHARDSCOPE_SLURM_PORT"]
    unavailable("it needs root or passwordless sudo to start slurmctld/slurmd (.ci/slurm.sh)")
    raise AssertionError  # unreachable: unavailable() raises


def slurm_sh(action: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``.ci/slurm.sh ACTION`` as root."""
    return subprocess.run([*as_root(), "bash", str(SLURM_SH), action], capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ, **(env or {})})


def cluster_env(folder: str) -> dict[str, str]:
    """PATH (the wrappers first) and SLURM_CONF of the private cluster in ``folder``."""
    return {"PATH": f"{folder}/bin:{os.environ['PATH']}", "SLURM_CONF": f"{folder}/slurm.conf"}
