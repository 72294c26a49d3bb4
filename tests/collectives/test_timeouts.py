"""A hung collective must not hang the pipeline.

Inner bound: the worker's ``--timeout-s`` reaches ``init_process_group(timeout=...)``, so the
ranks that wait for a rank that never joins fail after that long. Outer bound: the guard the
rules start every job with stops the whole job at its wall-clock limit. Both are exercised
for real with torchrun, using the worker's test hook ``SHARDSCOPE_TEST_HANG_RANK`` (that rank
sleeps before its first collective). The guard's other paths use small stand-in commands.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from processes import processes_mentioning

from shardscope.collectives.guard import TIMEOUT_EXIT, last_error_line, run_guarded

PY = sys.executable


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, SHARDSCOPE_THREADS_PER_RANK="1", OMP_NUM_THREADS="1", **extra)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def _worker(job_id: str, out: Path, timeout_s: float) -> list[str]:
    return [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "shardscope.collectives",
            "--cpu", "--op", "all_reduce", "--check", "-b", "1024", "-e", "4096", "-f", "4", "-w", "1", "-n", "2",
            "--job-id", job_id, "--timeout-s", str(timeout_s), "--out", str(out)]


def test_a_rank_that_never_joins_fails_the_job_within_the_timeout(tmp_path: Path) -> None:
    out = tmp_path / "out" / "hang.json"
    job_id = f"hang-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    proc = subprocess.run(_worker(job_id, out, 4), cwd=tmp_path, env=_env(SHARDSCOPE_TEST_HANG_RANK="1"),
                          capture_output=True, text=True, timeout=120, check=False)
    elapsed_s = time.monotonic() - started

    assert proc.returncode != 0
    assert elapsed_s < 60, f"took {elapsed_s:.0f} s with --timeout-s 4"
    assert not out.exists() and not (out.parent.exists() and os.listdir(out.parent))
    errors = [line for line in proc.stderr.splitlines() if line.startswith("shardscope: error:")]
    assert errors, proc.stderr[-3000:]
    assert job_id in errors[0] and "--timeout-s 4" in errors[0] and "rank 0" in errors[0]
    assert not processes_mentioning(job_id)  # torchrun took the sleeping rank down with it


def test_the_guard_stops_a_hung_job_at_its_wall_clock_limit(tmp_path: Path) -> None:
    # The inner timeout is far away (600 s): only the outer limit can end this job.
    out = tmp_path / "out" / "hang.json"
    log = tmp_path / "logs" / "hang.log"
    job_id = f"hang-{uuid.uuid4().hex[:8]}"
    command = [PY, "-m", "shardscope.collectives.guard", "--job-id", job_id, "--log", str(log), "--wall-s", "12",
               "--kill-after-s", "5", "--", *_worker(job_id, out, 600)]
    started = time.monotonic()
    proc = subprocess.run(command, cwd=tmp_path, env=_env(SHARDSCOPE_TEST_HANG_RANK="1"),
                          capture_output=True, text=True, timeout=120, check=False)
    elapsed_s = time.monotonic() - started

    assert proc.returncode == TIMEOUT_EXIT, proc.stderr[-3000:]
    assert 12 <= elapsed_s < 45
    assert not out.exists()
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith("shardscope: error: ")
    assert job_id in message and str(log) in message and "12 s" in message
    assert log.read_text().splitlines()[-1] == message  # the log ends with the same sentence
    assert not processes_mentioning(job_id)  # torchrun and both ranks are gone


# --------------------------------------------------------------------------- the guard alone


def test_guard_passes_success_through_and_logs_output(tmp_path: Path) -> None:
    log = tmp_path / "ok.log"
    code = run_guarded([PY, "-c", "print('hello from the job')"], "ok-job", str(log), wall_s=30)
    assert code == 0
    lines = log.read_text().splitlines()
    assert lines[0].startswith("# shardscope guard: job ok-job, limit 30 s: ")
    assert "hello from the job" in lines[1:]


def test_guard_names_job_log_and_the_workers_own_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "logs" / "bad.log"
    script = "import sys; print('shardscope: error: rank 1 lost its peer', file=sys.stderr); sys.exit(3)"
    code = run_guarded([PY, "-c", script], "bad-job", str(log), wall_s=30)
    assert code == 3
    message = capsys.readouterr().err.strip()
    assert message.startswith("shardscope: error: job bad-job failed after")
    assert "(exit status 3): rank 1 lost its peer; see " + str(log) in message


def test_guard_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    marker = f"marker-{uuid.uuid4().hex[:8]}"
    # A parent that ignores SIGTERM and a child that sleeps: both must be gone afterwards.
    script = (f"import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', '{marker}']); time.sleep(300)")
    started = time.monotonic()
    code = run_guarded([PY, "-c", script, marker], "sleepy", str(tmp_path / "s.log"), wall_s=1.5, kill_after_s=1)
    assert code == TIMEOUT_EXIT
    assert time.monotonic() - started < 15
    time.sleep(0.2)
    assert not processes_mentioning(marker)
    assert "wall-clock limit of 1.5 s" in (last_error_line(tmp_path / "s.log") or "")


def test_guard_reports_a_command_that_cannot_start(tmp_path: Path) -> None:
    code = run_guarded(["/nonexistent/all_reduce_perf"], "peer", str(tmp_path / "p.log"), wall_s=5)
    assert code == 127
    assert "could not start" in (last_error_line(tmp_path / "p.log") or "")


@pytest.mark.parametrize("flags", [["--wall-s", "0"], ["--wall-s", "5"]], ids=["zero-limit", "no-command"])
def test_guard_rejects_bad_usage(tmp_path: Path, flags: list[str]) -> None:
    extra = ["--", PY, "-c", "pass"] if flags[1] == "0" else []
    proc = subprocess.run([PY, "-m", "shardscope.collectives.guard", "--job-id", "j", "--log", str(tmp_path / "l"),
                           *flags, *extra], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert not (tmp_path / "l").exists()


@pytest.mark.parametrize("value", ["0", "-1"])
def test_worker_rejects_a_non_positive_timeout(tmp_path: Path, value: str) -> None:
    proc = subprocess.run([PY, "-m", "shardscope.collectives", "--op", "all_reduce", "--timeout-s", value,
                           "--out", str(tmp_path / "x.json")], env=_env(), capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2 and "--timeout-s" in proc.stderr
    assert not (tmp_path / "x.json").exists()
