"""``shardscope collectives report``: our job files as nccl-tests tables, read back by ``import``.

One real 2-rank all_reduce job (torchrun, gloo, --check) feeds the round trip; documents made
with tests/factories.py cover the other shapes (out-of-place ops, nccl-tests' time formats,
failed checks). Every comparison allows exactly the rounding nccl-tests' formats imply.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from statistics import mean
from typing import Any

import pytest
from factories import collective_doc

from shardscope.contracts.factors import busbw_gbps
from shardscope.collectives.nccl_tests import parse_nccl_tests, to_rows_for_db
from shardscope.collectives.report import format_report, format_time_us

GEN3 = Path(__file__).resolve().parents[1] / "data" / "nccl-tests" / "all_reduce_perf-gen3-2x-gb10.txt"


def shardscope(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardscope", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real all_reduce job file: 2 CPU ranks, 1 KiB .. 1 MiB, checked."""
    tmp = tmp_path_factory.mktemp("measured")
    out = tmp / "all_reduce-ws2-local-default.json"
    env = dict(os.environ, SHARDSCOPE_THREADS_PER_RANK="1", OMP_NUM_THREADS="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "shardscope.collectives", "--cpu", "--op", "all_reduce", "--check", "-b", "1024",
                           "-e", "1048576", "-f", "32", "-w", "1", "-n", "3", "--out", str(out)],
                          cwd=tmp, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def _time_tolerance_s(time_s: float) -> float:
    """Half a unit in the last place nccl-tests' time format keeps, in seconds."""
    decimals = len(format_time_us(time_s * 1e6).strip().partition(".")[2])
    return 0.5 * 10.0**-decimals / 1e6 + 1e-15


def _assert_round_trip(doc: dict[str, Any], imported: dict[str, Any]) -> None:
    """Every row of ``doc`` comes back from the printed table, equal up to printing."""
    ours = sorted(doc["rows"], key=lambda r: (r["size_bytes"], r["in_place"]))
    back = sorted(imported["rows"], key=lambda r: (r["size_bytes"], r["in_place"]))
    assert imported["op"] == doc["job"]["op"]
    assert imported["world_size"] == doc["job"]["world_size"]
    assert len(back) == len(ours)
    for mine, theirs in zip(ours, back, strict=True):
        assert (theirs["size_bytes"], theirs["in_place"], theirs["dtype"]) == (mine["size_bytes"], mine["in_place"], mine["dtype"])
        assert theirs["time_s"] == pytest.approx(mine["time_s"], abs=_time_tolerance_s(mine["time_s"]))
        # import derives busbw from the printed time with the same factors: equal up to the time's rounding
        assert theirs["busbw_gbps"] == pytest.approx(mine["busbw_gbps"], rel=_time_tolerance_s(mine["time_s"]) / mine["time_s"] * 1.01)


def test_report_of_a_real_job_reads_back_with_import(measured: Path, tmp_path: Path) -> None:
    report = tmp_path / "all_reduce_report.txt"
    made = shardscope("collectives", "report", measured, "--out", report, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    imported = shardscope("collectives", "import", report, "--json", cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr

    doc = json.loads(measured.read_text())
    back = json.loads(imported.stdout)
    _assert_round_trip(doc, back)
    assert back["reported_avg_busbw_gbps"] == pytest.approx(mean(r["busbw_gbps"] for r in doc["rows"]), rel=1e-5)
    assert [d["host"] for d in back["devices"]] == [doc["env"]["host"]] * 2
    # the importer's own consistency check passes on every printed line
    parsed = parse_nccl_tests(report.read_text(), str(report))
    assert parsed.rows and all(row["busbw_consistent"] and row["wrong"] == 0 for row in parsed.rows)


def test_report_has_the_nccl_tests_shape(measured: Path, tmp_path: Path) -> None:
    proc = shardscope("collectives", "report", measured, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    ours = GEN3.read_text().splitlines()
    header_at = next(i for i, line in enumerate(ours) if line.startswith("#       size"))
    # the three header lines of nccl-tests 2.20 (trailing blanks aside), verbatim
    assert [line.rstrip() for line in ours[header_at - 1 : header_at + 2]] == [
        line for line in lines if line.startswith(("#       ", "#        (B)", "#              "))]
    data = [line for line in lines if line.strip()[:1].isdigit()]
    assert len(data) == 3  # 1 KiB, 32 KiB, 1 MiB
    for line in data:
        tokens = line.split()
        assert tokens[2:5] == ["float", "sum", "-1"]
        assert tokens[5:9] == ["N/A"] * 4  # all_reduce is measured in place only
        assert tokens[12] == "0"
    # the data columns line up under nccl-tests' own (same widths as its format strings)
    their_row = next(line for line in ours if line.strip()[:1].isdigit())
    assert [len(line) for line in data] == [len(their_row.rstrip())] * 3
    assert lines[-2].startswith("# Avg bus bandwidth    : ")


def test_out_of_place_ops_fill_the_out_of_place_group(tmp_path: Path) -> None:
    doc = collective_doc("all_gather", world_size=4)
    text = format_report(doc, "ag.json")
    data = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()]
    assert all(tokens[9:13] == ["N/A"] * 4 and tokens[8] == "0" for tokens in data)
    assert all(tokens[3:5] == ["none", "-1"] for tokens in data)
    path = tmp_path / "all_gather_report.txt"
    path.write_text(text)
    back = parse_nccl_tests(text, str(path))
    assert back.op == "all_gather" and back.world_size == 4
    assert [row["placement_mode"] for row in back.rows] == ["out_of_place"] * 4
    assert all(row["busbw_consistent"] for row in back.rows)


@pytest.mark.parametrize(("time_us", "printed"), [(35.154, "  35.15"), (135.84, "  135.8"), (12645.7, "  12646")])
def test_times_use_nccl_tests_formats(time_us: float, printed: str) -> None:
    assert format_time_us(time_us) == printed


def test_rooted_ops_print_root_zero_and_long_times(tmp_path: Path) -> None:
    doc = collective_doc("broadcast", world_size=8, seconds_per_byte=2e-8)  # up to ~21 ms: the %7.0f format
    text = format_report(doc, "bc.json")
    back = parse_nccl_tests(text, "bc.txt")
    assert back.op == "broadcast" and back.world_size == 8
    assert {row["root"] for row in back.rows} == {0}
    _assert_round_trip(doc, {"op": back.op, "world_size": back.world_size, "rows": to_rows_for_db(back, "bc.txt")})


def test_a_failed_check_shows_in_wrong_and_a_footer() -> None:
    doc = collective_doc("reduce_scatter")
    doc["rows"][1].update(check_ok=False, wrong=512)
    text = format_report(doc, "rs.json")
    line = [line for line in text.splitlines() if line.strip()[:1].isdigit()][1]
    assert line.split()[8] == "512"
    assert "# Data check FAILED at sizes (B): 16384" in text
    assert [row["wrong"] for row in parse_nccl_tests(text, "rs.txt").rows] == [0, 512, 0, 0]


def test_several_files_print_one_table_each(tmp_path: Path) -> None:
    paths = []
    for op in ("all_reduce", "reduce_scatter"):
        path = tmp_path / f"{op}.json"
        path.write_text(json.dumps(collective_doc(op)))
        paths.append(path)
    proc = shardscope("collectives", "report", *paths, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("# Avg bus bandwidth") == 2
    assert proc.stdout.count("#       size") == 2


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, "file not found"),
        ("{not json", "not valid JSON"),
        (json.dumps({"kind": "training", "rows": []}), "not a collective job result"),
        (json.dumps({"kind": "collectives", "job": {}, "rows": []}), "no measured rows"),
        (json.dumps({"kind": "collectives", "job": {}, "rows": [{"size_bytes": 8}]}), "rows[0] lacks count"),
    ],
    ids=["missing", "not-json", "training-file", "no-rows", "row-fields"],
)
def test_bad_inputs_are_one_line_user_errors(tmp_path: Path, content: str | None, fragment: str) -> None:
    path = tmp_path / "job.json"
    if content is not None:
        path.write_text(content)
    out = tmp_path / "report.txt"
    proc = shardscope("collectives", "report", path, "--out", out, cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardscope: error:") and fragment in lines[0]
    assert str(path) in lines[0] and not out.exists()


def test_busbw_in_the_table_is_the_documents_not_recomputed() -> None:
    # Averages and bandwidths come from the job file; a doc with a deliberately odd busbw shows it.
    doc = collective_doc("all_reduce")
    doc["rows"][0]["busbw_gbps"] = 12.345
    line = next(line for line in format_report(doc, "x").splitlines() if line.strip()[:1].isdigit())
    assert line.split()[11] == "12.35"
    assert busbw_gbps("all_reduce", 2, 1024, doc["rows"][0]["time_s"]) != pytest.approx(12.345)


@pytest.mark.parametrize(("env", "line"), [
    ({"comm_library": "nccl 2.21.5", "backend": "nccl", "torch": "2.6.0"}, "nccl 2.21.5, torch 2.6.0"),
    ({"comm_library": "gloo (torch 2.13.0+cpu)", "backend": "gloo", "torch": "2.13.0+cpu"}, "gloo (torch 2.13.0+cpu)"),
    ({"comm_library": "rccl 2.18.3", "backend": "nccl", "torch": "2.6.0"}, "rccl 2.18.3 on nccl, torch 2.6.0"),
])
def test_the_comm_line_says_library_backend_and_torch_once(env, line):
    from shardscope.collectives.report import _comm

    assert _comm(env) == line
