"""What the training worker and its launcher share about result files, without importing torch.

The launcher (``shardscope job run`` for a training job) only starts torchrun and reads back what
the ranks left; importing the worker module for these two names cost it a torch import (seconds
per job on a small CPU node).
"""

from __future__ import annotations

#: The schema of a training job's result document (the worker's, and the launcher's failure rows).
SCHEMA = "shardscope.training/1"


def error_path(out: str, rank: int) -> str:
    """Where rank ``rank`` leaves its error report for the launcher."""
    return f"{out}.rank{rank}.error.json"
