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


def _run_and_signal_rank_1(tmp_path: Path, sig: signal.Signals, *extra: str) -> tuple[dict, float]:
    """Start a long job, send ``sig`` to rank 1 inside its timed steps; the result and seconds from the signal."""
    name = f"rank1-{uuid.uuid4().hex[:8]}"
    out, log = tmp_path / f"{name}.json", tmp_path / "logs" / f"{name}.log"
    launcher = _train(out, log, *extra)
    try:
        wait_for(lambda: [1] if len(agent_and_ranks(name)[1]) == 2 else [], timeout_s=120)
        time.sleep(2.0)
        signalled_at = time.monotonic()
        kill(agent_and_ranks(name)[1][1], sig)
        output, _ = launcher.communicate(timeout=300)
    finally:
        launcher.kill()
    assert launcher.returncode == 0, output
    assert not processes_mentioning(name)
    return json.loads(out.read_text()), time.monotonic() - signalled_at


def test_a_stopped_rank_fails_the_job_within_its_timeout_and_is_named(tmp_path: Path) -> None:
    # Without a collective timeout gloo waited 30 minutes on the stopped rank (1,832 s measured).
    doc, elapsed_s = _run_and_signal_rank_1(tmp_path, signal.SIGSTOP, "--timeout-s", "8", "--wall-s", "600")
    assert doc["outcome"] == "failed"
    assert doc["error"].startswith("rank 1 was stopped"), doc["error"]
    assert elapsed_s < 8 + 45  # the timeout, then torchrun's and the launcher's grace on a busy node


def test_the_wall_clock_limit_ends_a_stopped_rank_and_says_so(tmp_path: Path) -> None:
    doc, elapsed_s = _run_and_signal_rank_1(tmp_path, signal.SIGSTOP, "--timeout-s", "600", "--wall-s", "25")
    assert doc["outcome"] == "failed"
    assert "wall-clock limit of 25 s" in doc["error"] and "rank 1 was stopped" in doc["error"], doc["error"]
    assert elapsed_s < 25 + 20


def test_a_killed_rank_is_named_not_only_its_surviving_peer(tmp_path: Path) -> None:
    doc, _ = _run_and_signal_rank_1(tmp_path, signal.SIGKILL)
    assert doc["outcome"] == "failed"
    assert "rank 1 died (signal 9, SIGKILL)" in doc["error"], doc["error"]
