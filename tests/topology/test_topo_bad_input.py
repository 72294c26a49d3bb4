"""Damaged probe output gives one clear UserError, never a traceback or a wrong but confident topology.

Every bad input is built from a real fixture: cut in the middle of the matrix, a cell dropped
from a row, a row label changed so a GPU appears twice, a diagonal that is not X, a header
that lacks a column, and files that are not text at all.
"""

from __future__ import annotations

import random
import re
import struct
import zlib
from pathlib import Path

import pytest

from shardscope.errors import UserError
from shardscope.topology.nvidia_smi import parse_nvidia_smi
from shardscope.topology.parse import parse_file
from shardscope.topology.rocm_smi import LINK_TYPE_TABLE, parse_rocm_smi

DATA = Path(__file__).resolve().parents[1] / "data" / "topo"
NVIDIA = sorted(p.name for p in DATA.glob("*.txt") if not p.name.startswith("22-"))
MULTI_GPU = [n for n in NVIDIA if not n.startswith("18-")]
MI300A = "22-amd-rocm-smi-showtopo-4x-mi300a.txt"
_ROW = re.compile(r"^\s*(GPU\d+|NIC\d+|mlx5_\d+)\s")


def _text(name: str) -> str:
    return (DATA / name).read_text()


def _rows(text: str) -> list[int]:
    """Line numbers of the matrix rows (a device label followed by cells)."""
    lines = text.split("\n")
    clean = [re.sub(r"\x1b?\[[0-9;]*m", "", line) for line in lines]
    return [
        i for i, line in enumerate(clean)
        if _ROW.match(line) and len(line.split()) > 1 and not _ROW.match(line.split(None, 1)[1])  # not the header
    ]


def _replace_line(text: str, index: int, line: str) -> str:
    lines = text.split("\n")
    lines[index] = line
    return "\n".join(lines)


def _drop_token(line: str, position: int) -> str:
    """``line`` without its whitespace-separated token number ``position`` (0 is the label)."""
    parts = re.split(r"(\s+)", line.strip("\n"))
    tokens = [i for i, part in enumerate(parts) if part and not part.isspace()]
    victim = tokens[position]
    return "".join(parts[: victim - 1] + parts[victim + 1 :])


def _parse_fails(text: str, *fragments: str) -> str:
    with pytest.raises(UserError) as info:
        parse_nvidia_smi(text, "saved/topo.txt")
    message = str(info.value)
    assert message.startswith("saved/topo.txt: ")
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_fixtures_are_consistent() -> None:
    for name in NVIDIA:  # the checks accept every real output
        parse_nvidia_smi(_text(name), name)


# --------------------------------------------------------------------------- truncation


@pytest.mark.parametrize("name", MULTI_GPU)
def test_cut_in_the_middle_of_any_matrix_row(name: str) -> None:
    text = _text(name)
    lines = text.split("\n")
    rows = _rows(text)
    for row in rows:
        offset = sum(len(line) + 1 for line in lines[:row])
        middle = offset + len(lines[row]) // 2
        _parse_fails(text[:middle])


@pytest.mark.parametrize("name", MULTI_GPU)
def test_cut_between_matrix_rows_says_truncated(name: str) -> None:
    text = _text(name)
    lines = text.split("\n")
    for row in _rows(text)[:-1]:
        _parse_fails("\n".join(lines[: row + 1]) + "\n", "truncated")


def test_cut_in_the_middle_of_the_file() -> None:
    text = _text("01-hgx-h200-nvswitch-nv18-12nics.txt")
    _parse_fails(text[: len(text) // 3])


def test_header_alone_says_truncated() -> None:
    header = _text("10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt").split("\n")[0]
    _parse_fails(header + "\n", "no GPU rows", "truncated")


def test_rows_without_header_say_so() -> None:
    text = _text("10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt")
    _parse_fails(text.split("\n", 1)[1], "no header row")


# --------------------------------------------------------------------------- damaged rows


@pytest.mark.parametrize("name", MULTI_GPU)
def test_a_cell_dropped_from_any_row(name: str) -> None:
    text = _text(name)
    lines = text.split("\n")
    for row in _rows(text):
        for position in (1, 2, len(lines[row].split()) - 1):
            _parse_fails(_replace_line(text, row, _drop_token(lines[row], position)))


def test_dropped_link_cell_is_named() -> None:
    text = _text("13-8x-pcie-pix-pxb-sys-numa-na.txt")
    row = _rows(text)[2]  # GPU2
    message = _parse_fails(_replace_line(text, row, _drop_token(text.split("\n")[row], 4)), "row GPU2")
    assert "not a link code" in message or "cells" in message


def test_dropped_affinity_value_in_one_gpu_row() -> None:
    text = _text("01-hgx-h200-nvswitch-nv18-12nics.txt")
    row = _rows(text)[3]
    line = text.split("\n")[row]
    _parse_fails(_replace_line(text, row, _drop_token(line, len(line.split()) - 1)), "row GPU3", "same columns")


@pytest.mark.parametrize("name", MULTI_GPU)
def test_row_label_swapped_so_a_gpu_appears_twice(name: str) -> None:
    text = _text(name)
    lines = text.split("\n")
    gpu_rows = [i for i in _rows(text) if re.sub(r"\x1b?\[[0-9;]*m", "", lines[i]).lstrip().startswith("GPU")]
    victim = gpu_rows[-1]
    twin = re.sub(r"\x1b?\[[0-9;]*m", "", lines[gpu_rows[-2]]).split()[0]
    label = re.sub(r"\x1b?\[[0-9;]*m", "", lines[victim]).split()[0]
    _parse_fails(_replace_line(text, victim, lines[victim].replace(label, twin, 1)), twin, "twice")


@pytest.mark.parametrize("code", ["NV18", "PIX", "SYS"])
def test_diagonal_that_is_not_x(code: str) -> None:
    text = _text("01-hgx-h200-nvswitch-nv18-12nics.txt")
    row = _rows(text)[2]
    damaged = _replace_line(text, row, text.split("\n")[row].replace(" X ", code, 1))
    _parse_fails(damaged, "diagonal", "GPU2/GPU2")


def test_x_off_the_diagonal() -> None:
    text = _text("16-2x-gtx1080ti-phb-consumer.txt")
    row = _rows(text)[1]
    damaged = _replace_line(text, row, text.split("\n")[row].replace("PHB", "X", 1))
    _parse_fails(damaged)


def test_asymmetric_gpu_codes() -> None:
    text = _text("10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt")
    row = _rows(text)[0]
    damaged = _replace_line(text, row, text.split("\n")[row].replace("NV12", "NODE", 1))
    _parse_fails(damaged, "not symmetric", "GPU0/GPU1")


def test_asymmetric_nic_codes_are_noted_not_fatal() -> None:
    text = _text("10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt")
    nic_row = _rows(text)[8]  # NIC0: NODE PHB NODE … ; make NIC0/GPU1 disagree with GPU1/NIC0 (PHB)
    line = text.split("\n")[nic_row]
    topology = parse_nvidia_smi(_replace_line(text, nic_row, line.replace("PHB", "NODE", 1)), "t.txt")
    assert any("NIC paths are not symmetric" in note for note in topology.notes)
    assert topology.gpus[1].nearest_nics == ("NIC0", "NIC1")  # still read from the GPU row


# --------------------------------------------------------------------------- non-square / mislabelled


def test_header_missing_a_gpu_column() -> None:
    text = _text("13-8x-pcie-pix-pxb-sys-numa-na.txt")
    lines = text.split("\n")
    lines[0] = lines[0].replace("GPU7    ", "", 1)
    _parse_fails("\n".join(lines), "GPU7")


def test_header_with_a_gap_in_gpu_numbers() -> None:
    text = _text("11-3x-rtx-a6000-nv4-pair-plus-pcie-ansi-header.txt")
    _parse_fails(text.replace("GPU2", "GPU5"), "GPU5")


def test_header_naming_a_column_twice() -> None:
    text = _text("16-2x-gtx1080ti-phb-consumer.txt")
    lines = text.split("\n")
    lines[0] = lines[0].replace("GPU1", "GPU0", 1)
    _parse_fails("\n".join(lines), "GPU0")


def test_missing_gpu_row() -> None:
    text = _text("19-7x-gtx10xx-soc-old-driver-ansi.txt")
    lines = text.split("\n")
    del lines[_rows(text)[4]]
    _parse_fails("\n".join(lines), "no row for GPU4", "truncated")


# --------------------------------------------------------------------------- not text at all


def _png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    pixels = zlib.compress(bytes(random.Random(1).randrange(256) for _ in range(4 * 65)))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 16, 4, 8, 6, 0, 0, 0))
            + chunk(b"IDAT", pixels) + chunk(b"IEND", b""))


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"", "empty"),
        (b"  \n\n\t\n", "empty"),
        (b"\x00" * 4096, "binary"),
        (_png(), "binary"),
        (bytes(random.Random(2).randrange(256) for _ in range(2048)), "binary"),
        (b"\xff\xfe" + bytes(random.Random(3).randrange(256) for _ in range(2048)), ""),
    ],
    ids=["empty", "blank", "zero-bytes", "png", "random-bytes", "utf16-garbage"],
)
def test_files_that_are_not_probe_text(tmp_path: Path, content: bytes, fragment: str) -> None:
    path = tmp_path / "topo.txt"
    path.write_bytes(content)
    with pytest.raises(UserError) as info:
        parse_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and fragment in message and "\n" not in message


def test_utf16_without_bom_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "topo.txt"
    text = _text("11-3x-rtx-a6000-nv4-pair-plus-pcie-ansi-header.txt")
    path.write_bytes(text.encode("utf-16-le"))
    assert parse_file(path).islands == [[0, 1], [2]]


def test_truncated_utf16_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "topo.txt"
    text = _text("10-8x-h100-nvl-nv12-pairs-node-sys-2nics.txt")
    data = text.encode("utf-16")
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="truncated|row"):
        parse_file(path)


# --------------------------------------------------------------------------- rocm-smi


def _rocm_fails(text: str, *fragments: str) -> None:
    with pytest.raises(UserError) as info:
        parse_rocm_smi(text, "amd.txt")
    message = str(info.value)
    assert message.startswith("amd.txt: ") and "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def _link_table_rows(text: str) -> list[int]:
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if LINK_TYPE_TABLE in line)
    return [i for i in range(start + 2, len(lines)) if lines[i].startswith("GPU") and "Topology" not in lines[i]]


def test_rocm_cut_in_the_link_type_table() -> None:
    text = _text(MI300A)
    rows = _link_table_rows(text)
    lines = text.split("\n")
    _rocm_fails("\n".join(lines[: rows[2]]), "no row for GPU2", "truncated")
    _rocm_fails("\n".join(lines[: rows[2]] + [lines[rows[2]][:20]]), "truncated")
    _rocm_fails(_replace_line(text, rows[2], lines[rows[2]][:20]), "row GPU2 has 1 cells, expected 4")


def test_rocm_cut_before_the_link_type_table() -> None:
    text = _text(MI300A)
    _rocm_fails(text[: text.index(LINK_TYPE_TABLE) - 40], "no 'Link Type between two GPUs' table")


def test_rocm_row_label_twice() -> None:
    text = _text(MI300A)
    row = _link_table_rows(text)[3]
    _rocm_fails(_replace_line(text, row, text.split("\n")[row].replace("GPU3", "GPU2", 1)), "GPU2 twice")


def test_rocm_diagonal_and_symmetry() -> None:
    text = _text(MI300A)
    row = _link_table_rows(text)[1]
    line = text.split("\n")[row]
    _rocm_fails(_replace_line(text, row, line.replace("0 ", "XGMI ", 1)), "diagonal")
    _rocm_fails(_replace_line(text, row, line.replace("XGMI", "PCIE", 1)), "not symmetric")


def test_rocm_numa_lines_without_brackets() -> None:
    text = _text(MI300A).replace("GPU[", "GPU ").replace("]\t", "\t")
    assert [g.numa_node for g in parse_rocm_smi(text, "amd.txt").gpus] == [0, 1, 2, 3]


def test_json_writers_refuse_nan_and_infinity() -> None:
    # issue 16: no JSON output may hold NaN or Infinity (they are not JSON)
    from shardscope.fileio import dump_json

    with pytest.raises(UserError, match=r"\$\.rows\[1\]\.busbw_gbps"):
        dump_json({"rows": [{"busbw_gbps": 1.0}, {"busbw_gbps": float("nan")}]})
    with pytest.raises(UserError, match="non-finite"):
        dump_json([float("inf")])
    assert dump_json({"x": None}) == '{\n  "x": null\n}\n'
