"""topology_hash names the hardware, not the probe: two probes of this machine get one hash and one stored row."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from shardscope.topology.identity import topology_hash

REPO = Path(__file__).resolve().parents[2]


def _detect(out: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "shardscope", "topology", "detect", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def test_two_probes_of_this_machine_have_one_hash_and_one_topologies_row(tmp_path: Path) -> None:
    first = _detect(tmp_path / "a" / "topology.json")
    time.sleep(1.1)  # probed_at has whole seconds: the second probe is at another time
    second = _detect(tmp_path / "b" / "topology.json")
    assert first["source"]["probed_at"] != second["source"]["probed_at"]
    assert topology_hash(first) == topology_hash(second)

    from shardscope.results.store import collect

    db = tmp_path / "results.duckdb"
    summary = collect(db, [str(tmp_path / "a" / "topology.json"), str(tmp_path / "b" / "topology.json")])
    assert summary["new_topologies"] == 1
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT topology_hash FROM topologies").fetchall() == [(topology_hash(first),)]


def test_the_hash_ignores_time_and_paths_but_not_the_hardware() -> None:
    doc = {"fabric": "cpu", "gpus": [], "source": {"method": "os", "host": "vm", "probed_at": "2026-01-01T00:00:00+00:00",
                                                 "raw_files": ["raw/lscpu.txt"]}}
    later = dict(doc, source=dict(doc["source"], probed_at="2026-06-01T00:00:00+00:00", file="/elsewhere/topo.txt"))
    assert topology_hash(doc) == topology_hash(later)
    assert topology_hash(doc) != topology_hash(dict(doc, fabric="pcie"))
    assert topology_hash(doc) != topology_hash(dict(doc, source=dict(doc["source"], host="other")))
