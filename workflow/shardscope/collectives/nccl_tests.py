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
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from shardscope.collectives.factors import OPS, algbw_gbps, busbw_factor, busbw_gbps
from shardscope.errors import UserError

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
_RANK_LINE = re.compile(
    r"^#\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+(?P<host>\S+)"
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


@dataclass(frozen=True)
class NcclTestsResult:
    """One nccl-tests run read from a log or JSON file.

    ``rows`` holds one dict per (printed size, placement mode) with the keys ``size_bytes``,
    ``count``, ``dtype``, ``redop``, ``root``, ``placement_mode``, ``time_s``, ``algbw_gbps``
    and ``busbw_gbps`` (as printed), ``wrong`` (wrong elements, None when not reported),
    ``max_error`` (generation 1's max-error column, else None), ``op``, ``world_size`` and
    ``busbw_consistent`` (the printed bandwidths match size/time and the busbw factor).
    """

    op: str
    world_size: int
    generation: Generation
    version: str | None
    devices: list[dict[str, Any]]
    reported_avg_busbw_gbps: float | None
    rows: list[dict[str, Any]]

    def peak_busbw_gbps(self) -> float:
        """The highest printed bus bandwidth over all rows, the figure people quote for a run."""
        return max(row["busbw_gbps"] for row in self.rows)


def read_nccl_tests(path: str | Path) -> NcclTestsResult:
    """Read an nccl-tests log or ``-J`` JSON file at ``path``; a missing file is a UserError."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory; expected an nccl-tests output file") from None
    return parse_nccl_tests(text, str(path))


def parse_nccl_tests(text: str, source_name: str) -> NcclTestsResult:
    """Parse nccl-tests output of any generation, or its JSON, naming ``source_name`` in errors."""
    if text.lstrip().startswith("{"):
        return _parse_json(text, source_name)
    return _parse_text(text, source_name)


def to_rows_for_db(result: NcclTestsResult, source_name: str) -> list[dict[str, Any]]:
    """Shape ``result`` as rows of our collectives table.

    Bandwidths are derived from size and time with :mod:`shardscope.collectives.factors`, as
    for our own measurements, so both sources are computed the same way; the printed values
    stay in ``result.rows``.
    """
    return [
        {
            "op": result.op,
            "world_size": result.world_size,
            "dtype": row["dtype"],
            "size_bytes": row["size_bytes"],
            "time_s": row["time_s"],
            "algbw_gbps": algbw_gbps(row["size_bytes"], row["time_s"]),
            "busbw_gbps": busbw_gbps(result.op, result.world_size, row["size_bytes"], row["time_s"]),
            "in_place": row["placement_mode"] == "in_place",
            "source": "nccl-tests",
            "source_file": source_name,
        }
        for row in result.rows
    ]


# --------------------------------------------------------------------------- text tables


@dataclass(frozen=True)
class _Layout:
    """Where each column of a data line is, read from the table's column header."""

    lead: dict[str, int]
    groups: tuple[dict[str, int], dict[str, int]]
    width: int


def _parse_text(text: str, source_name: str) -> NcclTestsResult:
    """Parse the text table of any generation."""
    lines = [_LAUNCHER_PREFIX.sub("", line).rstrip() for line in text.splitlines()]
    header_at, layout = _find_header(lines, source_name)
    measurements = _table_measurements(lines[header_at + 1 :], layout, source_name)
    if not measurements:
        raise UserError(
            f"{source_name}: has an nccl-tests table header but no data rows; expected at least "
            "one result line after the header (the run failed or the output was cut off)"
        )
    devices = _devices(lines)
    if not devices:
        raise UserError(
            f"{source_name}: has no '#  Rank N ... device ...' lines; expected the '# Using devices' "
            "section nccl-tests prints before its table, which gives the number of ranks"
        )
    world_size = len({device["rank"] for device in devices})
    version = _first_match(_VERSION_LINE, lines, "version")
    starting = _first_match(_STARTING_LINE, lines, "binary")
    op = _resolve_op(source_name, starting, lines, measurements)
    return NcclTestsResult(
        op=op,
        world_size=world_size,
        generation=_text_generation(lines, layout, version, starting),
        version=version,
        devices=devices,
        reported_avg_busbw_gbps=_avg_busbw(lines[header_at + 1 :]),
        rows=_complete_rows(measurements, op, world_size),
    )


def _find_header(lines: list[str], source_name: str) -> tuple[int, _Layout]:
    """The index and layout of the one column header (``#  size  count  type ...``)."""
    headers = [(index, layout) for index, line in enumerate(lines) if (layout := _layout(line))]
    if not headers:
        raise UserError(
            f"{source_name}: no nccl-tests table found; expected the output of an nccl-tests binary "
            "such as all_reduce_perf (a '#  size  count  type ... time  algbw  busbw' header and "
            "result lines) or its -J JSON file"
        )
    if len(headers) > 1:
        raise UserError(
            f"{source_name}: holds {len(headers)} nccl-tests tables; expected one run per file, "
            "so split it at each '#  size  count ...' header"
        )
    return headers[0]


def _layout(line: str) -> _Layout | None:
    """The column layout if ``line`` is a table header with two placement groups, else None.

    nccl-tests prints the in-place group exactly like the out-of-place one, so the in-place
    columns are placed by shifting the out-of-place ones; this also reads data lines under a
    header that lost its last column (the generation-1 fixture's ends without ``error``).
    """
    if not line.startswith("#"):
        return None
    names = line.lstrip("#").split()
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


def _table_measurements(lines: list[str], layout: _Layout, source_name: str) -> list[dict[str, Any]]:
    """Two measurements per data line after the header; every other line is skipped."""
    measurements = []
    for line in lines:
        measurements.extend(_line_measurements(line, layout, source_name))
    return measurements


def _line_measurements(line: str, layout: _Layout, source_name: str) -> list[dict[str, Any]]:
    """The out-of-place and in-place measurements of one data line, or [] for any other line."""
    tokens = line.split()
    if len(tokens) < layout.width or not tokens[0].isdigit() or not tokens[1].isdigit():
        return []
    try:
        common = _lead_fields(tokens, layout.lead)
        placements = [None if _group_absent(tokens, group) else _group_fields(tokens, group) for group in layout.groups]
    except ValueError:
        return []
    return [
        _measurement(common, mode, fields, source_name)
        for mode, fields in zip(PLACEMENT_MODES, placements, strict=True)
        if fields is not None
    ]


def _group_absent(tokens: list[str], group: dict[str, int]) -> bool:
    """Whether a placement group is printed as ``N/A`` throughout: that placement was not measured
    (``shardscope collectives report`` prints in-place-only ops this way)."""
    return all(tokens[group[field]] == "N/A" for field in ("time", "algbw", "busbw"))


def _lead_fields(tokens: list[str], lead: dict[str, int]) -> dict[str, Any]:
    """Size, count, dtype, redop and root from the leading columns of a data line."""
    return {
        "size_bytes": int(tokens[lead["size"]]),
        "count": int(tokens[lead["count"]]),
        "dtype": _dtype(tokens[lead["type"]]),
        "redop": _redop(tokens[lead["redop"]]) if "redop" in lead else None,
        "root": _root(tokens[lead["root"]]) if "root" in lead else None,
    }


def _group_fields(tokens: list[str], group: dict[str, int]) -> dict[str, Any]:
    """Time (us), bandwidths and check value of one placement group; ValueError if not numbers."""
    return {
        "time_us": float(tokens[group["time"]]),
        "algbw_gbps": float(tokens[group["algbw"]]),
        "busbw_gbps": float(tokens[group["busbw"]]),
        "wrong": _wrong(tokens[group["wrong"]]) if "wrong" in group else None,
        "max_error": _max_error(tokens[group["error"]]) if "error" in group else None,
    }


def _devices(lines: list[str]) -> list[dict[str, Any]]:
    """The ``#  Rank N ... device D [bus id] name`` lines as dicts."""
    devices = []
    for line in lines:
        if match := _RANK_LINE.match(line):
            devices.append(
                {
                    "rank": int(match["rank"]),
                    "host": match["host"],
                    "device": int(match["device"]),
                    "bus_id": match["bus_id"],
                    "name": match["name"],
                }
            )
    return devices


def _first_match(pattern: re.Pattern[str], lines: list[str], group: str) -> str | None:
    """The named group of the first line matching ``pattern``, or None."""
    for line in lines:
        if match := pattern.match(line):
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


def _parse_json(text: str, source_name: str) -> NcclTestsResult:
    """Parse the JSON file that ``-J FILE`` makes nccl-tests write."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{source_name}: is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            "expected a complete nccl-tests -J file (a run that was killed leaves it unfinished)"
        ) from None
    if not isinstance(document, dict) or not isinstance(document.get("results"), list):
        raise UserError(f"{source_name}: no nccl-tests results found; expected a JSON object with a 'results' list")
    measurements = [
        measurement
        for index, entry in enumerate(document["results"])
        for measurement in _json_measurements(entry, f"{source_name}: results[{index}]")
    ]
    if not measurements:
        raise UserError(f"{source_name}: has an empty 'results' list; expected at least one measured size")
    config = document.get("config") if isinstance(document.get("config"), dict) else {}
    devices_raw = config.get("devices") or document.get("devices") or []
    devices = [_json_device(device) for device in devices_raw if isinstance(device, dict)]
    world_size = _json_world_size(config, len(devices), source_name)
    args = document.get("args") if isinstance(document.get("args"), list) else []
    op = _resolve_op(source_name, None, [" ".join(str(arg) for arg in args)], measurements)
    return NcclTestsResult(
        op=op,
        world_size=world_size,
        generation="json",
        version=None,
        devices=devices,
        reported_avg_busbw_gbps=_json_avg_busbw(document),
        rows=_complete_rows(measurements, op, world_size),
    )


def _json_world_size(config: dict[str, Any], n_devices: int, source_name: str) -> int:
    """Ranks in a -J file: nccl-tests lists one device per process (the first of its
    ``nthreads * ngpus`` ranks), so the device count is multiplied by both."""
    try:
        world_size = n_devices * int(config.get("nthreads", 1)) * int(config.get("ngpus", 1))
    except (TypeError, ValueError):
        world_size = 0
    if world_size < 1:
        raise UserError(
            f"{source_name}: gives no number of ranks; expected config.devices with config.nthreads "
            "and config.ngpus as nccl-tests -J writes them"
        )
    return world_size


def _json_measurements(entry: Any, where: str) -> list[dict[str, Any]]:
    """The measurements of one ``results`` entry; a placement that is null is left out."""
    if not isinstance(entry, dict):
        raise UserError(f"{where}: expected an object with size, count, type and per-placement results")
    try:
        common = {
            "size_bytes": int(entry["size"]),
            "count": int(entry["count"]),
            "dtype": _dtype(str(entry["type"])),
            "redop": _redop(str(entry["redop"])) if entry.get("redop") is not None else None,
            "root": _root(str(entry["root"])) if entry.get("root") is not None else None,
        }
        placements = {mode: _json_placement(entry[mode]) for mode in PLACEMENT_MODES if entry.get(mode)}
    except KeyError as exc:
        raise UserError(f"{where}: lacks the field {exc.args[0]}; expected nccl-tests -J result fields") from None
    except (TypeError, ValueError) as exc:
        raise UserError(f"{where}: has a malformed value ({exc}); expected numbers for size, count and times") from None
    return [_measurement(common, mode, fields, where) for mode, fields in placements.items()]


def _json_placement(values: dict[str, Any]) -> dict[str, Any]:
    """One ``out_of_place``/``in_place`` object, accepting the spellings with and without ``_``."""
    wrong = values.get("nwrong", values.get("wrong"))
    return {
        "time_us": float(_pick(values, "time", "cpu_time")),
        "algbw_gbps": float(_pick(values, "alg_bw", "algbw")),
        "busbw_gbps": float(_pick(values, "bus_bw", "busbw")),
        "wrong": None if wrong is None else int(float(wrong)),
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
    """``average_bus_bandwidth.bandwidth``, or None when absent."""
    average = document.get("average_bus_bandwidth")
    if isinstance(average, dict) and isinstance(average.get("bandwidth"), int | float):
        return float(average["bandwidth"])
    return None


# --------------------------------------------------------------------------- shared


def _measurement(common: dict[str, Any], mode: str, fields: dict[str, Any], where: str) -> dict[str, Any]:
    """One row before op and world size are known: time converted from microseconds to seconds."""
    time_us = fields["time_us"]
    if not time_us > 0:
        raise UserError(f"{where}: size {common['size_bytes']} {mode} has time {time_us} us; expected a positive time")
    return {
        **common,
        "placement_mode": mode,
        "time_s": time_us / 1e6,
        "algbw_gbps": fields["algbw_gbps"],
        "busbw_gbps": fields["busbw_gbps"],
        "wrong": fields["wrong"],
        "max_error": fields["max_error"],
    }


def _complete_rows(measurements: list[dict[str, Any]], op: str, world_size: int) -> list[dict[str, Any]]:
    """Add op, world size and the bandwidth consistency check to each measurement."""
    factor = busbw_factor(op, world_size)
    return [
        {**row, "op": op, "world_size": world_size, "busbw_consistent": _consistent(row, factor)}
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
    return {match["stem"].lower() for line in lines for match in _BINARY_MENTION.finditer(line)}


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


def _wrong(text: str) -> int | None:
    """The ``#wrong`` count (printed with ``%g``, so possibly ``1e+06``), or None for ``N/A``."""
    return None if text == "N/A" else int(float(text))


def _max_error(text: str) -> float | None:
    """Generation 1's max-error value (``2e-07``, ``*`` appended on failure), or None for ``N/A``."""
    return None if text == "N/A" else float(text.rstrip("*"))
