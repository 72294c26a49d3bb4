"""A training job's log says which rank printed each line, and holds no known-harmless warnings (issue 33)."""

from __future__ import annotations

import re
from typing import Any

from shardscope.training.launch import RANK_PREFIX_ENV, with_rank_prefixes

#: Lines torchrun's agent prints itself (not a rank): its OMP_NUM_THREADS banner.
AGENT_LINE = re.compile(r"^(\*+|Setting OMP_NUM_THREADS .*|)$")


def test_every_line_of_a_zero3_log_names_its_rank_and_no_future_warning_is_left(strategy_runs: dict[str, dict[str, Any]]) -> None:
    lines = strategy_runs["zero3"]["log"].read_text().splitlines()
    worker = lines[lines.index(next(line for line in lines if line.startswith("$ "))) + 1:]
    unprefixed = [line for line in worker if not line.startswith(("[rank 0] ", "[rank 1] ")) and not AGENT_LINE.match(line)]
    assert not unprefixed, unprefixed[:5]
    assert {line[:8] for line in worker if line.startswith("[rank")} == {"[rank 0]", "[rank 1]"}
    assert not [line for line in lines if "FutureWarning" in line]


def test_torchrun_tees_every_rank_through_a_folder_and_prefixes_by_global_rank() -> None:
    cmd = ["python", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "shardscope.training"]
    assert with_rank_prefixes(cmd, "/tmp/x")[:7] == ["python", "-m", "torch.distributed.run", "--tee", "3", "--log-dir",
                                                     "/tmp/x"]
    assert RANK_PREFIX_ENV == {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank ${rank}] "}
