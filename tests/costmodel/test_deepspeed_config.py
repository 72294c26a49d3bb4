"""``--deepspeed-config``: a run's own DeepSpeed config read into the buckets, overlap and ZeRO-3 limits the memory and
step models use, in place of DeepSpeed's defaults."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shardscope.contracts.models import PRESETS
from shardscope.contracts.strategies import DEEPSPEED_BUCKET_ELEMENTS
from shardscope.costmodel.answer import job_peak
from shardscope.costmodel.deepspeed_config import DeepSpeedKnobs, read_deepspeed_config, run_knobs
from shardscope.costmodel.deepspeed_estimate import largest_layer_params
from shardscope.costmodel.memory_peak import zero3_kept_after_forward
from shardscope.costmodel.step import StepAssumptions, messages_for

MISTRAL = PRESETS["mistral-7b"]


def _write(tmp_path: Path, doc: object) -> str:
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_an_empty_config_is_deepspeeds_defaults_and_auto_is_hugging_faces(tmp_path: Path) -> None:
    assert read_deepspeed_config(_write(tmp_path, {}), 4096) == DeepSpeedKnobs(source=str(tmp_path / "ds_config.json"))
    auto = read_deepspeed_config(_write(tmp_path, {"zero_optimization": {
        "stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto", "overlap_comm": True,
        "allgather_bucket_size": 2e8, "stage3_max_live_parameters": 1e8, "offload_optimizer": {"device": "cpu"},
        "sub_group_size": 5e8}}), 4096)
    assert (auto.reduce_bucket_elements, auto.prefetch_bucket_elements) == (4096 * 4096, int(0.9 * 4096 * 4096))
    assert (auto.allgather_bucket_elements, auto.max_live_parameters, auto.overlap_comm, auto.offload_optimizer,
            auto.stage, auto.sub_group_elements) == (200_000_000, 100_000_000, True, "cpu", 3, 500_000_000)


@pytest.mark.parametrize(("doc", "fragment"), [
    ([], "a DeepSpeed config is a JSON object"),
    ({"zero_optimization": {"reduce_bucket_size": -5}}, "zero_optimization.reduce_bucket_size must be a positive"),
    ({"zero_optimization": {"stage3_max_live_parameters": "many"}}, "stage3_max_live_parameters must be"),
    ({"zero_optimization": {"overlap_comm": "yes"}}, "overlap_comm must be true, false"),
    ({"zero_optimization": {"stage": 4}}, "stage must be 0, 1, 2 or 3"),
    ({"zero_optimization": {"sub_group_size": 0}}, "zero_optimization.sub_group_size must be a positive"),
    ({"zero_optimization": {"offload_optimizer": {"device": "nvme"}}}, "nvme is not modeled"),
], ids=["not-object", "negative", "word", "overlap", "stage", "sub-group", "nvme"])
def test_bad_config_is_one_sentence_naming_file_and_key(tmp_path: Path, doc: object, fragment: str) -> None:
    path = _write(tmp_path, doc)
    with pytest.raises(ValueError) as err:
        read_deepspeed_config(path, 4096)
    assert str(err.value).startswith(f"{path}: ") and fragment in str(err.value) and "\n" not in str(err.value)


def test_the_2021_cpu_offload_key_is_read_as_offload_optimizer(tmp_path: Path) -> None:
    """Hugging Face's 2021 ZeRO-2 configs say ``"cpu_offload": true``, DeepSpeed's key before offload_optimizer."""
    assert read_deepspeed_config(_write(tmp_path, {"zero_optimization": {"cpu_offload": True}}), 1024) \
        .offload_optimizer == "cpu"
    assert read_deepspeed_config(_write(tmp_path, {"zero_optimization": {"cpu_offload": False}}), 1024) \
        .offload_optimizer == "none"


def test_the_files_offload_applies_unless_the_flag_says_otherwise(tmp_path: Path) -> None:
    cpu = _write(tmp_path, {"zero_optimization": {"offload_optimizer": {"device": "cpu"}}})
    assert run_knobs(cpu, 4096, "none")[1] == "cpu" and run_knobs(None, 4096, "cpu") == (None, "cpu")
    none = _write(tmp_path, {"zero_optimization": {"offload_optimizer": {"device": "none"}}})
    with pytest.raises(ValueError, match="--offload-optimizer cpu and .*offload_optimizer.device none disagree"):
        run_knobs(none, 4096, "cpu")


def test_the_reduce_bucket_and_overlap_of_the_config_size_zero2s_buffers() -> None:
    """ZeRO-2 holds reduce_bucket_size elements in the training dtype, twice with overlap_comm."""
    a = StepAssumptions(micro_batch=1, seq_len=1024)
    default = job_peak("zero2", MISTRAL, 8, a).phases["backward_blocks"]["reduce_bucket"]
    small = job_peak("zero2", MISTRAL, 8, StepAssumptions(micro_batch=1, seq_len=1024, deepspeed=DeepSpeedKnobs(
        reduce_bucket_elements=200_000_000, overlap_comm=True))).phases["backward_blocks"]["reduce_bucket"]
    assert (default, small) == (DEEPSPEED_BUCKET_ELEMENTS * 2, 2 * 200_000_000 * 2)


def test_zero3_holds_what_its_reuse_distance_keeps_whatever_the_live_limit() -> None:
    a = {"micro_batch": 1, "seq_len": 1024}

    def gathered(**knobs: int) -> int:
        return job_peak("zero3", MISTRAL, 8, StepAssumptions(**a, deepspeed=DeepSpeedKnobs(**knobs))).phases[
            "forward"]["gathered_params"]

    reuse_kept = zero3_kept_after_forward(MISTRAL, 1_000_000_000)
    assert 400_000_000 < reuse_kept < 600_000_000  # 7.2 B parameters: about the last half of the distance's worth
    # DeepSpeed's defaults: the prefetch fills the live limit, whatever the reuse distance
    assert gathered() == gathered(max_reuse_distance=100_000_000) == 2 * 1_000_000_000
    # a live limit below what the reuse distance keeps stops the prefetch; the distance still keeps its share
    assert gathered(max_live_parameters=300_000_000) == gathered(max_live_parameters=30_000_000) == 2 * reuse_kept
    # a distance shorter than any module's next use and no prefetch: only the module computing, the embedding's size
    assert gathered(max_reuse_distance=1, max_live_parameters=1) == 2 * largest_layer_params(MISTRAL)


def test_the_step_model_sends_the_configs_buckets() -> None:
    knobs = DeepSpeedKnobs(reduce_bucket_elements=100_000_000, allgather_bucket_elements=50_000_000)
    messages = messages_for("zero2", MISTRAL, StepAssumptions(deepspeed=knobs), 8)
    sizes = {m.op: m.size_bytes for m in messages if m.count > 1 or m.op == "all_gather"}
    assert sizes["reduce_scatter"] == 100_000_000 * 2 and max(
        m.size_bytes for m in messages if m.op == "all_gather") == 50_000_000 * 2


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardscope", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_advise_and_memory_take_the_config_and_refuse_a_bad_one(tmp_path: Path) -> None:
    path = _write(tmp_path, {"zero_optimization": {"stage": 2, "reduce_bucket_size": 2e8, "overlap_comm": True}})
    memory = _cli("memory", "--model", "mistral-7b", "--gpus", "8", "--strategy", "zero2", "--seq-len", "1024",
                  "--deepspeed-config", path, "--json")
    assert memory.returncode == 0, memory.stderr
    assert json.loads(memory.stdout)[0]["peak"]["phases"]["backward_blocks"]["reduce_bucket"] == 2 * 200_000_000 * 2
    advise = _cli("advise", "--topology", "preset:hgx-h100", "--model", "mistral-7b", "--gpus", "8",
                  "--strategies", "zero2", "--deepspeed-config", path, "--json")
    assert advise.returncode == 0, advise.stderr
    bad = _cli("memory", "--model", "mistral-7b", "--gpus", "8", "--deepspeed-config", str(tmp_path / "none.json"))
    assert bad.returncode == 2 and "none.json: no such file" in bad.stderr and bad.stderr.count("\n") == 1
