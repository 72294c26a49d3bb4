"""Read nccl-tests results into rows: every generation of its text table, and its ``-J`` JSON.

nccl-tests (github.com/NVIDIA/nccl-tests) is the reference that our own collective timings
are compared with, and users often have old logs of it. Its table has changed over time:

- generation 1: a max-``error`` column instead of ``#wrong``; ``redop``/``root`` columns only
  for the ops that use them; rank lines without ``Group``;
- generation 2: ``#wrong`` counts, and ``redop`` and ``root`` columns for every op;
- generation 3 (nccl-tests >= 2.1x): the same table under ``# nccl-tests version ...`` and
  ``# Collective test starting: <binary>`` lines, with ``unalign`` among the parameters;
- ``-J FILE`` (nccl-tests >= 2.17): a JSON object with ``args``, ``config`` (holding
  ``devices``) and a ``results`` list of per-size objects whose ``out_of_place`` and
  ``in_place`` entries hold ``time`` (us), ``alg_bw``, ``bus_bw`` and ``nwrong``.

The text reader is driven by the column header, so extra columns (``cputime``, per-iteration
statistics, timestamps) do not confuse it, and it skips anything that is not a table row:
NCCL INFO/WARN lines, MPI warnings, a line cut off at the end of a truncated file.
Each printed line yields two rows, one per placement mode (out-of-place, in-place), or one
when the other group is ``N/A`` throughout (our own report prints unmeasured placements so).

Pasted logs are often partial: generation-0 headers without ``#`` (``bytes N type op ... res``),
a table without its header (columns then read by position), no ``# Using devices`` block. The
rank count then comes from the command line or the busbw/algbw ratio
(:mod:`shardscope.collectives.world_size`), else ``--world-size``, else it stays unknown and the
rows keep their printed busbw (``world_size_source`` says which). No number changes silently:
a value that is not a finite number, a negative size or conflicting rank lines are refused
with the line; a row cut mid-way, 0-byte rows and repeated rank lines are left out or merged
with a note in ``NcclTestsResult.notes``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from shardscope.contracts.factors import OPS, algbw_gbps, busbw_factor, busbw_gbps
from shardscope.collectives.world_size import ranks_from_command, ranks_from_ratio
from shardscope.errors import UserError
from shardscope.fileio import loads_bounded, read_input_text

Generation = Literal[1, 2, 3, "json"]

#: nccl-tests binary name (without ``_perf``) -> our op name.
BINARY_OPS: dict[str, str] = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "alltoall": "all_to_all",
    "sendrecv": "sendrecv",
}

#: nccl-tests type names (all generations) -> our dtype names (torch spelling).
DTYPES: dict[str, str] = {
    "char": "int8",
    "int8": "int8",
    "uint8": "uint8",
    "int": "int32",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
    "half": "float16",
    "float": "float32",
    "double": "float64",
    "bfloat16": "bfloat16",
    "f8e4m3": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
}

#: Printed bandwidths are rounded; a row is consistent when both recomputed bandwidths
#: agree with the printed ones within this relative tolerance or this absolute one (GB/s).
RELATIVE_TOLERANCE = 0.02
ABSOLUTE_TOLERANCE_GBPS = 0.02

PLACEMENT_MODES = ("out_of_place", "in_place")

# Prefixes that launchers put before each line: `mpirun --tag-output` ("[1,0]<stdout>:"), and
# `srun --label` ("0: ", padded to the widest task id, so " 0: " beside "10: "; an empty line is " 0:").
_LAUNCHER_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+:(?: |$))")
#: The first characters a launcher prefix can start with; other lines skip the regex (huge logs: cost per line).
_PREFIX_STARTS = frozenset("[ \t0123456789")
#: A table row starts with its size (after spaces); other lines are not split into words.
_ROW_START = re.compile(r"\s*-?\d")
_RANK_LINE = re.compile(
    r"^#?\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+(?P<host>\S+)"
    r"\s+device\s+(?P<device>\d+)\s+\[(?P<bus_id>[^\]]*)\]\s*(?P<name>.*?)\s*$"
)
_VERSION_LINE = re.compile(r"^#\s*nccl-tests version\s+(?P<version>\S+)")
_STARTING_LINE = re.compile(r"^#\s*Collective test starting:\s*(?P<binary>\S+)")
_AVG_BUSBW_LINE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<value>\S+)")
_BINARY_MENTION = re.compile(r"(?<![A-Za-z0-9_])(?P<stem>[A-Za-z_]+?)_perf(?:_mpi)?\b")
_OP_IN_FILE_NAME = re.compile(
    r"(?<![a-z])(all[_-]?reduce|all[_-]?gather|reduce[_-]?scatter|all[_-]?to[_-]?all"
    r"|broadcast|send[_-]?recv|reduce)(?![a-z])"
)
# An op named in a file name, with `_` and `-` removed -> our op name.
_FILE_NAME_OPS = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "broadcast": "broadcast",
    "sendrecv": "sendrecv",
    "reduce": "reduce",
}
_TIME_COLUMNS = ("time", "cputime")
# Header name of a per-placement column -> our field; other columns are ignored.
_GROUP_COLUMNS = {"time": "time", "cputime": "time", "algbw": "algbw", "busbw": "busbw",
                  "#wrong": "wrong", "error": "error"}
_LEAD_COLUMNS = ("size", "count", "type", "redop", "root")
#: Column names of generation-0 headers (``bytes N type op time algbw busbw res``) -> today's names.
_OLD_NAMES = {"bytes": "size", "N": "count", "op": "redop", "res": "error"}
_INTEGER = re.compile(r"^-?\d+$")
_REDOPS = ("sum", "prod", "min", "max", "avg", "mulsum", "none")
#: How the rank count was obtained (``world_size_source``), in the order they are tried.
WORLD_SIZE_SOURCES = ("devices", "command_line", "busbw_ratio", "flag", "unknown")


@dataclass(frozen=True)
class NcclTestsResult:
    """One nccl-tests run read from a log or JSON file.

    ``rows`` holds one dict per (printed size, placement mode) with the keys ``size_bytes``,
    ``count``, ``dtype``, ``redop``, ``root``, ``placement_mode``, ``time_s``, ``algbw_gbps``
    and ``busbw_gbps`` (as printed), ``wrong`` (wrong elements, None when not reported),
    ``max_error`` (generation 1's max-error column, else None), ``op``, ``world_size`` and
    ``busbw_consistent`` (the printed bandwidths match size/time and the busbw factor; None
    when the world size is unknown). ``world_size`` is None when nothing told it
    (``world_size_source`` ``unknown``); ``notes`` are one sentence each on what was done to
    the input (rows left out, lines merged, where the rank count came from).
    """

    op: str
    world_size: int | None
    generation: Generation
    version: str | None
    devices: list[dict[str, Any]]
    reported_avg_busbw_gbps: float | None
    rows: list[dict[str, Any]]
    world_size_source: str = "devices"
    notes: tuple[str, ...] = ()

    def peak_busbw_gbps(self) -> float:
        """The highest printed bus bandwidth over all rows, the figure people quote for a run."""
        return max(row["busbw_gbps"] for row in self.rows)


def read_nccl_tests(path: str | Path, world_size: int | None = None, max_input_mib: float | None = None,
                    op: str | None = None) -> NcclTestsResult:
    """Read an nccl-tests log or ``-J`` JSON file at ``path``; a missing or too large file is a UserError.

    ``world_size`` is used when the log does not tell its rank count (and must agree when it
    does); ``op`` names the collective when the log does not; ``max_input_mib`` raises the size limit.
    """
    text = read_input_text(path, max_input_mib, "an nccl-tests output file")
    return parse_nccl_tests(text, str(path), world_size=world_size, op=op)


def parse_nccl_tests(text: str, source_name: str, world_size: int | None = None, op: str | None = None) -> NcclTestsResult:
    """Parse nccl-tests output of any generation, or its JSON, naming ``source_name`` in errors."""
    if world_size is not None and world_size < 1:
        raise UserError(f"--world-size {world_size}: expected a positive number of ranks")
    if op is not None and op not in OPS:
        raise UserError(f"--op {op}: expected one of {', '.join(OPS)}")
    if text.lstrip().startswith("{"):
        return _parse_json(text, source_name, world_size, op)
    return _parse_text(text, source_name, world_size, op)


def to_rows_for_db(result: NcclTestsResult, source_name: str) -> list[dict[str, Any]]:
    """Shape ``result`` as rows of our collectives table.

    Bandwidths are derived from size and time with :mod:`shardscope.contracts.factors`, as
    for our own measurements, so both sources are computed the same way; the printed values
    stay in ``result.rows``. With the world size unknown, busbw cannot be derived and is the
    printed value (``world_size`` None marks such rows). Rows of 0 bytes carry no bandwidth and
    are left out (the reader's notes say so).
    """
    return [
        {
            "op": result.op,
            "world_size": result.world_size,
            "dtype": row["dtype"],
            "size_bytes": row["size_bytes"],
            "time_s": row["time_s"],
            "algbw_gbps": algbw_gbps(row["size_bytes"], row["time_s"]),
            "busbw_gbps": (row["busbw_gbps"] if result.world_size is None
                           else busbw_gbps(result.op, result.world_size, row["size_bytes"], row["time_s"])),
            "in_place": row["placement_mode"] == "in_place",
            "source": "nccl-tests",
            "source_file": source_name,
        }
        for row in result.rows
        if row["size_bytes"] > 0
    ]


# --------------------------------------------------------------------------- text tables


@dataclass(frozen=True)
class _Layout:
    """Where each column of a data line is, read from the table's column header (or inferred)."""

    lead: dict[str, int]
    groups: tuple[dict[str, int], dict[str, int]]
    width: int


def _parse_text(text: str, source_name: str, world_size: int | None = None, op: str | None = None) -> NcclTestsResult:
    """Parse the text table of any generation."""
    lines = [(_LAUNCHER_PREFIX.sub("", line) if line[:1] in _PREFIX_STARTS else line).rstrip() for line in text.splitlines()]
    notes: list[str] = []
    header_at, layout = _find_header(lines, source_name, notes)
    measurements = _table_measurements(lines, header_at + 1, layout, source_name, notes)
    if not measurements:
        raise UserError(
            f"{source_name}: has an nccl-tests table header but no data rows; expected at least "
            "one result line after the header (the run failed or the output was cut off)"
        )
    devices = _devices(lines, source_name, notes)
    version = _first_match(_VERSION_LINE, lines, "version")
    starting = _first_match(_STARTING_LINE, lines, "binary")
    op = op or _resolve_op(source_name, starting, lines, measurements)
    ranks, world_source = _world_size(devices, lines, op, measurements, world_size, source_name, notes)
    return NcclTestsResult(
        op=op,
        world_size=ranks,
        generation=_text_generation(lines, layout, version, starting),
        version=version,
        devices=devices,
        reported_avg_busbw_gbps=_avg_busbw(lines[header_at + 1 :]),
        rows=_complete_rows(measurements, op, ranks),
        world_size_source=world_source,
        notes=tuple(notes),
    )


def _world_size(devices: list[dict[str, Any]], command_text: list[str], op: str, measurements: list[dict[str, Any]],
                flag: int | None, source_name: str, notes: list[str]) -> tuple[int | None, str]:
    """(rank count, ``world_size_source``): device lines, command line, busbw/algbw ratio, the flag, else unknown.

    A rank count the log tells and ``flag`` contradicts is a UserError; a ratio that contradicts
    the device lines or the command line is noted (the printed busbw is then flagged per row).
    """
    ranks = sorted({device["rank"] for device in devices if isinstance(device.get("rank"), int)})
    told: tuple[int, str, str] | None = None
    if ranks and ranks == list(range(len(ranks))):
        told = (len(ranks), "devices", "the '# Rank' device lines")
    elif ranks:
        notes.append(f"{source_name}: the device lines list ranks {ranks[0]}..{ranks[-1]} but not from 0 one by one "
                     "(the log starts mid-way); the rank count is read from elsewhere")
    if told is None and (command := ranks_from_command(command_text)) is not None:
        told = (command[0], "command_line", f"the command line {command[1][:120]!r}")
    ratio, why = ranks_from_ratio(op, measurements)
    if told is not None:
        if ratio is not None and ratio != told[0]:
            notes.append(f"{source_name}: {told[2]} give(s) {told[0]} ranks but busbw/algbw of the rows gives {ratio}; "
                         f"{told[0]} is used and busbw is recomputed for it")
    elif ratio is not None:
        told = (ratio, "busbw_ratio", why)
    if told is not None:
        if flag is not None and flag != told[0]:
            raise UserError(f"{source_name}: --world-size {flag} contradicts {told[2]}, which give(s) {told[0]} ranks; "
                            "expected the same rank count or no --world-size")
        if told[1] != "devices":
            notes.append(f"{source_name}: no complete '# Rank' device lines; {told[0]} ranks read from {told[2]}")
        return told[0], told[1]
    if flag is not None:
        notes.append(f"{source_name}: the log does not tell its rank count ({why}); {flag} ranks from --world-size")
        return flag, "flag"
    notes.append(f"{source_name}: the rank count is unknown (no device lines, no command line, {why}); rows are kept "
                 "with their printed busbw and world_size null; pass --world-size N to recompute busbw")
    return None, "unknown"


def _find_header(lines: list[str], source_name: str, notes: list[str]) -> tuple[int, _Layout]:
    """The index and layout of the one column header (``#  size  count  type ...``).

    Without a header (a table pasted alone) the layout is inferred from the first data row,
    with index -1 and a note.
    """
    headers = [(index, layout) for index, line in enumerate(lines) if (layout := _layout(line))]
    if len(headers) > 1:
        raise UserError(
            f"{source_name}: holds {len(headers)} nccl-tests tables; expected one run per file, "
            "so split it at each '#  size  count ...' header"
        )
    if headers:
        return headers[0]
    inferred = _inferred_layout(lines)
    if inferred is None:
        raise UserError(
            f"{source_name}: no nccl-tests table found; expected the output of an nccl-tests binary "
            "such as all_reduce_perf (a '#  size  count  type ... time  algbw  busbw' header and "
            "result lines) or its -J JSON file"
        )
    notes.append(f"{source_name}: no column header; columns read by position as "
                 + " ".join(sorted(inferred.lead, key=inferred.lead.__getitem__))
                 + " then time algbw busbw and a check column, out of place then in place")
    return -1, inferred


def _layout(line: str) -> _Layout | None:
    """The column layout if ``line`` is a table header with two placement groups, else None.

    nccl-tests prints the in-place group exactly like the out-of-place one, so the in-place
    columns are placed by shifting the out-of-place ones; this also reads data lines under a
    header that lost its last column (the generation-1 fixture's ends without ``error``).
    Generation-0 headers (no ``#``; ``bytes N type op ... res``) are read with today's names.
    """
    if "time" not in line:  # every header has a time (or cputime) column; skip the rest cheaply
        return None
    names = [_OLD_NAMES.get(name, name) for name in line.lstrip("#").split()]
    starts = [index for index, name in enumerate(names) if name in _TIME_COLUMNS]
    if names[:2] != ["size", "count"] or len(starts) != 2:
        return None
    lead = {name: index for index, name in enumerate(names[: starts[0]]) if name in _LEAD_COLUMNS}
    out_of_place = {
        _GROUP_COLUMNS[name]: index
        for index, name in enumerate(names[starts[0] : starts[1]], starts[0])
        if name in _GROUP_COLUMNS
    }
    if not {"size", "count", "type"} <= lead.keys() or not {"time", "algbw", "busbw"} <= out_of_place.keys():
        return None
    in_place = {field: index + starts[1] - starts[0] for field, index in out_of_place.items()}
    width = 1 + max(max(group.values()) for group in (lead, out_of_place, in_place))
    return _Layout(lead=lead, groups=(out_of_place, in_place), width=width)


def _row_like(tokens: list[str]) -> bool:
    """Whether a line's words look like a table row: integer size and count, then a known type name."""
    return len(tokens) >= 3 and bool(_INTEGER.match(tokens[0])) and bool(_INTEGER.match(tokens[1])) and tokens[2] in DTYPES


def _inferred_layout(lines: list[str]) -> _Layout | None:
    """The layout of a headerless table from its first row: size count type [redop] [root], then 2 x 4 columns."""
    for line in lines:
        tokens = line.split()
        if not _row_like(tokens) or len(tokens) not in (11, 12, 13):
            continue
        lead_names = ["size", "count", "type"]
        extra = len(tokens) - 11
        if extra == 2:
            lead_names += ["redop", "root"]
        elif extra == 1:
            lead_names.append("redop" if tokens[3] in _REDOPS else "root")
        start = len(lead_names)
        check = "wrong" if all(_INTEGER.match(t) or t == "N/A" for t in (tokens[start + 3], tokens[start + 7])) else "error"
        group = {"time": start, "algbw": start + 1, "busbw": start + 2, check: start + 3}
        return _Layout(lead={name: i for i, name in enumerate(lead_names)},
                       groups=(group, {k: v + 4 for k, v in group.items()}), width=len(tokens))
    return None


def _table_measurements(lines: list[str], first: int, layout: _Layout, source_name: str,
                        notes: list[str]) -> list[dict[str, Any]]:
    """Two measurements per data line from ``lines[first:]``; lines that are not rows are skipped."""
    measurements: list[dict[str, Any]] = []
    cut: list[int] = []
    empty: list[int] = []
    for number, line in enumerate(lines[first:], first + 1):
        if not _ROW_START.match(line):
            continue
        tokens = line.split()
        if not _row_like(tokens):
            continue
        where = f"{source_name}: line {number}"
        if len(tokens) < layout.width:
            cut.append(number)
            continue
        found = _line_measurements(tokens, layout, where)
        if found and found[0]["size_bytes"] == 0:
            empty.append(number)
        measurements.extend(found)
    if cut:
        notes.append(f"{source_name}: line(s) {_numbers(cut)} hold a row cut mid-way (fewer than the "
                     f"{layout.width} columns of the header); left out")
    if empty:
        notes.append(f"{source_name}: line(s) {_numbers(empty)} measure 0 bytes, which carry no bandwidth; "
                     "kept as printed but not among the rows to load")
    return measurements


def _numbers(numbers: list[int], most: int = 5) -> str:
    """``3, 7, 9 and 4 more``: line numbers short enough for one sentence."""
    shown = ", ".join(str(n) for n in numbers[:most])
    return shown if len(numbers) <= most else f"{shown} and {len(numbers) - most} more"


def _line_measurements(tokens: list[str], layout: _Layout, where: str) -> list[dict[str, Any]]:
    """The out-of-place and in-place measurements of one data row; a bad value is a UserError naming it."""
    common = _lead_fields(tokens, layout.lead, where)
    placements = [None if _group_absent(tokens, group) else _group_fields(tokens, group, mode, where)
                  for mode, group in zip(PLACEMENT_MODES, layout.groups, strict=True)]
    return [
        _measurement(common, mode, fields, where)
        for mode, fields in zip(PLACEMENT_MODES, placements, strict=True)
        if fields is not None
    ]


def _group_absent(tokens: list[str], group: dict[str, int]) -> bool:
    """Whether a placement group is printed as ``N/A`` throughout: that placement was not measured
    (``shardscope collectives report`` prints in-place-only ops this way)."""
    return all(tokens[group[field]] == "N/A" for field in ("time", "algbw", "busbw"))


def _lead_fields(tokens: list[str], lead: dict[str, int], where: str) -> dict[str, Any]:
    """Size, count, dtype, redop and root from the leading columns of a data line."""
    size = int(tokens[lead["size"]])
    if size < 0:
        raise UserError(f"{where}: size {size} B is negative; expected a message size of 0 or more bytes")
    root = tokens[lead["root"]] if "root" in lead else None
    if root is not None and not _INTEGER.match(root):
        raise UserError(f"{where}: the root column holds {root!r}; expected a rank number or -1")
    return {
        "size_bytes": size,
        "count": int(tokens[lead["count"]]),
        "dtype": _dtype(tokens[lead["type"]]),
        "redop": _redop(tokens[lead["redop"]]) if "redop" in lead else None,
        "root": _root(root) if root is not None else None,
    }


def _number(text: str, column: str, where: str) -> float:
    """A finite number from a table cell; anything else (``nan``, ``inf``, a word) is a UserError."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise UserError(f"{where}: the {column} column holds {text!r}; expected a finite number "
                        "(a value that is not one would change the results silently)")
    return value


def _group_fields(tokens: list[str], group: dict[str, int], mode: str, where: str) -> dict[str, Any]:
    """Time (us), bandwidths and check value of one placement group; a cell that is no number is a UserError."""
    label = mode.replace("_", "-")
    wrong = tokens[group["wrong"]] if "wrong" in group else None
    error = tokens[group["error"]] if "error" in group else None
    return {
        "time_us": _number(tokens[group["time"]], f"{label} time", where),
        "algbw_gbps": _number(tokens[group["algbw"]], f"{label} algbw", where),
        "busbw_gbps": _number(tokens[group["busbw"]], f"{label} busbw", where),
        "wrong": None if wrong in (None, "N/A") else int(_number(wrong, f"{label} #wrong", where)),
        "max_error": None if error in (None, "N/A") else _number(error.rstrip("*"), f"{label} error", where),
    }


def _devices(lines: list[str], source_name: str, notes: list[str]) -> list[dict[str, Any]]:
    """The ``#  Rank N ... device D [bus id] name`` lines as dicts, each rank once.

    A rank printed twice the same way (a log pasted twice) is counted once, with a note; a
    rank printed twice differently is a UserError.
    """
    devices: dict[int, dict[str, Any]] = {}
    repeated: list[int] = []
    for number, line in enumerate(lines, 1):
        if "Rank" in line and (match := _RANK_LINE.match(line)):
            device = {
                "rank": int(match["rank"]),
                "host": match["host"],
                "device": int(match["device"]),
                "bus_id": match["bus_id"],
                "name": match["name"],
            }
            seen = devices.get(device["rank"])
            if seen is None:
                devices[device["rank"]] = device
            elif seen == device:
                repeated.append(number)
            else:
                raise UserError(f"{source_name}: line {number}: rank {device['rank']} is listed again on "
                                f"{device['host']} device {device['device']} after {seen['host']} device "
                                f"{seen['device']}; expected one '# Rank' line per rank")
    if repeated:
        notes.append(f"{source_name}: line(s) {_numbers(repeated)} repeat '# Rank' lines already listed; each rank is counted once")
    return list(devices.values())


def _first_match(pattern: re.Pattern[str], lines: list[str], group: str) -> str | None:
    """The named group of the first line matching ``pattern`` (each starts with ``#``), or None."""
    for line in lines:
        if line[:1] == "#" and (match := pattern.match(line)):
            return match[group]
    return None


def _text_generation(lines: list[str], layout: _Layout, version: str | None, starting: str | None) -> Generation:
    """3 with version/test-starting lines or ``unalign``; else 2 with ``#wrong``; else 1."""
    if version or starting or any(line.startswith("# nThread") and "unalign:" in line for line in lines):
        return 3
    return 1 if any("error" in group for group in layout.groups) else 2


def _avg_busbw(lines: list[str]) -> float | None:
    """The ``# Avg bus bandwidth : X`` footer, or None when the output stops before it."""
    value = _first_match(_AVG_BUSBW_LINE, lines, "value")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


# --------------------------------------------------------------------------- JSON (-J)


def _parse_json(text: str, source_name: str, world_size: int | None = None, op: str | None = None) -> NcclTestsResult:
    """Parse the JSON file that ``-J FILE`` makes nccl-tests write."""
    try:
        document = loads_bounded(text, source_name)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{source_name}: is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            "expected a complete nccl-tests -J file (a run that was killed leaves it unfinished)"
        ) from None
    if not isinstance(document, dict) or not isinstance(document.get("results"), list):
        raise UserError(f"{source_name}: no nccl-tests results found; expected a JSON object with a 'results' list")
    notes: list[str] = []
    measurements: list[dict[str, Any]] = []
    empty: list[int] = []
    for index, entry in enumerate(document["results"]):
        found = _json_measurements(entry, f"{source_name}: results[{index}]")
        if found and found[0]["size_bytes"] == 0:
            empty.append(index)
        measurements.extend(found)
    if empty:
        notes.append(f"{source_name}: results[{', '.join(str(i) for i in empty[:5])}] measure 0 bytes, which carry "
                     "no bandwidth; kept as printed but not among the rows to load")
    if not measurements:
        raise UserError(f"{source_name}: has an empty 'results' list; expected at least one measured size")
    config = document.get("config") if isinstance(document.get("config"), dict) else {}
    where = "config.devices" if config.get("devices") else "devices"
    devices_raw = config.get("devices") or document.get("devices") or []
    devices = _json_devices(devices_raw if isinstance(devices_raw, list) else [], f"{source_name}: {where}")
    args = document.get("args") if isinstance(document.get("args"), list) else []
    command = " ".join(str(arg) for arg in args)
    op = op or _resolve_op(source_name, None, [command], measurements)
    ranks, world_source = _json_world_size(config, devices, command, op, measurements, world_size, source_name, notes)
    return NcclTestsResult(
        op=op,
        world_size=ranks,
        generation="json",
        version=None,
        devices=devices,
        reported_avg_busbw_gbps=_json_avg_busbw(document),
        rows=_complete_rows(measurements, op, ranks),
        world_size_source=world_source,
        notes=tuple(notes),
    )


def _json_world_size(config: dict[str, Any], devices: list[dict[str, Any]], command: str, op: str,
                     measurements: list[dict[str, Any]], flag: int | None, source_name: str,
                     notes: list[str]) -> tuple[int | None, str]:
    """Ranks in a -J file: nccl-tests lists one device per process (the first of its
    ``nthreads * ngpus`` ranks), so the device count is multiplied by both; without devices,
    the sources of :func:`_world_size` in order."""
    try:
        per_process = int(config.get("nthreads", 1)) * int(config.get("ngpus", 1))
    except (TypeError, ValueError):
        raise UserError(f"{source_name}: config.nthreads and config.ngpus must be whole numbers; "
                        "expected them as nccl-tests -J writes them") from None
    if devices and per_process >= 1:
        ranks = len(devices) * per_process
        ratio, _ = ranks_from_ratio(op, measurements)
        if ratio is not None and ratio != ranks:
            notes.append(f"{source_name}: config.devices gives {ranks} ranks but busbw/algbw of the rows gives {ratio}; "
                         f"{ranks} is used and busbw is recomputed for it")
        if flag is not None and flag != ranks:
            raise UserError(f"{source_name}: --world-size {flag} contradicts config.devices, which gives {ranks} ranks; "
                            "expected the same rank count or no --world-size")
        return ranks, "devices"
    # args is the binary's own argv: it never shows the launcher, so it cannot count processes
    return _world_size([], [], op, measurements, flag, source_name, notes)


def _json_devices(entries: list[Any], where: str) -> list[dict[str, Any]]:
    """``config.devices`` in the shape of the text reader's devices; a repeated entry is a UserError.

    A duplicated entry would count one process twice and make every recomputed busbw too high.
    """
    devices: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue
        device = _json_device(entry)
        key = json.dumps(device, sort_keys=True, default=str)
        if key in seen or (device["rank"] is not None and any(d["rank"] == device["rank"] for d in devices)):
            first = seen.get(key, next((i for i, d in enumerate(devices) if d["rank"] == device["rank"]), 0))
            raise UserError(f"{where}[{index}] repeats the process of {where}[{first}] (rank {device['rank']}, "
                            f"host {device['host']}, device {device['device']}); expected one entry per process")
        seen[key] = index
        devices.append(device)
    return devices


def _json_measurements(entry: Any, where: str) -> list[dict[str, Any]]:
    """The measurements of one ``results`` entry; a placement that is null is left out."""
    if not isinstance(entry, dict):
        raise UserError(f"{where}: expected an object with size, count, type and per-placement results")
    try:
        size = _json_number(entry["size"], f"{where}.size")
        if size < 0 or size != int(size):
            raise UserError(f"{where}.size: {entry['size']!r}; expected a whole number of bytes, 0 or more")
        common = {
            "size_bytes": int(size),
            "count": int(_json_number(entry["count"], f"{where}.count")),
            "dtype": _dtype(str(entry["type"])),
            "redop": _redop(str(entry["redop"])) if entry.get("redop") is not None else None,
            "root": _root(str(entry["root"])) if entry.get("root") is not None else None,
        }
        placements = {mode: _json_placement(entry[mode], f"{where}.{mode}") for mode in PLACEMENT_MODES if entry.get(mode)}
    except KeyError as exc:
        raise UserError(f"{where}: lacks the field {exc.args[0]}; expected nccl-tests -J result fields") from None
    except (TypeError, ValueError) as exc:
        raise UserError(f"{where}: has a malformed value ({exc}); expected numbers for size, count and times") from None
    return [_measurement(common, mode, fields, where) for mode, fields in placements.items()]


def _json_number(value: Any, where: str) -> float:
    """A finite JSON number (or numeric string); NaN, Infinity and anything else is a UserError naming ``where``."""
    if isinstance(value, bool):
        value = None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise UserError(f"{where}: {value!r}; expected a finite number")
    return number


def _json_placement(values: Any, where: str) -> dict[str, Any]:
    """One ``out_of_place``/``in_place`` object, accepting the spellings with and without ``_``."""
    if not isinstance(values, dict):
        raise UserError(f"{where}: expected an object with time, alg_bw and bus_bw")
    wrong = values.get("nwrong", values.get("wrong"))
    return {
        "time_us": _json_number(_pick(values, "time", "cpu_time"), f"{where}.time"),
        "algbw_gbps": _json_number(_pick(values, "alg_bw", "algbw"), f"{where}.alg_bw"),
        "busbw_gbps": _json_number(_pick(values, "bus_bw", "busbw"), f"{where}.bus_bw"),
        "wrong": None if wrong is None else int(_json_number(wrong, f"{where}.nwrong")),
        "max_error": None,
    }


def _pick(values: dict[str, Any], *keys: str) -> Any:
    """The value of the first of ``keys`` present in ``values``; KeyError naming them all if none."""
    for key in keys:
        if key in values:
            return values[key]
    raise KeyError(" or ".join(keys))


def _json_device(device: dict[str, Any]) -> dict[str, Any]:
    """A ``config.devices`` entry in the shape of the text reader's devices."""
    return {
        "rank": device.get("rank"),
        "host": device.get("hostname"),
        "device": device.get("device"),
        "bus_id": device.get("device_hex"),
        "name": device.get("device_info"),
    }


def _json_avg_busbw(document: dict[str, Any]) -> float | None:
    """``average_bus_bandwidth.bandwidth``, or None when absent (or not a finite number)."""
    average = document.get("average_bus_bandwidth")
    if isinstance(average, dict) and isinstance(average.get("bandwidth"), int | float):
        value = float(average["bandwidth"])
        return value if math.isfinite(value) else None
    return None


# --------------------------------------------------------------------------- shared


def _measurement(common: dict[str, Any], mode: str, fields: dict[str, Any], where: str) -> dict[str, Any]:
    """One row before op and world size are known: time converted from microseconds to seconds."""
    time_us = fields["time_us"]
    if not time_us > 0 and common["size_bytes"] > 0:
        raise UserError(f"{where}: size {common['size_bytes']} {mode} has time {time_us} us; expected a positive time")
    for field in ("algbw_gbps", "busbw_gbps"):
        if fields[field] < 0:
            raise UserError(f"{where}: size {common['size_bytes']} {mode} has {field.split('_')[0]} {fields[field]} GB/s; "
                            "expected a bandwidth of 0 or more")
    return {
        **common,
        "placement_mode": mode,
        "time_s": time_us / 1e6,
        "algbw_gbps": fields["algbw_gbps"],
        "busbw_gbps": fields["busbw_gbps"],
        "wrong": fields["wrong"],
        "max_error": fields["max_error"],
    }


def _complete_rows(measurements: list[dict[str, Any]], op: str, world_size: int | None) -> list[dict[str, Any]]:
    """Add op, world size and the bandwidth consistency check (None with no world size) to each measurement."""
    factor = busbw_factor(op, world_size) if world_size is not None else None
    return [
        {**row, "op": op, "world_size": world_size,
         "busbw_consistent": _consistent(row, factor) if factor is not None else None}
        for row in measurements
    ]


def _consistent(row: dict[str, Any], factor: float) -> bool:
    """Whether printed algbw and busbw match size/time and ``factor`` up to print rounding."""
    algbw = algbw_gbps(row["size_bytes"], row["time_s"])
    return _close(row["algbw_gbps"], algbw) and _close(row["busbw_gbps"], algbw * factor)


def _close(printed: float, computed: float) -> bool:
    """Equal within the relative or the absolute tolerance."""
    return math.isclose(printed, computed, rel_tol=RELATIVE_TOLERANCE, abs_tol=ABSOLUTE_TOLERANCE_GBPS)


def _resolve_op(
    source_name: str, starting: str | None, command_lines: Iterable[str], measurements: list[dict[str, Any]]
) -> str:
    """Our op name from, in order: the test-starting line, a ``*_perf`` command, the file name, the columns.

    A source counts only when it names exactly one op, so a log that mentions several
    binaries falls through to the next source instead of picking one at random.
    """
    for stems in ({_binary_stem(starting)} if starting else set(), _stems_mentioned(command_lines)):
        if len(stems) == 1:
            return _op_from_stem(stems.pop(), source_name)
    named = _ops_in_file_name(source_name)
    if len(named) == 1:
        return named.pop()
    from_columns = _op_from_columns(measurements)
    if from_columns:
        return from_columns
    raise UserError(
        f"{source_name}: cannot tell which collective was measured; expected a '# Collective test "
        "starting:' line, the *_perf command line, or the binary name in the file name "
        "(e.g. all_reduce_perf.log)"
    )



def _stems_mentioned(lines: Iterable[str]) -> set[str]:
    """The nccl-tests binary stems (``all_reduce`` for ``all_reduce_perf``) named in ``lines``."""
    return {match["stem"].lower() for line in lines if "_perf" in line for match in _BINARY_MENTION.finditer(line)}


def _ops_in_file_name(source_name: str) -> set[str]:
    """Our op names spelled in the file name (``alltoall-8x.txt``, ``all_reduce_perf.log``)."""
    found = _OP_IN_FILE_NAME.finditer(Path(source_name).name.lower())
    return {_FILE_NAME_OPS[match[1].replace("_", "").replace("-", "")] for match in found}


def _binary_stem(binary: str) -> str:
    """``/path/all_reduce_perf_mpi`` -> ``all_reduce``."""
    name = Path(binary).name.lower()
    match = _BINARY_MENTION.match(name)
    return match["stem"] if match else name


def _op_from_stem(stem: str, source_name: str) -> str:
    """Map an nccl-tests binary stem to our op; a test we do not model is a UserError."""
    if stem not in BINARY_OPS:
        raise UserError(
            f"{source_name}: is a {stem}_perf run; expected one of "
            f"{', '.join(name + '_perf' for name in BINARY_OPS)} (the collectives in {', '.join(OPS)})"
        )
    return BINARY_OPS[stem]


def _op_from_columns(measurements: list[dict[str, Any]]) -> str | None:
    """Only rooted ops tell themselves apart by their columns: broadcast has no redop, reduce has one."""
    rooted = [row for row in measurements if row["root"] is not None]
    if not rooted:
        return None
    return "broadcast" if all(row["redop"] is None for row in rooted) else "reduce"


def _dtype(name: str) -> str:
    """Our dtype name for an nccl-tests type name; unknown names pass through unchanged."""
    return DTYPES.get(name, name)


def _redop(name: str) -> str | None:
    """The reduction op, or None for ``none`` (ops without a reduction)."""
    return None if name == "none" else name


def _root(text: str) -> int | None:
    """The root rank, or None for -1 (nccl-tests' value for ops without a root)."""
    root = int(text.strip())
    return None if root < 0 else root
