"""One doctor finding: what a check read, what it concluded, what to do, and which shortfall it explains."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from shardscope.contracts.names import FINDING_STATUSES

#: The statuses a finding may have (:data:`shardscope.contracts.names.FINDING_STATUSES`).
STATUSES = FINDING_STATUSES


@dataclass(frozen=True)
class Finding:
    """The result of one check, for people (text) and for tools (``to_dict``)."""

    check: str
    status: str
    read: str
    """What the check read (files, commands, values)."""
    concluded: str
    action: str | None = None
    explains: str | None = None
    """The shortfall this finding explains (which traffic it slows), when it is not ``ok``."""
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (the ``shardscope doctor --json`` contract)."""
        return asdict(self)


def skipped(check: str, read: str, why: str) -> Finding:
    """A check that could not run on this machine, and why."""
    return Finding(check, "skipped", read, why)
