"""topology.json documents in the store: one topology row keyed by the document's hash, its GPUs and links."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from factories import REPO, collective_doc, query_db, training_doc, with_run_predictions, write_docs

from shardscope.cli import main
from shardscope.errors import UserError
from shardscope.results.store import collect
from shardscope.topology.identity import topology_hash
from shardscope.topology.parse import parse_file

NVL_PAIRS = REPO / "tests" / "data" / "topo" / "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt"


@pytest.fixture
def nvl_topology() -> dict:
    """The real 8x H100 NVL fixture (NVLink pairs, two NUMA nodes), parsed by the topology stage."""
    return parse_file(NVL_PAIRS).to_dict()


def _write(path: Path, doc: dict) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))
    return str(path)


def test_a_parsed_topology_is_one_row_with_its_gpus_and_links(tmp_path, nvl_topology):
    db = tmp_path / "r.duckdb"
    path = _write(tmp_path / "topology.json", nvl_topology)
    summary = collect(db, [path])
    assert (summary["new_topologies"], summary["new_runs"]) == (1, 0)
    digest = topology_hash(nvl_topology)  # the hardware's hash: the parsed file's path is not part of it
    (row,) = query_db(db, "SELECT topology_hash, host, fabric, accelerator, gpu_count, island_count, numa_node_count, "
                       "source_method, source_file, json_extract_string(source_json, '$.file'), origin_db FROM topologies")
    assert row == (digest, None, "nvlink_islands", "nvidia", 8, 4, 2, "nvidia-smi", path, str(NVL_PAIRS), None)
    assert json.loads(query_db(db, "SELECT topology_json FROM topologies")[0][0]) == nvl_topology
    gpus = query_db(db, "SELECT gpu_index, island, numa_node, cpu_affinity FROM gpus ORDER BY gpu_index")
    assert [g[0] for g in gpus] == list(range(8))
    assert [g[1] for g in gpus] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [g[2] for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert gpus[0][3] == "0-63,128-191"
    assert query_db(db, "SELECT count(*), count(DISTINCT (gpu_a, gpu_b)) FROM links") == [(28, 28)]
    assert query_db(db, "SELECT gpu_a, gpu_b, code, nvlinks FROM links WHERE nvlinks > 0 ORDER BY ALL") == [
        (0, 1, "NV12", 12), (2, 3, "NV12", 12), (4, 5, "NV12", 12), (6, 7, "NV12", 12)]
    assert dict(query_db(db, "SELECT code, count(*) FROM links GROUP BY code")) == {"NV12": 4, "NODE": 8, "SYS": 16}
    assert query_db(db, "SELECT DISTINCT topology_hash FROM gpus UNION SELECT DISTINCT topology_hash FROM links") == [(digest,)]


def test_the_same_topology_loaded_again_adds_nothing(tmp_path, nvl_topology):
    db = tmp_path / "r.duckdb"
    collect(db, [_write(tmp_path / "a" / "topology.json", nvl_topology)])
    again = collect(db, [_write(tmp_path / "b" / "topology.json", nvl_topology)])
    assert (again["new_topologies"], again["skipped_topologies"]) == (0, 1)
    changed = copy.deepcopy(nvl_topology)
    changed["source"]["host"] = "nodeB"
    collect(db, [_write(tmp_path / "c" / "topology.json", changed)])
    assert query_db(db, "SELECT count(*), count(DISTINCT host) FROM topologies") == [(2, 1)]
    assert query_db(db, "SELECT count(*) FROM gpus") == [(16,)] and query_db(db, "SELECT count(*) FROM links") == [(56,)]


def test_runs_loaded_with_their_topology_carry_its_fabric(tmp_path, nvl_topology):
    db = tmp_path / "r.duckdb"
    paths = [_write(tmp_path / "topology.json", nvl_topology),
             *write_docs(tmp_path / "in", [collective_doc("all_reduce"), training_doc("ddp"), training_doc("zero3")])]
    collect(db, paths)
    digest = query_db(db, "SELECT topology_hash FROM topologies")[0][0]
    assert query_db(db, "SELECT DISTINCT topology_hash FROM runs") == [(digest,)]
    assert query_db(db, "SELECT DISTINCT fabric, label FROM collective_peaks") == [("nvlink_islands", None)]
    assert query_db(db, "SELECT DISTINCT fabric FROM strategy_summary") == [("nvlink_islands",)]


def test_a_detected_topology_links_only_runs_of_its_host(tmp_path):
    db = tmp_path / "r.duckdb"
    topo = tmp_path / "topo" / "topology.json"
    assert main(["topology", "detect", "--out", str(topo)]) == 0
    doc = json.loads(topo.read_text())
    doc["source"]["host"] = "hostA"
    _write(topo, doc)
    collect(db, [str(topo), *write_docs(tmp_path / "in", [training_doc("ddp", host="hostA"), training_doc("ddp", host="hostB")])])
    assert query_db(db, "SELECT fabric, gpu_count, host FROM topologies") == [("cpu", 0, "hostA")]
    assert query_db(db, "SELECT r.host, t.fabric FROM runs r LEFT JOIN topologies t USING (topology_hash) ORDER BY 1") == [
        ("hostA", "cpu"), ("hostB", None)]


def _broken(doc: dict, edit) -> dict:
    doc = copy.deepcopy(doc)
    edit(doc)
    return doc


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda d: d.__setitem__("gpu_count", 7), "field gpu_count: 7 but the document lists 8 GPUs"),
    (lambda d: d["links"][0].__setitem__("b", 9), "field links[0].b: GPU 9 is not among the document's GPUs"),
    (lambda d: d.__setitem__("islands", d["islands"][1:]), "field islands: GPU 0 must be in exactly one island, found in 0"),
    (lambda d: d.__setitem__("fabric", "hyperspace"), "table topologies, row 0, column fabric: failed isin("),
    (lambda d: d["links"][3].__setitem__("nvlinks", -1), "table links, row 3, column nvlinks: failed greater_than_or_equal_to(0)"),
    (lambda d: d["links"][1].update(a=2, b=0), "table links, row 1, column (row check): failed a link's endpoints must be ordered"),
    (lambda d: d["gpus"][2].__setitem__("index", "two"), "field gpus[2].index: 'two' is not of type 'integer'"),
    (lambda d: d.pop("links"), "field (top level): 'links' is a required property"),
    (lambda d: d.__setitem__("schema", "shardscope.topology/2"), "field schema: 'shardscope.topology/2' is not a supported version"),
    (lambda d: d["gpus"][5].__setitem__("memory_bytes", 0), "table gpus, row 5, column memory_bytes: failed greater_than(0)"),
])
def test_a_bad_topology_is_refused_and_the_database_untouched(tmp_path, nvl_topology, edit, expected):
    db = tmp_path / "r.duckdb"
    collect(db, write_docs(tmp_path / "good", [training_doc("ddp")]))
    before = db.read_bytes()
    path = _write(tmp_path / "bad" / "topology.json", _broken(nvl_topology, edit))
    with pytest.raises(UserError) as info:
        collect(db, [path])
    assert f"{path}: {expected}" in str(info.value)
    assert db.read_bytes() == before


def test_memory_predictions_are_filled_for_every_training_run_by_the_predictions_stage(tmp_path):
    from shardscope.costmodel.memory_model import predict_memory

    db = tmp_path / "r.duckdb"
    failed = training_doc("zero3", outcome="oom", host="hostA")
    failed["job"]["dtype"] = "bfloat16"
    collect(db, with_run_predictions(write_docs(tmp_path / "in", [training_doc("ddp"), training_doc("fsdp"), failed])))
    rows = query_db(db, "SELECT p.strategy, p.model, p.n_params, p.gpus, p.dtype, p.param_bytes, p.grad_bytes, p.optim_bytes, "
                     "p.total_bytes, p.method, t.outcome FROM memory_predictions p "
                     "JOIN training_runs t ON t.run_id = p.measured_run_id ORDER BY 1")
    assert [r[0] for r in rows] == ["ddp", "fsdp", "zero3"]
    for strategy, model, n, gpus, dtype, p, g, o, total, method, _ in rows:
        want = predict_memory(787072, strategy, 2, dtype)
        assert (model, n, gpus, method) == ("tiny", 787072, 2, "modeled")
        assert (p, g, o, total) == (want["param_bytes"], want["grad_bytes"], want["optim_bytes"], want["total_bytes"])
    assert rows[0][8] == 16 * 787072 and rows[1][8] == 8 * 787072  # fp32 Adam: 16 bytes/param, halved on 2 ranks
    assert rows[2][4] == "bfloat16" and rows[2][10] == "oom"  # a run that failed is still explained by the model
    assert query_db(db, "SELECT strategy, modeled_bytes FROM strategy_summary ORDER BY 1")[0] == ("ddp", 16 * 787072)
