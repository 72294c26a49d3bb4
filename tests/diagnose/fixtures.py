"""Paths of the diagnose fixtures (recorded real outputs; sources in tests/data/diagnose/SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data"
DIAG = DATA / "diagnose"
LOGS = DIAG / "nccl-log"
LSPCI = DIAG / "lspci"
HOST = DIAG / "host"
THIS = HOST / "this-dev-container-2026"
NCCL_TESTS = DATA / "nccl-tests"

#: nccl-tests#293: 2 nodes x 1 A100 PCIe, HDR NIC on the other socket (documented cause of low bandwidth).
RUN_293_GDR = DIAG / "nccl-tests-293-allreduce-gdr-sys.txt"
RUN_293_NPS4 = DIAG / "nccl-tests-293-allreduce-nps4.txt"
RUN_293_NO_GDR = DIAG / "nccl-tests-293-allreduce-default-no-gdr.txt"
TOPO_293 = DIAG / "nccl-tests-293-topo.txt"


def topology(path: Path) -> dict[str, Any]:
    """The topology.json document of a saved ``nvidia-smi topo -m`` output."""
    from shardscope.topology.parse import parse_file

    return json.loads(json.dumps(parse_file(path).to_dict()))


def text(path: Path) -> str:
    """A fixture's text."""
    return path.read_text(encoding="utf-8")
