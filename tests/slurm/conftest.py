"""The private Slurm cluster of the real-Slurm tests: started by .ci/slurm.sh, stopped afterwards, also on failure.

Runs only with SHARDSCOPE_SYSTEM_TESTS=1; see tests/slurm/cluster.py.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from slurm.cluster import TOOLS, cluster_env, slurm_sh, system_tests_only, unavailable


@pytest.fixture(scope="module")
def slurm() -> Iterator[str]:
    """A running private cluster for this module's tests; its folder. Stopped (jobs, daemons, folder) afterwards."""
    system_tests_only()
    missing = [t for t in TOOLS if not shutil.which(t)]
    if missing:
        unavailable(f"{', '.join(missing)} not installed (Debian: sudo bash .ci/slurm.sh install)")
    folder = os.environ.get("SHARDSCOPE_SLURM_DIR", "/run/shardscope-slurm")
    saved = {key: os.environ.get(key) for key in ("PATH", "SLURM_CONF")}
    try:
        started = slurm_sh("start")
        if started.returncode != 0:
            unavailable(f".ci/slurm.sh start failed: {started.stderr.strip()[-1500:]}")
        os.environ.update(cluster_env(folder))
        yield folder
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        stopped = slurm_sh("stop")
        assert stopped.returncode == 0, stopped.stderr
