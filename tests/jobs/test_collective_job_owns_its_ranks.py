"""A collective job ends with every rank it started: at its wall-clock limit, and when its torchrun agent dies.

torchrun starts each rank in a session of its own, so the guard's process-group kill once missed them: at the
limit the guard exited 124 and a SIGSTOPped rank stayed alive. The result reaches ``out`` only through the
launcher, after the ranks are gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from processes import agent_and_ranks, kill, processes_mentioning, wait_for

from shardscope.collectives.guard import TIMEOUT_EXIT
from shardscope.contracts.jobs import CollectiveJob, Sweep
from shardscope.jobs.run import run_collective

PY = sys.executable


def _env() -> dict[str, str]:
    env = dict(os.environ, SHARDSCOPE_THREADS_PER_RANK="1", OMP_NUM_THREADS="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def _long_sweep(job_id: str, out: Path) -> list[str]:
    """A sweep that runs for minutes on 2 CPU ranks unless stopped."""
    return [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "shardscope.collectives",
            "--cpu", "--op", "all_reduce", "-b", "1024", "-e", "268435456", "-f", "2", "-w", "5", "-n", "200",
            "--job-id", job_id, "--timeout-s", "600", "--out", str(out)]


def test_the_guard_ends_a_stopped_rank_at_the_limit_and_names_it(tmp_path: Path) -> None:
    job_id = f"stopped-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "logs" / "stopped.log"
    command = [PY, "-m", "shardscope.collectives.guard", "--job-id", job_id, "--log", str(log), "--wall-s", "20",
               "--kill-after-s", "3", "--", *_long_sweep(job_id, tmp_path / "out.json")]
    guard = subprocess.Popen(command, cwd=tmp_path, env=_env(), stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: [1] if 1 in agent_and_ranks(job_id)[1] else [], timeout_s=60)
        kill(agent_and_ranks(job_id)[1][1], signal.SIGSTOP)
        _, stderr = guard.communicate(timeout=120)
    finally:
        guard.kill()
    assert guard.returncode == TIMEOUT_EXIT, stderr
    assert "rank 1 was stopped" in stderr.strip().splitlines()[-1]
    assert not processes_mentioning(job_id)  # the stopped rank is gone too


def test_killing_the_agent_of_a_collective_job_leaves_no_rank_and_no_result(tmp_path: Path) -> None:
    job_id = f"agent-{uuid.uuid4().hex[:8]}"
    out, log = tmp_path / "res" / f"{job_id}.json", tmp_path / "logs" / f"{job_id}.log"
    job = CollectiveJob(job_id=job_id, world_size=2, nproc_per_node=2, placement="local", op="all_reduce",
                        transport="default", dtype="float32", check=False, timeout_s=600, wall_s=300,
                        sweep=Sweep(min_bytes=1024, max_bytes=4 * 2**20, factor=2, warmup=1, iters=400),
                        env={"OMP_NUM_THREADS": "1"})  # a plan job's env holds only what the planner writes

    def kill_the_agent() -> None:
        wait_for(lambda: [1] if len(agent_and_ranks(job_id)[1]) == 2 else [], timeout_s=60)
        time.sleep(2.0)
        for agent in agent_and_ranks(job_id)[0]:
            kill(agent, signal.SIGKILL)

    killer = threading.Thread(target=kill_the_agent)
    killer.start()
    status = run_collective(job, str(out), str(log))
    killer.join()
    assert status != 0
    assert not processes_mentioning(job_id)
    time.sleep(20)  # the ranks would have finished this sweep by now
    assert not out.exists() and not list(out.parent.iterdir())
