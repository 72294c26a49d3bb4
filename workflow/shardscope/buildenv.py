"""Where this Python environment keeps its C++ op builds and build tools (torch-free).

DeepSpeed JIT-builds its CPU comm op with torch's extension loader, which runs ``ninja`` from
``PATH`` into ``TORCH_EXTENSIONS_DIR``. Both must belong to this environment, or environments and
shells with another ``PATH`` rebuild each other's op. :mod:`shardscope.cli` sets both for every
command, :mod:`shardscope.training.launch` for every training job.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def extensions_dir() -> Path:
    """Where this environment's DeepSpeed/torch C++ ops are cached: ``TORCH_EXTENSIONS_DIR``, else under ``sys.prefix``.

    torch's default (``~/.cache/torch_extensions``) is shared by every environment of the user,
    and two environments with different torch or compiler flags rebuild each other's op in
    every job; a folder inside the environment is built once and reused by every job.
    """
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path(sys.prefix) / "torch_extensions")


def environment_first_on_path(path: str) -> str:
    """``path`` with this Python environment's ``bin`` folder first (once), where its build tools live."""
    bin_dir = str(Path(sys.executable).parent)
    rest = [p for p in path.split(os.pathsep) if p and p != bin_dir]
    return os.pathsep.join([bin_dir, *rest])
