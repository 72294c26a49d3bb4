"""Shared fixtures: sample result documents, a database loaded from them, and drawn figures.

The figure and report tests draw the sample database once per module (``drawn``,
``drawn_with_reference``); ``gpu_db`` is a database as a GPU node's pipeline writes it
(predictions, verdicts, doctor findings, emulated-fabric runs; constructed, and marked so),
for the modeled overlay, the verdicts and the report sections.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from factories import REPO, collective_doc, default_config, training_doc, with_run_predictions, write_docs


@pytest.fixture
def sample_docs() -> list[dict[str, Any]]:
    """A small but complete set: three ops and five strategies on one host."""
    docs = [collective_doc(op) for op in ("all_reduce", "all_gather", "reduce_scatter")]
    docs += [training_doc(s, step_time_s=0.02 * f) for s, f in
             (("ddp", 1.0), ("fsdp", 1.5), ("zero1", 1.05), ("zero2", 1.1), ("zero3", 1.6))]
    return copy.deepcopy(docs)


@pytest.fixture
def sample_db(tmp_path: Path, sample_docs: list[dict[str, Any]]) -> Path:
    """A database loaded from :func:`sample_docs` with the real collect."""
    from shardscope.results.store import collect

    db = tmp_path / "db" / "shardscope.duckdb"
    collect(db, write_docs(tmp_path / "inputs", sample_docs))
    return db

@pytest.fixture(scope="module")
def reference_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference database built from the bundled public nccl-tests logs with the real collect."""
    from shardscope.reference.build import build_reference_db

    folder = tmp_path_factory.mktemp("reference")
    build_reference_db(folder / "reference.duckdb", folder)
    return folder / "reference.duckdb"


@pytest.fixture(scope="module")
def module_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documents of tests/conftest.py's ``sample_docs`` (three ops, five strategies) and the predictions stage's
    document of their training runs, loaded once per module as the pipeline loads them."""
    from shardscope.results.store import collect

    docs = [collective_doc(op) for op in ("all_reduce", "all_gather", "reduce_scatter")]
    docs += [training_doc(s, step_time_s=0.02 * f) for s, f in
             (("ddp", 1.0), ("fsdp", 1.5), ("zero1", 1.05), ("zero2", 1.1), ("zero3", 1.6))]
    folder = tmp_path_factory.mktemp("module_db")
    collect(folder / "shardscope.duckdb", with_run_predictions(write_docs(folder / "inputs", docs)))
    return folder / "shardscope.duckdb"


@pytest.fixture(scope="module")
def drawn(module_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every figure of ``module_db``, without reference runs (so every row is the database's own)."""
    from shardscope.figures.plots import draw_all

    out = tmp_path_factory.mktemp("figures")
    draw_all(module_db, out)
    return out


@pytest.fixture(scope="module")
def drawn_with_reference(module_db: Path, reference_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every figure of ``module_db`` with the reference runs beside them."""
    from shardscope.figures.plots import draw_all

    out = tmp_path_factory.mktemp("figures_ref")
    draw_all(module_db, out, reference_db=reference_db)
    return out


# --- A database as a GPU node writes it: topology, predictions, verdicts, doctor, emulated runs ---------
#
# The topology is a real probe (tests/data/topo/01-…, 8x H200 on NVSwitch); predictions are what
# the real planner and cost model make of config/config.yaml on it; verdicts are
# `shardscope verdict`'s evaluate() on the measured files; doctor findings come from the real check
# functions. The measured GPU sweeps and training runs are CONSTRUCTED (no GPU here): their
# bandwidths are derived from bytes and seconds with the project's own factors.

H200_TOPO = REPO / "tests" / "data" / "topo" / "01-hgx-h200-nvswitch-nv18-12nics.txt"
GPU_AT = "2026-11-29T10:00:00+00:00"
#: (op, transport, plateau busbw in GB/s) of the CONSTRUCTED GPU sweeps on 8 ranks.
GPU_SWEEPS = (("all_reduce", "default", 450.0), ("all_reduce", "pcie", 5.0))
#: (preset, strategy, step time s or None for a run that ran out of memory) of the emulated runs.
EMULATED = (("fast", "ddp", 0.02), ("pcie_like", "ddp", 0.05), ("fast", "zero3", 0.03),
            ("pcie_like", "zero3", 0.12), ("nvl_groups", "zero3", None))


def gpu_collective_doc(op: str, transport: str, busbw: float, world_size: int = 8) -> dict:
    """A collectives job document of 8 H200s: 10 us latency, then ``busbw`` GB/s (1 KiB .. 256 MiB)."""
    from shardscope.contracts.factors import algbw_gbps, busbw_factor, busbw_gbps

    rows = []
    for k in range(0, 19, 2):
        size = 1024 << k
        t = 10e-6 + size * busbw_factor(op, world_size) / (busbw * 1e9)
        rows.append({"op": op, "world_size": world_size, "dtype": "float32", "size_bytes": size, "count": size // 4,
                     "iters": 20, "warmup": 5, "time_s": t, "time_max_s": t * 1.02, "algbw_gbps": algbw_gbps(size, t),
                     "busbw_gbps": busbw_gbps(op, world_size, size, t), "in_place": False, "check_ok": True})
    return {"schema": "shardscope.collectives/1", "kind": "collectives",
            "job": {"job_id": f"{op}-ws{world_size}-all-{transport}", "op": op, "world_size": world_size,
                    "placement": "all", "transport": transport, "dtype": "float32"},
            "env": {"host": "gpuhost", "measured_at": GPU_AT, "torch": "2.13.0", "backend": "nccl", "device_type": "cuda",
                    "devices": ["NVIDIA H200"] * world_size, "comm_library": "nccl 2.21.5"},
            "rows": rows}


def gpu_training_doc(strategy: str, step_time_s: float) -> dict:
    """A training job of gpt2-small on 8 H200s (the model and GPU count the planner predicts for)."""
    doc = training_doc(strategy, host="gpuhost", step_time_s=step_time_s, measured_at=GPU_AT)
    doc["job"].update(job_id=f"{strategy}-gpt2-small-ws8-all", model="gpt2-small", world_size=8, placement="all")
    doc["env"].update(device_type="cuda", devices=["NVIDIA H200"] * 8, backend="nccl")
    doc["summary"]["tokens_per_s"] = 2 * 64 * 8 / step_time_s
    return doc


def emulated_training_doc(preset: str, strategy: str, step_time_s: float | None) -> dict:
    """A training job measured over an emulated fabric (``job.fabric`` emulated:<preset>, as the launcher labels it)."""
    doc = training_doc(strategy, host="emuhost", step_time_s=step_time_s or 0.02,
                       outcome="ok" if step_time_s else "oom", measured_at=GPU_AT)
    doc["job"].update(job_id=f"{strategy}-tiny-ws2-all@{preset}", placement=f"all@{preset}", fabric=f"emulated:{preset}")
    return doc


def doctor_doc() -> dict:
    """A doctor document of real check functions: the recorded ACS lspci of nccl#304 and a CONSTRUCTED NCCL setting."""
    from diagnose.fixtures import LSPCI, text

    from shardscope.diagnose.doctor import SCHEMA
    from shardscope.diagnose.host import check_nccl_env
    from shardscope.diagnose.pci import check_acs

    findings = [check_acs(text(LSPCI / "nccl-304-acsctl-grep-on-off.txt")),
                check_nccl_env({"NCCL_P2P_DISABLE": "1"}, "environment")]
    summary = {s: sum(f.status == s for f in findings) for s in ("ok", "info", "warn", "fail", "skipped")}
    return {"schema": SCHEMA, "kind": "doctor", "host": "gpuhost", "checked_at": GPU_AT,
            "topology": {"fabric": "nvswitch", "gpu_count": 8}, "findings": [f.to_dict() for f in findings],
            "summary": summary}


@pytest.fixture(scope="module")
def gpu_db(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Everything a GPU node's pipeline loads, collected in one call (so verdicts link their runs)."""
    import yaml

    from shardscope.costmodel.documents import plan_predictions, topology_hash
    from shardscope.diagnose.evaluate import evaluate
    from shardscope.plan.planner import make_plan
    from shardscope.results.store import collect
    from shardscope.topology.parse import parse_file

    folder = tmp_path_factory.mktemp("gpu_db")
    topology = json.loads(json.dumps(parse_file(H200_TOPO).to_dict()))
    plan = make_plan(topology, default_config())
    docs = [gpu_collective_doc(op, transport, busbw) for op, transport, busbw in GPU_SWEEPS]
    docs += [gpu_training_doc(s, t) for s, t in (("ddp", 0.05), ("zero3", 0.08))]
    docs += [emulated_training_doc(*run) for run in EMULATED]
    paths = write_docs(folder / "inputs", docs)
    collectives = paths[:len(GPU_SWEEPS)]
    verdicts = evaluate(collectives, topology, "01-hgx-h200")
    verdicts["topology_hash"] = topology_hash(topology)
    derived = {"topology.json": topology, "predictions.json": plan_predictions(topology, plan, "01-hgx-h200", created_at=GPU_AT),
               "verdicts.json": verdicts, "doctor.json": doctor_doc()}
    for name, doc in derived.items():
        (folder / name).write_text(json.dumps(doc))
    collect(folder / "gpu.duckdb", [*paths, *(str(folder / name) for name in derived)])
    return {"db": folder / "gpu.duckdb", "topology_hash": topology_hash(topology), "collectives": collectives,
            "emulated": EMULATED}


@pytest.fixture(scope="module")
def drawn_gpu(gpu_db: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every figure of ``gpu_db``, without reference runs."""
    from shardscope.figures.plots import draw_all

    out = tmp_path_factory.mktemp("figures_gpu")
    draw_all(gpu_db["db"], out)
    return out
