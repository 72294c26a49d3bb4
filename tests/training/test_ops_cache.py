"""DeepSpeed's C++ op cache is one folder per environment, and a built op skips the prebuild process."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from shardscope.training import launch


def test_cache_defaults_to_this_environment(monkeypatch):
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    assert launch.extensions_dir() == Path(sys.prefix) / "torch_extensions"
    assert launch.ops_env(cpu=True)["TORCH_EXTENSIONS_DIR"] == str(Path(sys.prefix) / "torch_extensions")


def test_cache_follows_the_variable_and_cpu_sets_the_accelerator(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    env = launch.ops_env(cpu=True)
    assert env["TORCH_EXTENSIONS_DIR"] == str(tmp_path) and env["DS_ACCELERATOR"] == "cpu"
    assert "DS_ACCELERATOR" not in launch.ops_env(cpu=False)


def test_jobs_find_this_environments_ninja_first(monkeypatch):
    """One ninja for every build of the op: another one on PATH first would rebuild it in every job."""
    bin_dir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", f"/usr/bin:{bin_dir}:/bin")
    assert launch.ops_env(cpu=True)["PATH"].split(":") == [bin_dir, "/usr/bin", "/bin"]
    monkeypatch.setenv("PATH", "")
    assert launch.ops_env(cpu=False)["PATH"] == bin_dir


def test_built_op_skips_the_prebuild(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(launch.subprocess, "run", lambda *a, **k: calls.append(a))
    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path)}
    assert launch.prebuild_deepspeed_cpu_ops(io.StringIO(), env) is True and len(calls) == 1
    (tmp_path / launch.SHM_OP).mkdir()
    (tmp_path / launch.SHM_OP / f"{launch.SHM_OP}.so").write_bytes(b"")
    assert launch.shm_op_built(tmp_path)
    assert launch.prebuild_deepspeed_cpu_ops(io.StringIO(), env) is False and len(calls) == 1


def test_cli_sets_the_cache_before_any_command(monkeypatch):
    from shardscope import cli

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "placeholder")  # recorded, so teardown restores the original
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    try:
        cli.main(["--help"])
    except SystemExit:
        pass
    import os

    assert os.environ["TORCH_EXTENSIONS_DIR"] == str(Path(sys.prefix) / "torch_extensions")


def test_a_stale_build_lock_is_removed_and_a_fresh_one_kept(tmp_path):
    import os
    import time

    lock = tmp_path / "lock"
    lock.write_bytes(b"")
    log = io.StringIO()
    assert launch.clear_stale_build_lock(tmp_path, log) is False and lock.exists()
    old = time.time() - 2 * launch.STALE_LOCK_S
    os.utime(lock, (old, old))
    assert launch.clear_stale_build_lock(tmp_path, log) is True and not lock.exists()
    assert "stale build lock" in log.getvalue()
    assert launch.clear_stale_build_lock(tmp_path, log) is False
