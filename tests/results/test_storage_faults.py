"""A full disk, a read-only file system, a killed collect (issue 35): one sentence, exit 2, nothing half-done.

The full and read-only disks are real: small tmpfs mounts (the tests need root and ``mount``, and are
skipped without them); the manifest that cannot be written is a monkeypatched write.
"""

from __future__ import annotations

import errno
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from factories import collective_doc, training_doc
from shardscope.cli import main

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = REPO / "tests" / "data" / "topo" / "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt"


def _mount(folder: Path, *options: str) -> Iterator[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(["size=64k", *options]), "tmpfs", str(folder)],
                          capture_output=True, text=True, check=False)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs filled to the last byte."""
    for folder in _mount(tmp_path / "full"):
        try:
            with open(folder / "filler", "wb", buffering=0) as handle:
                while True:
                    handle.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        yield folder


@pytest.fixture
def read_only_disk(tmp_path: Path) -> Iterator[Path]:
    yield from _mount(tmp_path / "ro", "ro")


@pytest.fixture
def inputs(tmp_path: Path) -> list[str]:
    paths = []
    for i, doc in enumerate([collective_doc("all_reduce"), training_doc("ddp")]):
        path = tmp_path / f"in{i}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    return paths


def _one_sentence(capsys: pytest.CaptureFixture[str], argv: list[str], names: str) -> None:
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("shardscope: error:") and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert names in err, err


@pytest.mark.parametrize("command", ["collect", "topology detect", "plan"])
def test_a_full_disk_is_one_sentence_naming_the_path(command: str, full_disk: Path, inputs: list[str],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    argv = {"collect": ["collect", "--db", str(full_disk / "r.duckdb"), *inputs],
            "topology detect": ["topology", "detect", "--out", str(full_disk / "t" / "topology.json")],
            "plan": ["plan", "--topology", str(TOPOLOGY), "--config", str(REPO / "config" / "config.yaml"),
                     "--out", str(full_disk / "plan.json")]}[command]
    _one_sentence(capsys, argv, str(full_disk))
    assert sorted(p.name for p in full_disk.iterdir()) in (["filler"], ["filler", "r.duckdb.lock"], ["filler", "t"])


def test_a_read_only_file_system_is_one_sentence(read_only_disk: Path, inputs: list[str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    _one_sentence(capsys, ["collect", "--db", str(read_only_disk / "r.duckdb"), *inputs], str(read_only_disk))


def test_a_manifest_that_cannot_be_written_leaves_the_database_as_it_was(tmp_path: Path, inputs: list[str],
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from shardscope.results import store

    db, manifest = tmp_path / "r.duckdb", tmp_path / "collect.json"
    assert main(["collect", "--db", str(db), inputs[0]]) == 0
    before = db.read_bytes()

    def disk_full(path: str, obj: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(store, "atomic_write_json", disk_full)
    _one_sentence(capsys, ["collect", "--db", str(db), "--manifest", str(manifest), inputs[1]], str(manifest))
    assert db.read_bytes() == before and not manifest.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith((".tmp", ".wal"))]


def test_the_next_collect_removes_copies_that_killed_collects_left(tmp_path: Path, inputs: list[str]) -> None:
    db = tmp_path / "r.duckdb"
    assert main(["collect", "--db", str(db), inputs[0]]) == 0
    left = [tmp_path / ".r.duckdb.k1ll3d_0.tmp", tmp_path / ".r.duckdb.k1ll3d_0.tmp.wal", tmp_path / ".r.duckdb.ab12cd34.tmp"]
    for path in left:
        path.write_bytes(db.read_bytes())
    others = [tmp_path / ".r.duckdb.notes.tmp", tmp_path / ".other.duckdb.ab12cd34.tmp", tmp_path / "r.duckdb.ab12cd34.tmp"]
    for path in others:
        path.write_text("not ours")
    assert main(["collect", "--db", str(db), inputs[1]]) == 0
    assert not [p for p in left if p.exists()] and all(p.exists() for p in others)
