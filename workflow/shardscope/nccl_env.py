"""The NCCL variables NCCL would use on this machine, read without importing torch.

Stored with every NCCL result (:func:`shardscope.device.environment`) and checked by ``shardscope
doctor``, which must not pay a torch import (seconds on a small node) to read a few files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

#: Where NCCL reads variables that are not in the environment (NCCL docs, "Environment Variables"):
#: ``$NCCL_CONF_FILE`` (since 2.23; ``~/.nccl.conf`` before), then ``/etc/nccl.conf``.
_NCCL_SYSTEM_CONF = "/etc/nccl.conf"
_CONF_LINE = re.compile(r"^\s*(NCCL_[A-Z0-9_]+)\s*=\s*(.*?)\s*$")


def nccl_conf_files(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The configuration files NCCL consults, in precedence order (user file, then system file)."""
    env = os.environ if environ is None else environ
    user = env.get("NCCL_CONF_FILE") or str(Path(env.get("HOME", "~")).expanduser() / ".nccl.conf")
    return [Path(user), Path(_NCCL_SYSTEM_CONF)]


def nccl_effective_env(
    environ: Mapping[str, str] | None = None, conf_files: Sequence[str | os.PathLike[str]] | None = None
) -> dict[str, dict[str, str]]:
    """The NCCL_* variables NCCL will use and where each comes from (``env`` or a conf file).

    A variable set in the environment wins; otherwise the first conf file that sets it does,
    which is how NCCL itself loads them. Unreadable or absent files are skipped.
    """
    env = os.environ if environ is None else environ
    files = nccl_conf_files(env) if conf_files is None else [Path(f) for f in conf_files]
    effective = {k: {"value": v, "source": "env"} for k, v in sorted(env.items()) if k.startswith("NCCL_")}
    for path in files:
        try:
            lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            match = _CONF_LINE.match(line)
            if match and match[1] not in effective:
                effective[match[1]] = {"value": match[2], "source": str(path)}
    return dict(sorted(effective.items()))
