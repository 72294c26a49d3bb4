"""The ZeRO job's start-up skips DeepSpeed's Muon import (it loads TorchInductor) and nothing else."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from shardscope.training.deepspeed_startup import MUON_MODULE, without_muon


def test_inside_the_block_muon_cannot_be_imported_and_afterwards_it_can_again():
    assert MUON_MODULE not in sys.modules or sys.modules[MUON_MODULE] is not None
    with without_muon():
        with pytest.raises(ImportError):
            importlib.import_module(MUON_MODULE)
    assert sys.modules.get(MUON_MODULE, "absent") is not None  # the block leaves no blocker behind


def test_deepspeed_still_accepts_adamw_without_muon_and_never_loads_inductor():
    """In a fresh process (DeepSpeed's own check, as deepspeed.initialize calls it)."""
    code = (
        "import sys, torch, deepspeed.runtime.zero.utils as u\n"
        "from unittest import mock\n"
        "from shardscope.training.deepspeed_startup import without_muon\n"
        "opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])\n"
        "with without_muon(), mock.patch.object(u.dist, 'get_rank', return_value=1):\n"
        "    assert u.is_zero_supported_optimizer(opt)\n"
        "print('torch._inductor.compile_fx' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={"DS_ACCELERATOR": "cpu", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "False"
