"""A corpus of damaged inputs, built here from the bundled real logs and topologies (issue 16).

Every case runs the ``shardscope`` command line in-process and ends one of two ways:

- **refused**: exit status 2 and exactly one stderr line, ``shardscope: error: ...``, naming the
  file (and the line, cell or JSON path) — never a traceback (any other exception fails the test);
- **accepted with its note**: exit status 0 and a ``shardscope: note:``/``warning:`` line on
  stderr that says what was done with the odd value.

The real files are never edited: each case copies the text and damages the copy in ``tmp_path``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from shardscope.cli import main
from shardscope.collectives.nccl_tests import read_nccl_tests

TESTS = Path(__file__).resolve().parents[1]
REFERENCE = TESTS.parent / "workflow" / "shardscope" / "figures" / "reference"
NCCL = TESTS / "data" / "nccl-tests"
TOPO = TESTS / "data" / "topo"
DIAGNOSE = TESTS / "data" / "diagnose"

GEN2 = NCCL / "all_reduce_perf-gen2-2x8-h100-16ranks.txt"
GEN3 = NCCL / "all_reduce_perf-gen3-2x-gb10.txt"
V100 = REFERENCE / "all_reduce_perf-8x-v100-sxm2-dgx1.txt"  # generation-1 table (error column)
GATHER = REFERENCE / "all_gather_perf-2x-rtx2080ti-pcie3.txt"  # has 0-byte rows
LOGS = {"gen2": GEN2, "gen3": GEN3, "gen1-v100": V100, "all-gather": GATHER}

_DATA_ROW = re.compile(r"^\s*\d+\s+\d+\s+[a-z]")


@dataclass(frozen=True)
class Case:
    """One damaged input: how to build it, the command to run on it, and what must come out."""

    name: str
    build: Callable[[Path], Path]
    command: Callable[[Path], list[str]]
    refused: bool
    says: str  # a phrase the error (or the note) must contain


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    """Run the command line in-process: (exit status, stdout, stderr)."""
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def data_rows(lines: list[str]) -> list[int]:
    """Indices of the table's data rows."""
    return [i for i, line in enumerate(lines) if _DATA_ROW.match(line)]


def damaged_log(source: Path, change: Callable[[list[str]], list[str]], name: str | None = None) -> Callable[[Path], Path]:
    """A builder that writes ``change(lines of source)`` to a file named like the source (or ``name``)."""
    def build(tmp: Path) -> Path:
        target = tmp / (name or source.name)
        target.write_text("\n".join(change(source.read_text(encoding="utf-8").splitlines())) + "\n", encoding="utf-8")
        return target
    return build


def set_cell(row_at: int, column: int, value: str) -> Callable[[list[str]], list[str]]:
    """Change word ``column`` of data row number ``row_at`` (0 = first row, -1 = last)."""
    def change(lines: list[str]) -> list[str]:
        index = data_rows(lines)[row_at]
        words = lines[index].split()
        words[column] = value
        return [*lines[:index], "  ".join(words), *lines[index + 1 :]]
    return change


def cut_row(row_at: int) -> Callable[[list[str]], list[str]]:
    """Cut data row ``row_at`` after its fifth word (a row cut mid-way)."""
    def change(lines: list[str]) -> list[str]:
        index = data_rows(lines)[row_at]
        return [*lines[:index], "  ".join(lines[index].split()[:5]), *lines[index + 1 :]]
    return change


def without(pattern: str) -> Callable[[list[str]], list[str]]:
    """Drop every line matching ``pattern``."""
    return lambda lines: [line for line in lines if not re.search(pattern, line)]


def duplicate_first(pattern: str, edit: Callable[[str], str] = lambda line: line) -> Callable[[list[str]], list[str]]:
    """Repeat the first line matching ``pattern`` (optionally edited) right after it."""
    def change(lines: list[str]) -> list[str]:
        index = next(i for i, line in enumerate(lines) if re.search(pattern, line))
        return [*lines[: index + 1], edit(lines[index]), *lines[index + 1 :]]
    return change


def written(name: str, data: bytes) -> Callable[[Path], Path]:
    """A builder writing raw bytes."""
    def build(tmp: Path) -> Path:
        (tmp / name).write_bytes(data)
        return tmp / name
    return build


def json_from_log(source: Path, change: Callable[[dict], None], name: str = "all_reduce_perf.json") -> Callable[[Path], Path]:
    """An nccl-tests ``-J`` file holding the rows of a real log, then damaged by ``change``."""
    def build(tmp: Path) -> Path:
        result = read_nccl_tests(source)
        by_size: dict[int, dict] = {}
        for row in result.rows:
            entry = by_size.setdefault(row["size_bytes"], {
                "size": row["size_bytes"], "count": row["count"], "type": "float", "redop": "sum", "root": -1})
            entry[row["placement_mode"]] = {"time": row["time_s"] * 1e6, "alg_bw": row["algbw_gbps"],
                                            "bus_bw": row["busbw_gbps"], "nwrong": row["wrong"]}
        document = {
            "version": 2, "args": ["./build/all_reduce_perf", "-b", "8", "-e", "8G"],
            "config": {"nthreads": 1, "ngpus": 1, "devices": [
                {"rank": d["rank"], "hostname": d["host"], "device": d["device"], "device_hex": d["bus_id"],
                 "device_info": d["name"]} for d in result.devices]},
            "results": list(by_size.values()),
        }
        change(document)
        target = tmp / name
        target.write_text(json.dumps(document), encoding="utf-8")  # json.dumps writes NaN/Infinity as given
        return target
    return build


def topo(source: Path, change: Callable[[list[str]], list[str]]) -> Callable[[Path], Path]:
    """A damaged copy of a real topology file."""
    return damaged_log(source, change)


def gpu0_word(column: int, value: str) -> Callable[[list[str]], list[str]]:
    """Change word ``column`` (after the label) of row GPU0 and, for a GPU column, of the transposed cell."""
    def change(lines: list[str]) -> list[str]:
        out = []
        for line in lines:
            words = line.split()
            if "X" not in words:  # the header also starts with GPU0
                out.append(line)
                continue
            if words[:1] == ["GPU0"]:
                words[1 + column] = value
                line = "\t".join(words)
            elif column and words[:1] == [f"GPU{column}"]:
                words[1] = value
                line = "\t".join(words)
            out.append(line)
        return out
    return change


def gpu0_extra(offset_from_end: int, value: str) -> Callable[[list[str]], list[str]]:
    """Change an extra column of row GPU0, counted from the end of the row (1 = last)."""
    def change(lines: list[str]) -> list[str]:
        out = []
        for line in lines:
            words = line.split()
            if words[:1] == ["GPU0"] and "X" in words:
                words[-offset_from_end] = value
                line = "\t".join(words)
            out.append(line)
        return out
    return change


def imported(argv_extra: list[str] | None = None) -> Callable[[Path], list[str]]:
    return lambda path: ["collectives", "import", str(path), *(argv_extra or [])]


def parse_topology(path: Path) -> list[str]:
    return ["topology", "parse", str(path)]


def verdict(path: Path) -> list[str]:
    return ["verdict", str(path)]


# --------------------------------------------------------------------------- the corpus

CASES: list[Case] = []

# Text logs, each damage applied to every bundled generation.
for key, log in LOGS.items():
    width_time = 5 if "gen1" not in key else 4  # the out-of-place time column (gen1 has no root column)
    CASES += [
        Case(f"{key}-nan-busbw", damaged_log(log, set_cell(-1, width_time + 2, "nan")), imported(), True, "finite number"),
        Case(f"{key}-inf-time", damaged_log(log, set_cell(-2, width_time, "inf")), imported(), True, "finite number"),
        Case(f"{key}-word-algbw", damaged_log(log, set_cell(0, width_time + 1, "fast")), imported(), True, "'fast'"),
        Case(f"{key}-negative-nan-in-place", damaged_log(log, set_cell(-1, width_time + 4, "-nan")), imported(), True,
             "finite number"),
        Case(f"{key}-negative-size", damaged_log(log, set_cell(-1, 0, "-1024")), imported(), True, "negative"),
        Case(f"{key}-undecodable-cell", damaged_log(log, set_cell(-1, width_time, "1\ufffd.5")), imported(), True,
             "finite number"),
        Case(f"{key}-zero-time", damaged_log(log, set_cell(-1, width_time, "0")), imported(), True, "positive time"),
        Case(f"{key}-negative-busbw", damaged_log(log, set_cell(-1, width_time + 2, "-5.00")), imported(), True,
             "0 or more"),
        Case(f"{key}-row-cut-at-end", damaged_log(log, cut_row(-1)), imported(), False, "cut mid-way"),
        Case(f"{key}-row-cut-in-the-middle", damaged_log(log, cut_row(1)), imported(), False, "cut mid-way"),
        Case(f"{key}-zero-size-row", damaged_log(log, set_cell(0, 0, "0")), imported(), False, "0 bytes"),
        Case(f"{key}-two-tables", damaged_log(log, lambda lines: lines + lines), imported(), True, "2 nccl-tests tables"),
        Case(f"{key}-over-size-limit", damaged_log(log, lambda lines: lines), imported(["--max-input-mib", "0.001"]), True,
             "--max-input-mib"),
        Case(f"{key}-no-header-hash", damaged_log(log, lambda lines: [line.lstrip("#") if "size" in line and "count" in line
                                                                      else line for line in lines]), imported(), False,
             ""),
        Case(f"{key}-no-rank-lines", damaged_log(log, without(r"Rank\s+\d+")), imported(), False, "ranks read from"),
    ]

CASES += [
    Case("gen2-rank-line-repeated", damaged_log(GEN2, duplicate_first(r"Rank\s+3 ")), imported(), False, "counted once"),
    Case("gen2-rank-line-conflicting", damaged_log(GEN2, duplicate_first(r"Rank\s+3 ", lambda l: l.replace("device  3", "device  5"))),
         imported(), True, "listed again"),
    Case("gen2-starts-mid-way", damaged_log(GEN2, without(r"Rank\s+[0-7] ")), imported(), False, "starts mid-way"),
    Case("gen2-no-ranks-no-command", damaged_log(GEN2, lambda lines: [l for l in without(r"Rank\s+\d+|^>")(lines)]),
         imported(), False, "busbw/algbw"),
    Case("gen2-world-size-contradicts", damaged_log(GEN2, lambda lines: lines), imported(["--world-size", "8"]), True,
         "contradicts"),
    Case("gen3-table-alone", damaged_log(GEN3, lambda lines: [l for l in lines if _DATA_ROW.match(l)], "all_reduce_perf.txt"),
         imported(), False, "no column header"),
    Case("gen3-table-alone-no-op", damaged_log(GEN3, lambda lines: [l for l in lines if _DATA_ROW.match(l)], "pasted.txt"),
         imported(), True, "which collective"),
    Case("gen3-table-alone-op-flag", damaged_log(GEN3, lambda lines: [l for l in lines if _DATA_ROW.match(l)], "pasted.txt"),
         imported(["--op", "all_reduce"]), False, "busbw/algbw"),
    Case("gen3-rank-count-unknown", damaged_log(GEN3, lambda lines: [l for l in lines if _DATA_ROW.match(l)], "pasted.txt"),
         imported(["--op", "broadcast"]), False, "rank count is unknown"),
    Case("gen3-world-size-flag", damaged_log(GEN3, lambda lines: [l for l in lines if _DATA_ROW.match(l)], "pasted.txt"),
         imported(["--op", "broadcast", "--world-size", "2"]), False, "from --world-size"),
    Case("gen3-bad-world-size-flag", damaged_log(GEN3, lambda lines: lines), imported(["--world-size", "0"]), True,
         "positive number of ranks"),
    Case("gen2-wrong-column-word", damaged_log(GEN2, set_cell(-1, 8, "many")), imported(), True, "#wrong"),
    Case("gen2-crlf", lambda tmp: (tmp / GEN2.name).write_bytes(GEN2.read_bytes().replace(b"\n", b"\r\n")) and tmp / GEN2.name,
         imported(), False, ""),
    Case("log-zeros", written("all_reduce_perf.txt", bytes(1 << 20)), imported(), True, "no nccl-tests table"),
    Case("log-empty", written("all_reduce_perf.txt", b""), imported(), True, "no nccl-tests table"),
    Case("log-missing", lambda tmp: tmp / "absent_all_reduce_perf.txt", imported(), True, "file not found"),
    Case("log-directory", lambda tmp: tmp, imported(), True, "directory"),
]

# -J JSON built from the rows of the real generation-2 log.
def _set(path: list, value: object) -> Callable[[dict], None]:
    def change(document: dict) -> None:
        target = document
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


CASES += [
    Case("json-nan-busbw", json_from_log(GEN2, _set(["results", 30, "out_of_place", "bus_bw"], float("nan"))), imported(), True,
         "results[30].out_of_place.bus_bw"),
    Case("json-inf-time", json_from_log(GEN2, _set(["results", 3, "in_place", "time"], float("inf"))), imported(), True,
         "results[3].in_place.time"),
    Case("json-negative-inf-algbw", json_from_log(GEN2, _set(["results", 4, "in_place", "alg_bw"], float("-inf"))), imported(),
         True, "results[4].in_place.alg_bw"),
    Case("json-negative-size", json_from_log(GEN2, _set(["results", 5, "size"], -8)), imported(), True, "results[5].size"),
    Case("json-fractional-size", json_from_log(GEN2, _set(["results", 5, "size"], 8.5)), imported(), True, "whole number"),
    Case("json-string-time", json_from_log(GEN2, _set(["results", 6, "out_of_place", "time"], "fast")), imported(), True,
         "finite number"),
    Case("json-nan-nwrong", json_from_log(GEN2, _set(["results", 6, "out_of_place", "nwrong"], float("nan"))), imported(), True,
         "nwrong"),
    Case("json-zero-size", json_from_log(GEN2, _set(["results", 0, "size"], 0)), imported(), False, "0 bytes"),
    Case("json-duplicated-device", json_from_log(GEN2, lambda d: d["config"]["devices"].append(dict(d["config"]["devices"][1]))),
         imported(), True, "repeats the process"),
    Case("json-no-devices", json_from_log(GEN2, _set(["config", "devices"], [])), imported(), False, "busbw/algbw"),
    Case("json-bad-nthreads", json_from_log(GEN2, _set(["config", "nthreads"], "two")), imported(), True, "nthreads"),
    Case("json-results-not-a-list", json_from_log(GEN2, _set(["results"], {"size": 8})), imported(), True, "'results' list"),
    Case("json-entry-not-an-object", json_from_log(GEN2, _set(["results", 2], 7)), imported(), True, "results[2]"),
    Case("json-placement-not-an-object", json_from_log(GEN2, _set(["results", 2, "in_place"], [1, 2])), imported(), True,
         "results[2].in_place"),
    Case("json-truncated", lambda tmp: (json_from_log(GEN2, lambda d: None)(tmp).write_text(
        json_from_log(GEN2, lambda d: None)(tmp).read_text()[:500]) and tmp / "all_reduce_perf.json"),
         imported(), True, "not valid JSON"),
]

# Topologies: damaged copies of real nvidia-smi / rocm-smi output.
H200 = TOPO / "01-hgx-h200-nvswitch-nv18-12nics.txt"
A100 = TOPO / "05-dgx-a100-nv12-mlx5-columns-old-format.txt"
H100_NVL = TOPO / "10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt"
PCIE8 = TOPO / "13-8x-pcie-pix-pxb-sys-numa-na.txt"
MI300 = TOPO / "22-amd-rocm-smi-showtopo-4x-mi300a.txt"
for key, source in {"h200": H200, "a100": A100, "h100-nvl": H100_NVL}.items():
    CASES += [
        Case(f"{key}-nv99999", topo(source, gpu0_word(1, "NV99999")), parse_topology, True, "NV99999"),
        Case(f"{key}-nv0", topo(source, gpu0_word(1, "NV0")), parse_topology, True, "expected NV1 to NV18"),
        Case(f"{key}-control-byte-in-code-cell", topo(source, gpu0_word(2, "NV\x0112")), parse_topology, True, "not text"),
        Case(f"{key}-undecodable-affinity", topo(source, gpu0_extra(3 if key != "a100" else 1, "0-55\ufffd")), parse_topology,
             True, "not text"),
        Case(f"{key}-over-size-limit", topo(source, lambda lines: lines), lambda p: [*parse_topology(p), "--max-input-mib", "0.0001"],
             True, "limit"),
    ]
CASES += [
    Case("h200-nan-numa", topo(H200, gpu0_extra(2, "NaN")), parse_topology, False, "not a NUMA node number"),
    Case("h100-nvl-nan-numa", topo(H100_NVL, gpu0_extra(2, "nan")), parse_topology, False, "not a NUMA node number"),
    Case("h100-nvl-hex-numa", topo(H100_NVL, gpu0_extra(2, "0x1")), parse_topology, False, "not a NUMA node number"),
    Case("pcie-mp-view", topo(PCIE8, lambda lines: ["$ nvidia-smi topo -mp", *lines]), parse_topology, False, "topo -mp"),
    Case("flattened-vm-view", lambda tmp: DIAGNOSE / "nccl-tests-293-topo.txt", parse_topology, False, "VM or container"),
    Case("nvswitch-slice", lambda tmp: REFERENCE / "all_reduce_perf-4x-h100-sxm-lambda-topo.txt", parse_topology, False, "slice"),
    Case("rocm-nan-numa", topo(MI300, lambda lines: [l.replace("Numa Node: 0", "Numa Node: NaN", 1) if "GPU[0]" in l else l
                                                      for l in lines]), parse_topology, False, "not a NUMA node number"),
    Case("topo-zeros", written("topo.txt", bytes(1 << 20)), parse_topology, True, "binary data"),
    Case("topo-empty", written("topo.txt", b"  \n"), parse_topology, True, "empty"),
    Case("topo-truncated", topo(H200, lambda lines: lines[:4]), parse_topology, True, "truncated"),
    Case("topo-show-over-limit", topo(H200, lambda lines: lines), lambda p: ["topology", "show", str(p), "--max-input-mib", "0.0001"],
         True, "limit"),
]

# verdict inputs: an imported document whose rows were damaged after import.
def imported_doc(change: Callable[[dict], None]) -> Callable[[Path], Path]:
    def build(tmp: Path) -> Path:
        out = tmp / "imported.json"
        assert main(["collectives", "import", str(GEN2), "--out", str(out)]) == 0
        document = json.loads(out.read_text())
        change(document)
        out.write_text(json.dumps(document))
        return out
    return build


CASES += [
    Case("verdict-nan-time", imported_doc(_set(["rows", 40, "time_s"], float("nan"))), verdict, False, "left out"),
    Case("verdict-inf-time", imported_doc(_set(["rows", 41, "time_s"], float("inf"))), verdict, False, "left out"),
    Case("verdict-negative-size", imported_doc(_set(["rows", 42, "size_bytes"], -8)), verdict, False, "left out"),
    Case("verdict-busbw-inconsistent", imported_doc(_set(["rows", 43, "busbw_gbps"], 9999.0)), verdict, False,
         "does not match size/time"),
    Case("verdict-every-row-bad", imported_doc(lambda d: [r.update(time_s=-1.0) for r in d["rows"]]), verdict, True,
         "no row has a positive finite size and time"),
    Case("verdict-world-size-null", imported_doc(_set(["world_size"], None)), verdict, True, "world_size is None"),
    Case("verdict-log-rank-count-unknown",
         damaged_log(GEN3, lambda lines: [l for l in lines if _DATA_ROW.match(l)], "broadcast_perf.txt"), verdict, True,
         "rank count of this nccl-tests log is unknown"),
    Case("verdict-over-limit", damaged_log(GEN2, lambda lines: lines), lambda p: [*verdict(p), "--max-input-mib", "0.001"], True,
         "limit"),
    Case("nccl-log-zeros", written("rank0.log", bytes(1 << 20)), lambda p: ["nccl-log", str(p)], True, "no NCCL log lines"),
    Case("nccl-log-over-limit", lambda tmp: DIAGNOSE / "nccl-tests-293-allreduce-gdr-sys.txt",
         lambda p: ["nccl-log", str(p), "--max-input-mib", "0.001"], True, "limit"),
]


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 80
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_damaged_input_is_refused_in_one_line_or_accepted_with_a_note(
        case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = case.build(tmp_path)
    capsys.readouterr()
    status, out, err = run(capsys, case.command(path))
    lines = err.strip().splitlines()
    if case.refused:
        assert status == 2, (out, err)
        assert len(lines) == 1 and lines[0].startswith("shardscope: error: "), err
        assert case.says in lines[0]
        assert path.name in lines[0] or "--world-size" in lines[0] or path == tmp_path
    else:
        assert status == 0, err
        assert all(line.startswith(("shardscope: note: ", "shardscope: warning: ")) for line in lines), err
        assert not case.says or any(case.says in line for line in lines), err
        if out.lstrip().startswith("{"):
            json.loads(out, parse_constant=_no_constant)  # valid JSON: no NaN or Infinity


def _no_constant(name: str) -> None:
    raise AssertionError(f"the output holds {name}, which is not JSON")


def test_a_refused_topology_parse_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = topo(H200, gpu0_word(1, "NV99999"))(tmp_path)
    out = tmp_path / "out" / "topology.json"
    status, _, _ = run(capsys, ["topology", "parse", str(source), "--out", str(out)])
    assert status == 2
    assert not (tmp_path / "out").exists()


def test_an_unknown_rank_count_is_marked_in_the_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = damaged_log(GEN3, lambda lines: [l for l in lines if _DATA_ROW.match(l)], "broadcast_perf.txt")(tmp_path)
    status, out, _ = run(capsys, ["collectives", "import", str(source), "--json"])
    document = json.loads(out)
    assert status == 0
    assert document["world_size"] is None and document["world_size_source"] == "unknown"
    printed = read_nccl_tests(source).rows
    assert [row["busbw_gbps"] for row in document["rows"]] == [row["busbw_gbps"] for row in printed]
    assert all(row["world_size"] is None for row in document["rows"])


# --------------------------------------------------------------------------- collect

COLLECT_DAMAGE: dict[str, Callable[[dict], None]] = {
    "world-size-null-but-rows-say-2": lambda d: d.update(world_size=None, world_size_source="unknown"),
    "one-row-world-size-null": lambda d: d["rows"][1].update(world_size=None),
    "world-size-zero": lambda d: [r.update(world_size=0) for r in [d, *d["rows"]]],
    "negative-size": lambda d: d["rows"][1].update(size_bytes=-8),
    "nan-busbw": lambda d: d["rows"][2].update(busbw_gbps=float("nan")),
    "inf-time": lambda d: d["rows"][3].update(time_s=float("inf")),
    "busbw-inconsistent": lambda d: d["rows"][2].update(busbw_gbps=d["rows"][2]["busbw_gbps"] * 1.33),
    "no-rows": lambda d: d.update(rows=[]),
}


@pytest.fixture(scope="module")
def loaded_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A database holding one imported real log, and that import's document."""
    folder = tmp_path_factory.mktemp("collect")
    document, db = folder / "gen3.json", folder / "results.duckdb"
    assert main(["collectives", "import", str(GEN3), "--out", str(document)]) == 0
    assert main(["collect", "--db", str(db), str(document)]) == 0
    return db, document


@pytest.mark.parametrize("damage", sorted(COLLECT_DAMAGE))
def test_a_refused_collect_leaves_the_database_byte_identical(
        damage: str, loaded_db: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, document = loaded_db
    changed = json.loads(document.read_text())
    changed["source_file"] = f"damaged-{damage}.txt"  # a new run, not the one already loaded
    COLLECT_DAMAGE[damage](changed)
    bad = tmp_path / f"{damage}.json"
    bad.write_text(json.dumps(changed))
    before = db.read_bytes()
    capsys.readouterr()
    status, _, err = run(capsys, ["collect", "--db", str(db), str(bad)])
    assert status == 2, err
    assert err.startswith("shardscope: error: ") and "Traceback" not in err
    assert db.read_bytes() == before


def test_an_import_of_unknown_rank_count_is_collected_with_world_size_null(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the 16-rank table alone, named as a broadcast (whose busbw/algbw says nothing of the rank count)
    source = damaged_log(GEN2, lambda lines: [l for l in lines if _DATA_ROW.match(l)], "broadcast_perf.txt")(tmp_path)
    document, db = tmp_path / "imported.json", tmp_path / "results.duckdb"
    status, _, err = run(capsys, ["collectives", "import", str(source), "--out", str(document)])
    assert status == 0 and "rank count is unknown" in err
    status, _, err = run(capsys, ["collect", "--db", str(db), str(document)])
    assert status == 0, err
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        runs = con.execute("SELECT kind, world_size, json_extract_string(env_json, '$.world_size_source') FROM runs").fetchall()
        rows = con.execute("SELECT world_size, size_bytes, in_place, busbw_gbps FROM collectives ORDER BY size_bytes, in_place").fetchall()
        recomputed_would_differ = con.execute("SELECT count(*) FROM collectives WHERE abs(busbw_gbps - algbw_gbps) > 0.05").fetchone()
        peaks = con.execute("SELECT world_size, peak_busbw_gbps FROM collective_peaks").fetchall()
    assert runs == [("collectives_import", None, "unknown")]
    printed = sorted((row["size_bytes"], row["placement_mode"] == "in_place", row["busbw_gbps"])
                     for row in read_nccl_tests(source).rows if row["size_bytes"] > 0)
    assert len(rows) == len(printed) > 10
    assert [(size, in_place, busbw) for _, size, in_place, busbw in rows] == printed  # busbw as printed, not recomputed
    assert {world for world, *_ in rows} == {None}
    assert recomputed_would_differ[0] > 10  # printed busbw is 1.875 x algbw, not broadcast's 1 x: kept, not recomputed
    assert peaks == [(None, max(busbw for *_, busbw in printed))]
    from shardscope.results.queries import busbw_vs_size
    from shardscope.results.sources import open_results

    with open_results(db) as con:
        series = busbw_vs_size(con)
    assert len(series) > 0 and series["series"].notna().all()  # drawn in figure 1, labelled, not dropped by a NULL label
    assert series["series"].str.contains("ranks unknown").all()


# --------------------------------------------------------------------------- huge inputs (benchmarks/huge_inputs.py times 1 GB)

@pytest.mark.parametrize("argv", [["topology", "parse"], ["topology", "show"], ["collectives", "import"], ["verdict"],
                                  ["nccl-log"]], ids=lambda argv: " ".join(argv))
def test_a_1_gib_file_is_refused_before_it_is_read(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import resource
    import time

    huge = tmp_path / "huge_all_reduce_perf.txt"
    with open(huge, "wb") as handle:
        handle.truncate(2**30)  # sparse: 1 GiB of zeros without using the disk
    out = tmp_path / "out" / "topology.json"
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    start = time.perf_counter()
    status, _, err = run(capsys, [*argv, str(huge), *(["--out", str(out)] if argv == ["topology", "parse"] else [])])
    elapsed = time.perf_counter() - start
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) / 1024
    assert status == 2
    assert err.startswith("shardscope: error: ") and "--max-input-mib 1024 to read it anyway" in err
    limit = 4 if argv[0] == "topology" else 32  # topology files have the smaller default
    assert f"is 1024.0 MiB, over the {limit} MiB limit" in err
    assert len(err.strip().splitlines()) == 1
    assert grown_mib < 100  # reading the file would raise this process's peak by about 1 GiB; the size is checked first
    assert elapsed < 5.0  # generous: the size is checked before anything is read
    assert not (tmp_path / "out").exists()  # nothing copied into raw/


def test_the_size_limit_is_raised_with_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    padded = tmp_path / GEN2.name
    padded.write_bytes(GEN2.read_bytes() + b"# padding\n" * (2**20 // 10))  # just over 1 MiB, a valid log
    status, _, err = run(capsys, ["collectives", "import", str(padded), "--max-input-mib", "1"])
    assert status == 2 and "over the 1 MiB limit" in err and "--max-input-mib 2" in err
    status, out, err = run(capsys, ["collectives", "import", str(padded), "--max-input-mib", "2"])
    assert status == 0 and "16 ranks" in out, err
