"""Result documents shaped exactly like the workers write them, for tests of later stages.

The builders derive every bandwidth from raw bytes and seconds with the project's own
factors, so the documents are valid unless a test breaks them on purpose.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

from shardscope.contracts.factors import algbw_gbps, busbw_gbps

REPO = Path(__file__).resolve().parents[1]


#: The ``enabled:`` line of the shipped config's ``emulated`` section (its only ``enabled`` key), its value apart.
EMULATED_ENABLED = re.compile(r"(?m)^(  enabled: )(?:auto|true|false)(\b.*)$")


@cache
def default_config_text() -> str:
    """The shipped default config: config/config.yaml as committed (git HEAD), the working tree's file only where
    there is no git. Tests read this, never the working tree's file, so a user's edit of config/config.yaml (a
    strategy added, emulated on) changes no test's outcome (issue 32); a change of the default is seen once
    committed.

    One key differs from the shipped file: ``emulated.enabled`` is ``false``. The default (``auto``) builds network
    namespaces on a machine that allows it (root, ``ip``, ``tc``), and a test changes the machine only when
    SHARDSCOPE_SYSTEM_TESTS=1 asks for it (tests/emulated, and the tests that set it on themselves)."""
    shown = subprocess.run(["git", "show", "HEAD:config/config.yaml"], cwd=REPO, capture_output=True, text=True,
                           check=False)
    text = shown.stdout if shown.returncode == 0 and shown.stdout else (REPO / "config" / "config.yaml").read_text()
    off, count = EMULATED_ENABLED.subn(r"\g<1>false\g<2>", text)
    if count != 1:
        raise AssertionError("config/config.yaml: expected one emulated.enabled line")
    return off


def default_config() -> dict[str, Any]:
    """A fresh copy of the shipped default config (:func:`default_config_text`), parsed."""
    import yaml

    return yaml.safe_load(default_config_text())


@cache
def default_config_path() -> Path:
    """The shipped default config (:func:`default_config_text`) as a file, for commands that take --config PATH;
    written once per test process into a temporary folder removed at exit."""
    import atexit
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="shardscope-default-config-"))
    atexit.register(shutil.rmtree, folder, True)
    path = folder / "config.yaml"
    path.write_text(default_config_text())
    return path


def merged_config(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` merged in key by key, as Snakemake merges a --configfile over the config."""
    out = dict(base)
    for key, value in override.items():
        nested = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merged_config(out[key], value) if nested else value
    return out


def workflow_folder(folder: Path, override: dict[str, Any]) -> Path:
    """``folder`` set up to run the repository's Snakefile in (``snakemake --snakefile REPO/Snakefile`` with
    ``cwd=folder``): its own config/config.yaml, the shipped default with ``override`` merged in. The Snakefile's
    ``configfile: config/config.yaml`` is read from the working directory, so the working tree's config is never
    read, and Snakemake's bookkeeping (.snakemake/) stays in ``folder``."""
    import yaml

    (folder / "config").mkdir(parents=True, exist_ok=True)
    (folder / "config" / "config.yaml").write_text(yaml.safe_dump(merged_config(default_config(), override)))
    return folder


def snakemake_words(*extra: str) -> list[str]:
    """The command line running the repository's workflow (from a :func:`workflow_folder`) with ``extra``."""
    import sys

    return [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), *extra]


def collective_doc(op: str = "all_reduce", world_size: int = 2, host: str = "hostA", placement: str = "local",
                   transport: str = "default", seconds_per_byte: float = 1e-9, measured_at: str = "2026-11-29T00:00:00+00:00") -> dict[str, Any]:
    """A collectives job document with a sweep 1 KiB..1 MiB and a 10 us latency floor."""
    rows = []
    for size in (1024, 16384, 262144, 1048576):
        t = 10e-6 + size * seconds_per_byte
        rows.append({"op": op, "world_size": world_size, "dtype": "float32", "size_bytes": size, "count": size // 4,
                     "iters": 5, "warmup": 2, "time_s": t, "time_max_s": t * 1.1, "algbw_gbps": algbw_gbps(size, t),
                     "busbw_gbps": busbw_gbps(op, world_size, size, t), "in_place": op == "all_reduce", "check_ok": True})
    return {
        "schema": "shardscope.collectives/1", "kind": "collectives",
        "job": {"job_id": f"{op}-ws{world_size}-{placement}-{transport}", "op": op, "world_size": world_size,
                "placement": placement, "transport": transport, "dtype": "float32"},
        "env": {"host": host, "measured_at": measured_at, "torch": "2.13.0", "backend": "gloo", "device_type": "cpu",
                "devices": ["cpu"], "comm_library": "gloo"},
        "rows": rows,
    }


#: bytes per parameter held (params, grads, optimizer) per strategy on 2 ranks in fp32, as measured.
HELD_PER_PARAM = {"ddp": (4, 4, 8), "fsdp": (2, 2, 4), "zero1": (4, 2, 6), "zero2": (4, 2, 6), "zero3": (2, 2, 6)}


def training_doc(strategy: str = "ddp", host: str = "hostA", step_time_s: float = 0.02, n_params: int = 787072,
                 outcome: str = "ok", measured_at: str = "2026-11-29T00:00:00+00:00") -> dict[str, Any]:
    """A training job document for the tiny model on 2 ranks."""
    p, g, o = HELD_PER_PARAM.get(strategy, (4, 4, 8))
    ok = outcome == "ok"
    return {
        "schema": "shardscope.training/1", "kind": "training",
        "job": {"job_id": f"{strategy}-tiny-ws2-local", "strategy": strategy, "model": "tiny", "param_count": n_params,
                "world_size": 2, "placement": "local", "dtype": "float32", "micro_batch": 2, "seq_len": 64,
                "deepspeed_config": {"zero_optimization": {"stage": int(strategy[-1])}} if strategy.startswith("zero") else None},
        "env": {"host": host, "measured_at": measured_at, "torch": "2.13.0", "backend": "gloo", "device_type": "cpu",
                "devices": ["cpu"], "deepspeed": "0.19.8"},
        "outcome": outcome,
        "error": None if ok else "OutOfMemoryError: CUDA out of memory",
        "summary": {"median_step_time_s": step_time_s, "tokens_per_step": 256, "tokens_per_s": 256 / step_time_s,
                    "mfu": None, "peak_memory_bytes": 400_000_000, "peak_memory_method": "rss_peak"} if ok else {},
        "steps": [{"step": i, "step_time_s": step_time_s * (1 + 0.01 * i), "loss": 6.9} for i in range(3)] if ok else [],
        "ranks": [{"rank": r, "param_bytes": p * n_params, "grad_bytes": g * n_params, "optim_bytes": o * n_params,
                   "peak_memory_bytes": 400_000_000} for r in range(2)] if ok else [],
    }


def write_docs(folder: Path, docs: list[dict[str, Any]]) -> list[str]:
    """Write documents as JSON files named after their job; return the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, doc in enumerate(docs):
        path = folder / f"{i:02d}-{doc['job']['job_id']}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    return paths


def with_run_predictions(paths: list[str]) -> list[str]:
    """``paths`` and the predictions stage's document of their training runs (``shardscope predict runs``), as the
    pipeline collects them: collect runs no model, so the runs' modeled memory rows come from that document."""
    from shardscope.costmodel.run_predictions import run_predictions

    docs = [json.loads(Path(p).read_text()) for p in paths]
    return [*paths, write_json(Path(paths[0]).parent / "run_predictions.json", run_predictions(docs))]


def write_json(path: Path, doc: Any) -> str:
    """Write ``doc`` to ``path`` (folders made); return the path as collect takes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))
    return str(path)


def query_db(db: Path, sql: str) -> list[tuple]:
    """Rows of ``sql`` on the database ``db``, opened read-only."""
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def file_digest(path: Path) -> str:
    """sha256 of a file, to prove a database was left byte-for-byte unchanged."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def worker_spec(folder: Path, *train_flags: str) -> Path:
    """The spec file the training worker reads (``--spec``), built from ``shardscope train`` flags the way the
    command builds it (:func:`shardscope.training.commands.training_spec`), for tests that start the worker
    under torchrun themselves."""
    from shardscope.cli import build_parser
    from shardscope.training.commands import training_spec
    from shardscope.training.launch import write_spec

    job = training_spec(build_parser().parse_args(["train", *train_flags, "--out", "unused", "--log", "unused"]))
    return write_spec(job, folder)
