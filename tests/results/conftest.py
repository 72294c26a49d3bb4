"""Derived documents made by the real code on real recorded inputs: predictions, verdicts, doctor findings.

- predictions: :func:`shardscope.costmodel.documents.plan_predictions` for the plan the real
  planner makes from config/config.yaml on the HGX H200 fixture (tests/data/topo/01-…);
- verdicts: ``shardscope verdict --out`` on the nccl-tests#293 logs imported with
  ``shardscope collectives import --out``, against that issue's ``nvidia-smi topo -m``
  (tests/data/diagnose/SOURCES.md: a run its maintainers call low);
- doctor: the doctor's check functions on the readings recorded on this dev container
  (tests/data/diagnose/host/this-dev-container-2026) and on nccl#304's lspci output.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from diagnose.fixtures import LSPCI, RUN_293_GDR, RUN_293_NPS4, THIS, TOPO_293, text
from factories import REPO, default_config

from shardscope.cli import main
from shardscope.topology.parse import parse_file

H200 = REPO / "tests" / "data" / "topo" / "01-hgx-h200-nvswitch-nv18-12nics.txt"
CREATED_AT = "2026-11-29T00:00:00+00:00"


@pytest.fixture(scope="session")
def h200_topology() -> dict[str, Any]:
    """topology.json of the real 8x H200 NVSwitch probe output."""
    return json.loads(json.dumps(parse_file(H200).to_dict()))


@pytest.fixture(scope="session")
def h200_plan(h200_topology: dict[str, Any]) -> dict[str, Any]:
    """What `shardscope plan` makes of the default config on that machine."""
    from shardscope.plan.planner import make_plan

    config = default_config()
    return make_plan(h200_topology, config)


@pytest.fixture(scope="session")
def _predictions(h200_topology: dict[str, Any], h200_plan: dict[str, Any]) -> dict[str, Any]:
    from shardscope.costmodel.documents import plan_predictions

    return plan_predictions(h200_topology, h200_plan, "01-hgx-h200", created_at=CREATED_AT)


@pytest.fixture
def predictions_doc(_predictions: dict[str, Any]) -> dict[str, Any]:
    """The predictions document of the H200 plan (a fresh copy per test)."""
    return copy.deepcopy(_predictions)


@pytest.fixture(scope="session")
def verdict_inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The #293 topology.json, both runs imported as collect inputs, and the verdicts of those imports."""
    tmp = tmp_path_factory.mktemp("verdicts")
    topology = str(tmp / "topology.json")
    assert main(["topology", "parse", str(TOPO_293), "--out", topology]) == 0
    imports = []
    for log in (RUN_293_GDR, RUN_293_NPS4):
        out = str(tmp / f"{log.stem}.json")
        assert main(["collectives", "import", str(log), "--out", out]) == 0
        imports.append(out)
    verdicts = str(tmp / "verdicts.json")
    assert main(["verdict", *imports, "--topology", topology, "--out", verdicts]) == 0
    return {"topology": topology, "gdr": imports[0], "nps4": imports[1], "verdicts": verdicts}


@pytest.fixture
def verdicts_doc(verdict_inputs: dict[str, str]) -> dict[str, Any]:
    """The verdicts document (a fresh copy per test)."""
    return json.loads(Path(verdict_inputs["verdicts"]).read_text())


@pytest.fixture
def doctor_doc() -> dict[str, Any]:
    """A doctor document built from recorded readings, assembled as :func:`run_doctor` assembles it."""
    from shardscope.diagnose.doctor import SCHEMA
    from shardscope.diagnose.findings import skipped
    from shardscope.diagnose.host import (
        check_iommu,
        check_nccl_env,
        check_virtualization,
    )
    from shardscope.diagnose.pci import check_acs

    def first(name: str) -> str:
        return text(THIS / name).splitlines()[0]

    virt = {"detect_virt_vm": first("systemd-detect-virt--vm.txt"),
            "detect_virt_container": first("systemd-detect-virt--container.txt"),
            "cpu_hypervisor_flag": " hypervisor" in text(THIS / "proc_cpuinfo_flags.txt"),
            "dockerenv": text(THIS / "dockerenv_ls.txt").endswith("/.dockerenv\n"),
            "cgroup": text(THIS / "proc_1_cgroup.txt"), "shm_bytes": int(text(THIS / "df_dev_shm.txt").split()[1])}
    findings = [check_acs(text(LSPCI / "nccl-304-acsctl-grep-on-off.txt")),
                check_iommu(text(THIS / "proc_cmdline.txt"), text(THIS / "dmesg_grep_iommu.txt"), []),
                skipped("pcie_link", "NVML", "NVML unavailable (recorded on a machine without GPUs)"),
                check_nccl_env({}, "environment and nccl.conf"),
                check_virtualization(virt, "recorded readings")]
    summary = {s: sum(f.status == s for f in findings) for s in ("ok", "info", "warn", "fail", "skipped")}
    checked_at = text(THIS / "recorded_at.txt").strip().replace("Z", "+00:00")
    return {"schema": SCHEMA, "kind": "doctor", "host": "this-dev-container", "checked_at": checked_at,
            "topology": {"fabric": "cpu", "gpu_count": 0}, "findings": [f.to_dict() for f in findings], "summary": summary}
