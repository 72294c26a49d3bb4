"""tests/gpu/collectives_check.py, the prepared GPU check, must work before a GPU session runs it.

Here (no GPU) it must skip cleanly, and its checks must pass on gloo with ``--cpu`` (same
code path, CPU expectations) and must catch a bad document.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from factories import collective_doc

SCRIPT = Path(__file__).resolve().parents[1] / "gpu" / "collectives_check.py"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, SHARDSCOPE_THREADS_PER_RANK="1", OMP_NUM_THREADS="1", **extra)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("collectives_check", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["collectives_check"] = module
    spec.loader.exec_module(module)
    return module


def test_skips_cleanly_without_a_gpu() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT)], env=_env(CUDA_VISIBLE_DEVICES=""), capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("SKIPPED: no CUDA GPU")


def test_the_checks_pass_on_gloo_with_cpu_flag() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--cpu", "--max-bytes", "65536"], env=_env(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("# Avg bus bandwidth") == 3
    assert "PASS" in proc.stdout.splitlines()[-1]


def test_the_checks_catch_a_bad_document() -> None:
    check = _module()
    doc = collective_doc("all_reduce", world_size=1)
    doc["env"].update(timing="perf_counter", comm_library="gloo")
    for row in doc["rows"]:
        row["wrong"] = 0  # as the worker writes it with --check
    assert check.problems(doc, "all_reduce", cpu=True) == []
    doc["rows"][0]["time_s"] = 0.0
    doc["rows"][1]["busbw_gbps"] = 1.0  # at one rank all_reduce's busbw must be 0
    found = check.problems(doc, "all_reduce", cpu=False)
    assert any("backend is 'gloo', expected 'nccl'" in f for f in found)
    assert any("timing is 'perf_counter', expected 'cuda_events'" in f for f in found)
    assert any("no GPU driver" in f for f in found)
    assert any("1024 B: time_s 0.0" in f for f in found)
    assert any("16384 B: busbw_gbps" in f for f in found)
