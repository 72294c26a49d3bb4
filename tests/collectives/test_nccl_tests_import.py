"""Reading nccl-tests output of every generation, checked against the readings in SOURCES.md.

The files in tests/data/nccl-tests/ are verbatim copies of real output (see SOURCES.md there).
Variants (interleaved log lines, truncation, missing lines) are made in the tests from a copy
of their text; JSON and generation-1 data rows are constructed and labelled as such.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean
from typing import Any

import pytest

from shardscope.contracts.factors import busbw_factor
from shardscope.collectives.nccl_tests import (
    NcclTestsResult,
    parse_nccl_tests,
    read_nccl_tests,
    to_rows_for_db,
)
from shardscope.errors import UserError

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-tests"
GEN1 = DATA / "alltoall-gen1-header-8x-a100.txt"
GEN2 = DATA / "all_reduce_perf-gen2-2x8-h100-16ranks.txt"
GEN3 = DATA / "all_reduce_perf-gen3-2x-gb10.txt"

NCCL_INFO = "ztan-mig-235z:6899:6899 [0] NCCL INFO NET/Socket : Using [0]enp0s12:10.0.0.2<0>"
NCCL_WARN = "ztan-mig-gq73:6740:6801 [7] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [send] via NET/Socket/0"
MPI_WARNING = "[ztan-mig-235z:06890] 15 more processes have sent help message help-mpi-btl-base.txt / btl:no-nics"


def _sizes(result: NcclTestsResult) -> list[int]:
    return sorted({row["size_bytes"] for row in result.rows})


def _data_line_indices(lines: list[str]) -> list[int]:
    return [index for index, line in enumerate(lines) if line.strip()[:1].isdigit()]


# --------------------------------------------------------------------------- generation 2


def test_gen2_reads_every_reading_of_sources_md() -> None:
    result = read_nccl_tests(GEN2)

    assert result.generation == 2
    assert result.version is None
    assert result.op == "all_reduce"
    assert result.world_size == 16
    assert len(result.devices) == 16
    assert {device["host"] for device in result.devices} == {"ztan-mig-235z", "ztan-mig-gq73"}
    assert result.devices[8] == {
        "rank": 8, "host": "ztan-mig-gq73", "device": 0, "bus_id": "0000:04:00", "name": "NVIDIA H100 80GB HBM3",
    }
    sizes = _sizes(result)
    assert len(sizes) == 31
    assert sizes[0] == 8 and sizes[-1] == 8 * 1024**3
    assert len(result.rows) == 62
    assert sum(row["placement_mode"] == "in_place" for row in result.rows) == 31


def test_gen2_peak_is_the_8gib_out_of_place_row() -> None:
    result = read_nccl_tests(GEN2)
    peak = max(result.rows, key=lambda row: row["busbw_gbps"])

    assert result.peak_busbw_gbps() == pytest.approx(338.82)
    assert peak["size_bytes"] == 8589934592
    assert peak["placement_mode"] == "out_of_place"
    assert peak["algbw_gbps"] == pytest.approx(180.71)
    assert peak["time_s"] == pytest.approx(47535e-6)
    assert peak["algbw_gbps"] * busbw_factor("all_reduce", 16) == pytest.approx(338.8, abs=0.05)


def test_gen2_footer_is_the_mean_of_all_62_busbw_values() -> None:
    result = read_nccl_tests(GEN2)

    assert result.reported_avg_busbw_gbps == pytest.approx(70.742)
    # nccl-tests averages unrounded values; the printed ones are rounded to 0.01.
    assert mean(row["busbw_gbps"] for row in result.rows) == pytest.approx(70.742, abs=0.005)


def test_gen2_row_fields() -> None:
    row = read_nccl_tests(GEN2).rows[0]

    assert row == {
        "size_bytes": 8,
        "count": 2,
        "dtype": "float32",
        "redop": "sum",
        "root": None,
        "placement_mode": "out_of_place",
        "time_s": pytest.approx(135.8e-6),
        "algbw_gbps": 0.0,
        "busbw_gbps": 0.0,
        "wrong": 0,
        "max_error": None,
        "op": "all_reduce",
        "world_size": 16,
        "busbw_consistent": True,
    }


@pytest.mark.parametrize("path", [GEN2, GEN3], ids=["gen2", "gen3"])
def test_printed_bandwidths_of_real_files_are_consistent(path: Path) -> None:
    assert all(row["busbw_consistent"] for row in read_nccl_tests(path).rows)


# --------------------------------------------------------------------------- generations 1 and 3


def test_gen1_header_without_rows_is_a_clear_user_error() -> None:
    with pytest.raises(UserError, match="no data rows") as caught:
        read_nccl_tests(GEN1)
    assert str(GEN1) in str(caught.value)


def test_gen3_reads_version_ranks_and_sizes_of_a_truncated_file() -> None:
    result = read_nccl_tests(GEN3)

    assert result.generation == 3
    assert result.version == "2.20.0"
    assert result.op == "all_reduce"
    assert result.world_size == 2
    assert [device["host"] for device in result.devices] == ["spark-d708", "spark-dbf4"]
    assert _sizes(result) == [8192, 16384, 32768, 65536]
    assert len(result.rows) == 8
    assert all(row["busbw_gbps"] == row["algbw_gbps"] for row in result.rows)
    assert result.reported_avg_busbw_gbps is None


def test_gen1_data_rows_read_the_error_column() -> None:
    # CONSTRUCTED, not real output: the real generation-1 header of GEN1 followed by two rows
    # written in generation 1's format (time, algbw, busbw, max error "%5.0le" or N/A).
    rows = [
        "   134217728      33554432   float     sum   1500.0   89.48   78.29  0e+00   1480.5   90.66   79.32  0e+00",
        "   268435456      67108864   float     sum     2900   92.56   80.99  2e-07     2875   93.37   81.70    N/A",
    ]
    text = GEN1.read_text() + "\n".join(rows) + "\n"

    result = parse_nccl_tests(text, str(GEN1))

    assert result.generation == 1
    assert result.op == "all_to_all"  # only the file name says so
    assert result.world_size == 8
    assert [row["max_error"] for row in result.rows] == [0.0, 0.0, 2e-07, None]
    assert all(row["wrong"] is None for row in result.rows)
    assert all(row["busbw_consistent"] for row in result.rows)


# --------------------------------------------------------------------------- tolerance


def test_interleaved_log_lines_are_skipped() -> None:
    lines = GEN2.read_text().splitlines()
    noisy = list(lines)
    for index in reversed(_data_line_indices(lines)):
        noisy.insert(index, NCCL_INFO if index % 2 else NCCL_WARN)
    header_at = next(index for index, line in enumerate(noisy) if line.lstrip("# ").startswith("size"))
    noisy.insert(header_at + 1, NCCL_INFO)
    noisy.insert(header_at, MPI_WARNING)
    noisy.insert(0, MPI_WARNING)

    result = parse_nccl_tests("\n".join(noisy), "noisy.log")

    assert result == parse_nccl_tests("\n".join(lines), "noisy.log")
    assert len(result.rows) == 62


def test_launcher_line_prefixes_are_removed() -> None:
    tagged = "\n".join(f"[1,0]<stdout>:{line}" for line in GEN3.read_text().splitlines())

    assert parse_nccl_tests(tagged, "tagged.log").rows == read_nccl_tests(GEN3).rows


def test_srun_label_prefixes_padded_to_the_widest_task_id_are_removed() -> None:
    """`srun --label` on 16 tasks writes " 0: " (padded) and " 0:" for an empty line, as in nccl-tests#290."""
    labelled = "\n".join(f" 0: {line}" if line else " 0:" for line in GEN2.read_text().splitlines())

    result = parse_nccl_tests(labelled, "labelled.log")

    assert result.rows == read_nccl_tests(GEN2).rows and result.world_size == 16


def test_truncated_file_keeps_complete_rows_and_drops_the_cut_line() -> None:
    text = GEN2.read_text()
    cut = text.index("  1073741824") + 60  # inside the 1 GiB line

    result = parse_nccl_tests(text[:cut], "cut.log")

    assert _sizes(result)[-1] == 536870912
    assert len(result.rows) == 2 * 27
    assert result.reported_avg_busbw_gbps is None


def test_extra_columns_after_the_in_place_group_are_ignored() -> None:
    # Made from GEN3: the timestamp column that nccl-tests adds with -R (report timestamps).
    lines = [
        line + "  2025-01-01 12:00:00" if line.strip()[:1].isdigit() else line
        for line in GEN3.read_text().splitlines()
    ]
    header_at = next(index for index, line in enumerate(lines) if line.lstrip("# ").startswith("size"))
    lines[header_at] += "            timestamp"

    assert parse_nccl_tests("\n".join(lines), GEN3.name).rows == read_nccl_tests(GEN3).rows


def test_a_misprinted_busbw_is_flagged() -> None:
    text = GEN3.read_text().replace("67.93    0.96    0.96", "67.93    0.96    1.50")

    flagged = [row for row in parse_nccl_tests(text, GEN3.name).rows if not row["busbw_consistent"]]

    assert [(row["size_bytes"], row["placement_mode"]) for row in flagged] == [(65536, "out_of_place")]


# --------------------------------------------------------------------------- errors


def test_text_that_is_not_nccl_tests_output_is_a_user_error() -> None:
    text = "GPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-55\n" + NCCL_INFO + "\n"

    with pytest.raises(UserError, match="no nccl-tests table") as caught:
        parse_nccl_tests(text, "topo.txt")
    assert "topo.txt" in str(caught.value)


def test_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="file not found"):
        read_nccl_tests(tmp_path / "absent.txt")


def test_unknown_op_is_a_user_error() -> None:
    text = GEN3.read_text().replace("# Collective test starting: all_reduce_perf\n", "")

    assert parse_nccl_tests(text, GEN3.name).op == "all_reduce"  # the file name still says it
    with pytest.raises(UserError, match="cannot tell which collective"):
        parse_nccl_tests(text, "results.txt")


def test_a_test_we_do_not_model_is_a_user_error() -> None:
    text = GEN3.read_text().replace("starting: all_reduce_perf", "starting: gather_perf")

    with pytest.raises(UserError, match="gather_perf"):
        parse_nccl_tests(text, GEN3.name)


def test_missing_rank_lines_are_read_from_the_busbw_ratio() -> None:
    # issue 16 changed this: a log without rank lines is no longer refused
    text = "\n".join(line for line in GEN3.read_text().splitlines() if "Rank" not in line)

    result = parse_nccl_tests(text, GEN3.name)

    assert (result.world_size, result.world_size_source) == (2, "busbw_ratio")
    assert any("busbw/algbw" in note for note in result.notes)


def test_two_tables_in_one_file_are_a_user_error() -> None:
    with pytest.raises(UserError, match="2 nccl-tests tables"):
        parse_nccl_tests(GEN3.read_text() + GEN3.read_text(), GEN3.name)


# --------------------------------------------------------------------------- JSON (-J)


def _constructed_json(devices: int, ngpus: int) -> dict[str, Any]:
    """CONSTRUCTED, not real output: an all_gather_perf -J file on 4 ranks shaped after the
    writer in nccl-tests src/util.cu (JSON file version 2); the numbers are made up but
    consistent (algbw = size/time, busbw = algbw * 3/4)."""
    return {
        "version": 2,
        "start_time": "2025-01-01 00:00:00",
        "args": ["./build/all_gather_perf", "-b", "1M", "-e", "2M", "-f", "2", "-d", "bfloat16", "-J", "ag.json"],
        "env": [],
        "nccl_version": 22703,
        "config": {
            "nthreads": 1,
            "ngpus": ngpus,
            "minimum_bytes": 1048576,
            "maximum_bytes": 2097152,
            "step_factor": 2,
            "validation": 1,
            "devices": [
                {"rank": rank * ngpus, "group": 0, "pid": 100 + rank, "hostname": "nodeA", "device": rank,
                 "device_hex": f"0000:{rank + 0x1b:02x}:00", "device_info": "NVIDIA H100 80GB HBM3"}
                for rank in range(devices)
            ],
        },
        "results": [
            {"size": 1048576, "count": 524288, "type": "bfloat16", "redop": "none", "root": "    -1",
             "out_of_place": {"time": 40.0, "alg_bw": 26.2144, "bus_bw": 19.6608, "nwrong": 0.0},
             "in_place": {"time": 38.5, "alg_bw": 27.235740, "bus_bw": 20.426805, "nwrong": 0.0},
             "actual_iterations": 20, "experiment_name": ""},
            {"size": 2097152, "count": 1048576, "type": "bfloat16", "redop": "none", "root": "    -1",
             "out_of_place": {"time": 60.0, "alg_bw": 34.952533, "bus_bw": 26.2144, "nwrong": None},
             "in_place": {"time": 59.0, "alg_bw": 35.544949, "bus_bw": 26.658712, "nwrong": None},
             "actual_iterations": 20, "experiment_name": ""},
        ],
        "out_of_bounds": {"count": 0, "okay": "true"},
        "average_bus_bandwidth": {"bandwidth": 23.240179, "okay": "unchecked"},
        "errors": [],
        "end_time": "2025-01-01 00:00:05",
    }


@pytest.mark.parametrize(("devices", "ngpus"), [(4, 1), (1, 4)], ids=["4-processes", "1-process-4-gpus"])
def test_json_output_is_read(tmp_path: Path, devices: int, ngpus: int) -> None:
    path = tmp_path / "ag.json"
    path.write_text(json.dumps(_constructed_json(devices, ngpus), indent=1))

    result = read_nccl_tests(path)

    assert result.generation == "json"
    assert result.op == "all_gather"
    assert result.world_size == 4
    assert result.version is None
    assert result.devices[0] == {
        "rank": 0, "host": "nodeA", "device": 0, "bus_id": "0000:1b:00", "name": "NVIDIA H100 80GB HBM3",
    }
    assert result.reported_avg_busbw_gbps == pytest.approx(23.240179)
    assert len(result.rows) == 4
    assert {row["dtype"] for row in result.rows} == {"bfloat16"}
    assert all(row["redop"] is None and row["root"] is None for row in result.rows)
    assert [row["wrong"] for row in result.rows] == [0, 0, None, None]
    assert all(row["busbw_consistent"] for row in result.rows)
    assert result.peak_busbw_gbps() == pytest.approx(26.658712)


def test_unfinished_json_is_a_user_error() -> None:
    text = json.dumps(_constructed_json(4, 1))[:300]

    with pytest.raises(UserError, match="not valid JSON") as caught:
        parse_nccl_tests(text, "ag.json")
    assert "ag.json" in str(caught.value)


def test_json_without_devices_takes_the_rank_count_from_the_busbw_ratio() -> None:
    # issue 16 changed this: without devices the ratio busbw/algbw (0.75 = 3/4) tells 4 ranks
    document = _constructed_json(4, 1)
    document["config"]["devices"] = []

    result = parse_nccl_tests(json.dumps(document), "ag.json")

    assert (result.world_size, result.world_size_source) == (4, "busbw_ratio")


def test_json_result_without_size_is_a_user_error() -> None:
    document = _constructed_json(4, 1)
    del document["results"][1]["size"]

    with pytest.raises(UserError, match=r"results\[1\].*size"):
        parse_nccl_tests(json.dumps(document), "ag.json")


# --------------------------------------------------------------------------- database rows


def test_rows_for_db_derive_bandwidths_from_size_and_time() -> None:
    result = read_nccl_tests(GEN2)

    rows = to_rows_for_db(result, GEN2.name)

    assert len(rows) == 62
    assert set(rows[0]) == {
        "op", "world_size", "dtype", "size_bytes", "time_s", "algbw_gbps", "busbw_gbps",
        "in_place", "source", "source_file",
    }
    peak = rows[60]
    assert (peak["size_bytes"], peak["in_place"]) == (8589934592, False)
    assert peak["busbw_gbps"] == pytest.approx(338.82, abs=0.01)
    assert rows[61]["in_place"] is True
    assert {row["source"] for row in rows} == {"nccl-tests"}
    assert {row["source_file"] for row in rows} == {GEN2.name}
    assert {(row["op"], row["world_size"], row["dtype"]) for row in rows} == {("all_reduce", 16, "float32")}


# --------------------------------------------------------------------------- issue 16: rank count without device lines

REFERENCE = Path(__file__).resolve().parents[2] / "workflow" / "shardscope" / "figures" / "reference"
PUBLIC_LOGS = sorted(
    path for path in [*DATA.glob("*.txt"), *(DATA.parent / "diagnose").glob("nccl-tests-*allreduce*.txt"), *REFERENCE.glob("*.txt")]
    if "topo" not in path.name
)


def _readable(path: Path) -> bool:
    try:
        read_nccl_tests(path)
    except UserError:
        return False  # header-only and log-only files (see their SOURCES.md)
    return True


@pytest.mark.parametrize("path", [p for p in PUBLIC_LOGS if _readable(p)], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_public_log_without_device_lines_gives_the_same_ranks_and_peak(path: Path) -> None:
    from shardscope.collectives.nccl_tests import _LAUNCHER_PREFIX, _RANK_LINE

    full = read_nccl_tests(path)
    text = "\n".join(line for line in path.read_text().splitlines()
                     if not _RANK_LINE.match(_LAUNCHER_PREFIX.sub("", line).rstrip()))

    stripped = parse_nccl_tests(text, str(path))

    assert full.world_size_source == "devices"
    assert stripped.world_size_source in ("command_line", "busbw_ratio")
    assert stripped.world_size == full.world_size
    assert stripped.peak_busbw_gbps() == full.peak_busbw_gbps()
    peak = max(row["busbw_gbps"] for row in to_rows_for_db(full, path.name))
    assert max(row["busbw_gbps"] for row in to_rows_for_db(stripped, path.name)) == peak


@pytest.mark.parametrize(("command", "ranks"), [
    ("$ ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 8", 8),
    ("mpirun -np 16 -npernode 8 /opt/nccl-tests/build/all_reduce_perf -b 8 -e 8G -f 2 -g 1", 16),
    ("mpiexec -n 4 ./all_gather_perf -t 2 -g 2", 16),
    ("srun -N 2 --ntasks-per-node=8 ./build/all_reduce_perf -b 8M -e 8G", 16),
    ("srun --ntasks=4 all_reduce_perf_mpi -g 1", 4),
    ("torchrun --nproc-per-node 8 --nnodes 2 all_reduce_perf -g 1", 16),
    ("root@host:~# ./build/alltoall_perf -g2", 2),
    ("mpirun -H a:1,b:1 ./all_reduce_perf -g 1", None),
])
def test_ranks_from_the_command_line(command: str, ranks: int | None) -> None:
    from shardscope.collectives.world_size import ranks_from_command

    found = ranks_from_command([command])
    assert (found[0] if found else None) == ranks


def test_ratio_refuses_rows_that_disagree() -> None:
    from shardscope.collectives.world_size import ranks_from_ratio

    rows = [{"algbw_gbps": 100.0, "busbw_gbps": 175.0}, {"algbw_gbps": 100.0, "busbw_gbps": 187.5}]  # n = 8, then 16
    assert ranks_from_ratio("all_reduce", rows)[0] is None
    assert ranks_from_ratio("all_reduce", rows[:1])[0] == 8
    assert ranks_from_ratio("broadcast", rows[:1])[0] is None


def test_generation_0_header_without_hash_is_read() -> None:
    text = GEN3.read_text().replace("#       size", "        size").replace("#        (B)", "         (B)")
    text = text.replace("size         count      type   redop", "bytes             N      type      op")

    result = parse_nccl_tests(text, GEN3.name)

    assert (result.world_size, len(result.rows)) == (2, 8)
