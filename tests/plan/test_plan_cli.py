"""`shardscope plan` run as the pipeline runs it: the topology is validated, config errors are one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from factories import default_config_path

REPO = Path(__file__).resolve().parents[2]
CONFIG = default_config_path()
NVL_PAIRS = REPO / "tests" / "data" / "topo" / "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt"


def shardscope(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardscope", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)


def assert_user_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardscope: error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("topo") / "topology.json"
    assert shardscope("topology", "parse", NVL_PAIRS, "--out", path).returncode == 0
    return path


def test_plan_jobs_carry_cuda_visible_devices(topology: Path, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    proc = shardscope("plan", "--topology", topology, "--config", CONFIG, "--out", out)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(out.read_text())
    job = next(j for j in plan["collectives"] if j["job_id"] == "all_reduce-ws2-one_island-default")
    assert (job["devices"], job["cuda_visible_devices"]) == ([0, 1], "0,1")
    assert {(e["world_size"], e["placement"]) for e in plan["placements"]} == {
        (2, "one_island"), (2, "cross_island"), (2, "cross_numa"), (4, "cross_island"), (4, "cross_numa"), (8, "all")}


def test_plan_rejects_an_inconsistent_topology(topology: Path, tmp_path: Path) -> None:
    doc = json.loads(topology.read_text())
    doc["islands"] = [list(range(8))]  # hand-edited: contradicts the links
    edited = tmp_path / "topology.json"
    edited.write_text(json.dumps(doc))
    assert_user_error(shardscope("plan", "--topology", edited, "--config", CONFIG), str(edited), "islands are")


def test_plan_reads_probe_text_like_the_topology_json_parsed_from_it(topology: Path) -> None:
    from_text = shardscope("plan", "--topology", NVL_PAIRS, "--config", CONFIG, "--json")
    from_json = shardscope("plan", "--topology", topology, "--config", CONFIG, "--json")
    assert from_text.returncode == 0 and from_json.returncode == 0, from_text.stderr + from_json.stderr
    assert json.loads(from_text.stdout) == json.loads(from_json.stdout)


def test_world_sizes_above_the_gpu_count(topology: Path) -> None:
    config = yaml.safe_load(CONFIG.read_text())
    config["world_sizes"] = [16]
    proc = shardscope("plan", "--topology", topology, "--config-json", json.dumps(config))
    assert_user_error(proc, "world_sizes", "8 GPU(s)")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--config-json", "{not json"], "--config-json: not valid JSON"),
        (["--config-json", "[1, 2]"], "expected the pipeline config as a mapping"),
        (["--config-json", json.dumps({"world_sizes": "auto"})], "lacks key"),
    ],
    ids=["bad-json", "not-mapping", "missing-key"],
)
def test_bad_config(topology: Path, args: list[str], fragment: str) -> None:
    assert_user_error(shardscope("plan", "--topology", topology, *args), fragment)


def test_bad_yaml_config(topology: Path, tmp_path: Path) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text("world_sizes: [2, 4\ncollectives: {\n")
    assert_user_error(shardscope("plan", "--topology", topology, "--config", bad), str(bad), "not valid YAML")
