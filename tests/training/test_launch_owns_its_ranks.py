"""A training job's result is written once, by the launcher, after every rank it started is gone.

torchrun starts each rank in a session of its own: killing the agent once left both ranks running, and
35 s later rank 0 wrote ``ok`` over the launcher's ``failed``. Here the agent is killed mid-job; the
``failed`` result must stay as written, and no rank may be left, even after the ranks would have finished.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from processes import agent_and_ranks, kill, processes_mentioning, wait_for
from training.conftest import clean_env

#: Timed steps of the tiny model: about 10 s of training on 2 busy cores, so the agent dies mid-job.
STEPS = "200"


def _train(out: Path, log: Path, *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "shardscope", "train", "--strategy", "ddp", "--model", "tiny", "--nproc", "2",
           "--warmup", "1", "--steps", STEPS, "--cpu", "--out", str(out), "--log", str(log), *extra]
    return subprocess.Popen(cmd, cwd=out.parent, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def test_killing_the_agent_leaves_a_failed_result_that_no_rank_replaces(tmp_path: Path) -> None:
    name = f"owned-{uuid.uuid4().hex[:8]}"
    out, log = tmp_path / f"{name}.json", tmp_path / "logs" / f"{name}.log"
    launcher = _train(out, log)
    try:
        wait_for(lambda: [1] if len(agent_and_ranks(name)[1]) == 2 else [], timeout_s=120)
        time.sleep(2.0)  # the ranks are past their start, inside the timed steps
        agents, ranks = agent_and_ranks(name)
        killed_at = time.monotonic()
        for agent in agents:
            kill(agent, signal.SIGKILL)
        output, _ = launcher.communicate(timeout=120)
    finally:
        launcher.kill()
    assert launcher.returncode == 0, output
    assert time.monotonic() - killed_at < 30
    written = out.read_text()
    assert json.loads(written)["outcome"] == "failed"
    assert not processes_mentioning(name)  # every rank is gone when the launcher returns
    # long enough for the ranks to have finished their steps and written, had they survived
    time.sleep(25)
    assert out.read_text() == written
    assert [p.name for p in tmp_path.iterdir()] and not list(tmp_path.glob(".*ranks-*"))  # the private folder went
