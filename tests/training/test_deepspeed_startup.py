"""The ZeRO job's start-up skips DeepSpeed's Muon modules (their import loads TorchInductor), and only for non-Muon jobs."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys, torch, deepspeed.runtime.zero.utils as u
from unittest import mock
from shardscope.training.deepspeed_startup import skip_muon
assert skip_muon("AdamW") and not skip_muon("AdamW")  # installed once
from deepspeed.runtime.zero.muon.muon_optimizer import MuonWithAuxAdam
from deepspeed.runtime.zero.muon.original_muon import muon_update
opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])
assert not isinstance(opt, MuonWithAuxAdam)
with mock.patch.object(u.dist, "get_rank", return_value=1):
    assert u.is_zero_supported_optimizer(opt)  # DeepSpeed's own check, as deepspeed.initialize calls it
try:
    muon_update()
except RuntimeError as exc:
    assert "stand-in" in str(exc)
else:
    raise AssertionError("the stand-in update ran")
print("torch._inductor.compile_fx" in sys.modules)
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={"DS_ACCELERATOR": "cpu", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})


def test_a_non_muon_job_gets_stand_ins_and_never_loads_inductors_compiler():
    proc = _run(CHECK)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "False"


def test_a_muon_job_keeps_deepspeeds_modules():
    proc = _run("import sys\nfrom shardscope.training.deepspeed_startup import MUON_MODULES, skip_muon\n"
                "assert not skip_muon('MuonWithAuxAdam') and not any(m in sys.modules for m in MUON_MODULES)\n")
    assert proc.returncode == 0, proc.stderr[-2000:]
