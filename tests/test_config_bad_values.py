"""Every config key, given a bad value, stops the run before any job with one sentence that names it.

What the pipeline does before the first job: the Snakefile validates the config against the schema
(:func:`shardscope.config.validate_config`), then the plan rule plans (``shardscope plan``), on this CPU
node or a GPU node. A bad value must stop one of the two with a :class:`UserError` (exit status 2): one
line, naming the key. Before this test 6 of 29 probed values got through to a job (``cpu.steps: 10**12``
was accepted; a sequence longer than the model's stopped only inside the job).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from shardscope.config import validate_config
from shardscope.errors import UserError
from shardscope.plan.machine import MachineProbe
from shardscope.plan.planner import make_plan, planner_config
from shardscope.topology.detect import detect_cpu_only
from shardscope.topology.parse import parse_file

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
BARE = MachineProbe(which=lambda name: None, emulated_problem=lambda delay, prefix: None)
GPU_TOPOLOGY = parse_file(REPO / "tests" / "data" / "topo" / "01-hgx-h200-nvswitch-nv18-12nics.txt").to_dict()
CPU_TOPOLOGY = detect_cpu_only().topology.to_dict()

#: (key, bad value, what the sentence must name): types, ranges, unknown names, negative sizes, huge counts.
BAD = [
    ("results", "", "results"), ("results", 5, "results"), ("db", None, "db"), ("topology.file", 5, "topology.file"),
    ("world_sizes", [0], "world_sizes"), ("world_sizes", [], "world_sizes"), ("world_sizes", "all", "world_sizes"),
    ("world_sizes", [2, 2], "world_sizes"), ("world_sizes", [10**9], "world_sizes"),
    ("collectives.ops", [], "collectives.ops"), ("collectives.ops", ["allreduce"], "collectives.ops"),
    ("collectives.dtype", "int8", "collectives.dtype"), ("collectives.transports", ["nvlink"], "collectives.transports"),
    ("collectives.check", "yes", "collectives.check"), ("collectives.timeout_s", 0, "collectives.timeout_s"),
    ("collectives.timeout_s", "300", "collectives.timeout_s"), ("collectives.timeout_s", 10**9, "collectives.timeout_s"),
    ("collectives.job_timeout_s", -1, "collectives.job_timeout_s"),
    ("collectives.job_timeout_s", 10**12, "collectives.job_timeout_s"),
    ("training.strategies", [], "training.strategies"), ("training.strategies", ["ddpp"], "training.strategies"),
    ("training.world_sizes", [0], "training.world_sizes"), ("training.world_sizes", "min", "training.world_sizes"),
    ("training.conditions", {"pcie": ["ddpp"]}, "training.conditions"),
    ("training.conditions", {"weird": ["ddp"]}, "training.conditions"),
    ("training.memory_bound", {"model": "gpt5"}, "training.memory_bound"),
    ("training.memory_bound", {"model": "tiny", "seq_len": 0}, "training.memory_bound"),
    ("training.memory_bound", {"model": "tiny", "seq_len": 10**7}, "training.memory_bound"),
    ("training.search", {"limit": 0}, "training.search"), ("training.search", {"limit": 10**9}, "training.search"),
    ("training.search", {"limit": 4, "global_batch": -1}, "training.search"),
    ("training.memory_budget_gib", 0, "training.memory_budget_gib"),
    ("training.memory_budget_gib", "80", "training.memory_budget_gib"),
    ("training.activation_checkpointing", "some", "training.activation_checkpointing"),
    ("training.optimizer", "sgd", "training.optimizer"), ("training.optimizer", "adamw_bf16_states", "training.optimizer"),
    ("training.hsdp", "on", "training.hsdp"), ("training.hpz", "yes", "training.hpz"),
    ("training.reduce_dtype", "float16", "training.reduce_dtype"), ("training.buckets", "huge", "training.buckets"),
    ("training.timeout_s", 0, "training.timeout_s"), ("training.timeout_s", 10**9, "training.timeout_s"),
    ("training.job_timeout_s", "never", "training.job_timeout_s"), ("training.job_timeout_s", -5, "training.job_timeout_s"),
    ("cpu.ranks", 1, "cpu.ranks"), ("cpu.ranks", 10**6, "cpu.ranks"),
    ("cpu.sweep", {"min_bytes": 0, "max_bytes": 1024, "factor": 2, "warmup": 1, "iters": 1}, "cpu.sweep"),
    ("cpu.sweep", {"min_bytes": 4096, "max_bytes": 1024, "factor": 2, "warmup": 1, "iters": 1}, "min_bytes"),
    ("cpu.sweep", {"min_bytes": 1, "max_bytes": 1024, "factor": 1, "warmup": 1, "iters": 1}, "cpu.sweep"),
    ("cpu.sweep", {"min_bytes": 1, "max_bytes": 2**50, "factor": 2, "warmup": 1, "iters": 1}, "cpu.sweep"),
    ("cpu.sweep", {"min_bytes": 1, "max_bytes": 1024, "factor": 2, "warmup": 1, "iters": 10**9}, "cpu.sweep"),
    ("cpu.model", "gpt5", "cpu.model"), ("cpu.model", {"n_layers": 0}, "cpu.model"),
    ("cpu.model", {"preset": "tiny", "d_model": 10, "n_heads": 3}, "model_spec"),
    ("cpu.model", {"preset": "tiny", "n_layers": 10**9}, "cpu.model"),
    ("cpu.dtype", "float16", "cpu.dtype"), ("cpu.micro_batch", 0, "cpu.micro_batch"),
    ("cpu.micro_batch", -1, "cpu.micro_batch"), ("cpu.micro_batch", 2.5, "cpu.micro_batch"),
    ("cpu.micro_batch", 10**9, "cpu.micro_batch"), ("cpu.seq_len", 0, "cpu.seq_len"),
    ("cpu.seq_len", 100_000, "seq_len"), ("cpu.warmup", 0, "cpu.warmup"), ("cpu.warmup", 10**9, "cpu.warmup"),
    ("cpu.steps", 0, "cpu.steps"), ("cpu.steps", 10**12, "cpu.steps"), ("cpu.steps", "1e12", "cpu.steps"),
    ("cpu.repeats", 0, "cpu.repeats"), ("cpu.repeats", 10**6, "cpu.repeats"),
    ("gpu.steps", 10**12, "gpu.steps"), ("gpu.micro_batch", 0, "gpu.micro_batch"), ("gpu.seq_len", 10**7, "seq_len"),
    ("cluster.nodes", 0, "cluster.nodes"), ("cluster.nodes", 10**6, "cluster.nodes"),
    ("cluster.gpus_per_node", 0, "cluster.gpus_per_node"),
    ("emulated.enabled", "yes", "emulated.enabled"), ("emulated.timeout_s", 5, "emulated.timeout_s"),
    ("emulated.training", {"micro_batch": 0}, "emulated.training"), ("emulated.prefix", "BAD", "emulated.prefix"),
]


def _with(config: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(config)
    *parents, last = key.split(".")
    node = changed
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return changed


def _stop_before_any_job(config: dict[str, Any]) -> UserError | None:
    """What stops ``config`` before the first job: the schema check, or the plan on this CPU node or a GPU node."""
    try:
        validate_config(config, SCHEMA)
        for topology in (CPU_TOPOLOGY, GPU_TOPOLOGY):
            make_plan(copy.deepcopy(topology), planner_config(config), BARE)
    except UserError as exc:
        return exc
    return None


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


@pytest.mark.parametrize(("key", "value", "named"), BAD, ids=[f"{k}={v!r}"[:60] for k, v, _ in BAD])
def test_a_bad_value_stops_before_any_job_with_one_sentence(config: dict[str, Any], key: str, value: Any,
                                                            named: str) -> None:
    stopped = _stop_before_any_job(_with(config, key, value))
    assert stopped is not None, f"config key {key}: {value!r} was planned"
    message = str(stopped)
    assert "\n" not in message and named in message, message
