"""Config validation against workflow/schemas/config.schema.yaml, and the config hash."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from shardscope.config import config_hash, key_path, validate_config
from shardscope.errors import UserError
from factories import default_config

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


@pytest.fixture
def config() -> dict[str, Any]:
    return default_config()


def test_repository_config_is_valid(config: dict[str, Any]) -> None:
    validate_config(config, SCHEMA)
    validate_config(config, str(SCHEMA))


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c.update(world_sizes=[2, 4, 8]),
        lambda c: c["training"].update(world_sizes=[2, 8], memory_budget_gib=80),
        lambda c: c["training"].update(memory_budget_gib=79.5),
        lambda c: c["cpu"].update(model={"preset": "tiny", "n_layers": 1, "name": "mini"}),
        lambda c: c["gpu"].update(model={"n_layers": 2, "d_model": 64, "n_heads": 4, "n_kv_heads": 2, "d_ff": 128,
                                         "vocab_size": 256, "tie_embeddings": True}),
        lambda c: c["collectives"].update(ops=["all_to_all", "sendrecv", "broadcast", "reduce"], transports=["default"]),
        lambda c: c["topology"].update(file="tests/data/topo/01-hgx-h200-nvswitch-nv18-12nics.txt"),
        lambda c: c["cpu"].update(ranks=4),
    ],
    ids=["ws-list", "train-ws-budget", "budget-float", "cpu-model-dict", "gpu-model-explicit", "other-ops",
         "topology-file", "cpu-ranks-4"],
)
def test_valid_variations_are_accepted(config: dict[str, Any], change: Any) -> None:
    change(config)
    validate_config(config, SCHEMA)


def _reject(config: dict[str, Any], *fragments: str) -> str:
    with pytest.raises(UserError) as info:
        validate_config(config, SCHEMA)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    assert "\n" not in message.strip()  # one sentence, not a dump of the schema
    return message


def test_unknown_strategy(config: dict[str, Any]) -> None:
    config["training"]["strategies"][0] = "ddpp"
    _reject(config, "training.strategies[0]", "'ddpp'")


@pytest.mark.parametrize("value", ["on", 2, True])
def test_hpz_is_auto_or_off(config: dict[str, Any], value: Any) -> None:
    config["training"]["hpz"] = value
    _reject(config, "training.hpz", repr(value))


@pytest.mark.parametrize("key", ["hsdp", "hpz"])
def test_an_unquoted_off_switches_hsdp_and_hpz_off(config: dict[str, Any], key: str) -> None:
    config["training"][key] = yaml.safe_load("off")  # YAML 1.1: an unquoted off is the boolean false
    assert config["training"][key] is False
    validate_config(config, SCHEMA)


def test_hpz_is_a_known_strategy(config: dict[str, Any]) -> None:
    config["training"]["strategies"].append("zero3_hpz")
    validate_config(config, SCHEMA)
    config["training"]["strategies"][-1] = "hpz"
    _reject(config, f"training.strategies[{len(config['training']['strategies']) - 1}]", "'hpz'")


@pytest.mark.parametrize("ranks", [0, 1])
def test_cpu_ranks_below_two(config: dict[str, Any], ranks: int) -> None:
    config["cpu"]["ranks"] = ranks
    _reject(config, "cpu.ranks", str(ranks))


def test_string_where_a_number_belongs(config: dict[str, Any]) -> None:
    config["cpu"]["steps"] = "ten"
    _reject(config, "cpu.steps", "'ten'", "integer")


def test_nested_number(config: dict[str, Any]) -> None:
    config["gpu"]["sweep"]["factor"] = 1
    _reject(config, "gpu.sweep.factor")


def test_unknown_top_level_key(config: dict[str, Any]) -> None:
    config["strategy"] = ["ddp"]
    _reject(config, "'strategy'")


def test_unknown_op(config: dict[str, Any]) -> None:
    config["collectives"]["ops"].append("allreduce")
    _reject(config, "collectives.ops[3]", "'allreduce'")


def test_bad_world_sizes(config: dict[str, Any]) -> None:
    config["world_sizes"] = [2, 0]
    _reject(config, "world_sizes[1]")


def test_bad_model_preset_inside_one_of(config: dict[str, Any]) -> None:
    config["cpu"]["model"] = {"preset": "gpt3"}
    _reject(config, "cpu.model.preset", "'gpt3'")


def test_missing_required_key(config: dict[str, Any]) -> None:
    del config["cpu"]["ranks"]
    _reject(config, "cpu", "'ranks'")


def test_unknown_nested_key(config: dict[str, Any]) -> None:
    config["cpu"]["step"] = 5
    _reject(config, "cpu", "'step'")


def test_validation_does_not_change_the_config(config: dict[str, Any]) -> None:
    before = copy.deepcopy(config)
    validate_config(config, SCHEMA)
    assert config == before


def test_key_path_formatting() -> None:
    assert key_path(["training", "strategies", 0]) == "training.strategies[0]"
    assert key_path(["gpu", "sweep", "factor"]) == "gpu.sweep.factor"
    assert key_path([]) == "(top level)"


# --------------------------------------------------------------------------- hash


def test_config_hash_is_stable_and_short(config: dict[str, Any]) -> None:
    h = config_hash(config)
    assert len(h) == 12 and all(c in "0123456789abcdef" for c in h)
    assert config_hash(copy.deepcopy(config)) == h
    reloaded = default_config()
    assert config_hash(reloaded) == h


def _reverse_keys(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _reverse_keys(obj[k]) for k in reversed(list(obj))}
    if isinstance(obj, list):
        return [_reverse_keys(v) for v in obj]
    return obj


def test_config_hash_ignores_key_order(config: dict[str, Any]) -> None:
    reordered = _reverse_keys(config)
    assert list(reordered) != list(config)
    assert list(reordered["cpu"]) != list(config["cpu"])
    assert config_hash(reordered) == config_hash(config)


def test_config_hash_changes_with_any_value(config: dict[str, Any]) -> None:
    base = config_hash(config)
    changed = copy.deepcopy(config)
    changed["cpu"]["sweep"]["iters"] += 1
    assert config_hash(changed) != base
    reordered_list = copy.deepcopy(config)
    reordered_list["training"]["strategies"].reverse()  # list order is meaningful
    assert config_hash(reordered_list) != base


@pytest.mark.parametrize(("make", "fragment"), [(lambda d: d / "missing.txt", "does not exist"),
                                                 (lambda d: d, "is not a file")], ids=["missing", "a-folder"])
def test_topology_file_must_be_a_readable_file(config: dict[str, Any], tmp_path: Path, make: Any, fragment: str) -> None:
    path = make(tmp_path)
    config["topology"]["file"] = str(path)
    _reject(config, "topology.file", str(path), fragment, "nvidia-smi topo -m")
