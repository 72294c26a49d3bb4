""".ci/slurm.sh leaves the machine as it found it: start, a job across two nodes, stop -- twice.

After each stop no process it started is left (slurmctld, slurmd, slurmstepd, munged, the job's),
nothing listens on its ports, its folder is gone, and the machine's own Slurm and munge files
(/etc/slurm/slurm.conf, /etc/munge/munge.key: present or absent) are byte-identical. A folder and
ports of its own keep it apart from the module fixture of test_real_slurm.py.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from slurm.cluster import TOOLS, cluster_env, slurm_sh, system_tests_only, unavailable

FOLDER = "/run/shardscope-slurm-lifecycle"
PORT = 7117
NODES = 3  # the real node and two virtual ones
MACHINE_FILES = ("/etc/slurm/slurm.conf", "/etc/munge/munge.key")
DAEMONS = ("slurmctld", "slurmd", "slurmstepd", "munged")

pytestmark = pytest.mark.e2e


def digest(path: str) -> str | None:
    """SHA-256 of a file, None when it does not exist."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest() if os.path.exists(path) else None


def daemons() -> set[tuple[int, str]]:
    """(pid, name) of every Slurm or munge daemon running on this machine."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                name = (entry / "comm").read_text().strip()
            except OSError:
                continue
            if name in DAEMONS:
                found.add((int(entry.name), name))
    return found


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_start_a_job_and_stop_twice_leaves_nothing_and_never_touches_etc(tmp_path: Path) -> None:
    system_tests_only()
    missing = [t for t in TOOLS if not shutil.which(t)]
    if missing:
        unavailable(f"{', '.join(missing)} not installed (Debian: sudo bash .ci/slurm.sh install)")
    before_files = {path: digest(path) for path in MACHINE_FILES}
    before = daemons()
    env = {"SHARDSCOPE_SLURM_DIR": FOLDER, "SHARDSCOPE_SLURM_PORT": str(PORT)}
    try:
        for round_ in (1, 2):
            started = slurm_sh("start", env)
            assert started.returncode == 0, started.stderr[-3000:]
            ours = daemons() - before
            names = [name for _, name in ours]  # slurmctld forks its slurmscriptd, slurmd may fork helpers
            assert set(names) == {"munged", "slurmctld", "slurmd"} and names.count("slurmd") >= NODES, ours
            log = tmp_path / f"job{round_}.log"
            job = subprocess.run(["sbatch", "--wait", "--nodes", "2", "--ntasks-per-node", "1", "--time", "2",
                                  "--output", str(log), "--wrap", "env -u SLURM_CONF srun hostname"],
                                 capture_output=True, text=True, timeout=120, check=False,
                                 env={**os.environ, **cluster_env(FOLDER)})
            assert job.returncode == 0, job.stderr + (log.read_text() if log.exists() else "")
            assert len(log.read_text().split()) == 2  # one task on each of two nodes, config found without SLURM_CONF
            stopped = slurm_sh("stop", env)
            assert stopped.returncode == 0, stopped.stderr[-3000:]
            assert daemons() - before == set(), daemons() - before
            assert not os.path.exists(FOLDER)
            assert not any(listening(PORT + i) for i in range(NODES + 1))
            assert {path: digest(path) for path in MACHINE_FILES} == before_files
        assert slurm_sh("stop", env).returncode == 0  # stopping a stopped cluster is fine
    finally:
        slurm_sh("stop", env)
