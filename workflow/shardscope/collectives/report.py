"""Our own collective results printed as an nccl-tests table, to paste next to nccl-tests output.

``shardscope collectives report FILE...`` prints, per job file, the lines nccl-tests prints:
a parameter line, the ``# Using devices`` rank lines, the two-group column header
(out-of-place, in-place), one line per message size with time in microseconds and algbw /
busbw in GB/s (1e9 B/s) in nccl-tests' number formats, and the ``# Avg bus bandwidth``
footer (the mean of every printed busbw, as nccl-tests computes it). A placement we did
not measure prints ``N/A`` in each of its columns. The output reads back with
``shardscope collectives import``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from shardscope.collectives.nccl_tests import BINARY_OPS
from shardscope.errors import UserError
from shardscope.fileio import read_json

#: Our dtype names -> the type names nccl-tests prints (and accepts with ``-d``).
NCCL_TESTS_TYPES: dict[str, str] = {
    "float32": "float",
    "float16": "half",
    "bfloat16": "bfloat16",
    "float64": "double",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
}
#: Our op name -> the nccl-tests binary that measures it.
BINARIES: dict[str, str] = {op: f"{stem}_perf" for stem, op in BINARY_OPS.items()}
_REDOP = {"all_reduce": "sum", "reduce_scatter": "sum", "reduce": "sum"}
_ROOT = {"broadcast": 0, "reduce": 0}

HEADER = (
    "#                                                              out-of-place                       in-place\n"
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)"
)


def read_job_document(path: str) -> dict[str, Any]:
    """Read one collective job file written by the worker; anything else is a UserError."""
    doc = read_json(path)
    if not isinstance(doc, dict) or doc.get("kind") != "collectives":
        raise UserError(f"{path}: not a collective job result; expected a JSON file written by "
                        "`torchrun -m shardscope.collectives` (kind 'collectives')")
    if not isinstance(doc.get("rows"), list) or not doc["rows"] or not isinstance(doc.get("job"), dict):
        raise UserError(f"{path}: has no measured rows; expected 'job' and a non-empty 'rows' list")
    for index, row in enumerate(doc["rows"]):
        missing = [k for k in ("size_bytes", "count", "dtype", "time_s", "algbw_gbps", "busbw_gbps", "in_place")
                   if not isinstance(row, dict) or k not in row]
        if missing:
            raise UserError(f"{path}: rows[{index}] lacks {', '.join(missing)}; expected the worker's row fields")
    return doc


def format_time_us(time_us: float) -> str:
    """A time in microseconds the way nccl-tests prints it: 0, 1 or 2 decimals by magnitude."""
    if time_us >= 10000.0:
        return f"{time_us:7.0f}"
    if time_us >= 100.0:
        return f"{time_us:7.1f}"
    return f"{time_us:7.2f}"


def _comm(env: dict[str, Any]) -> str:
    """``NCCL 2.21.5 on nccl, torch 2.6.0``; the backend and torch only where the library's name does not say them already."""
    library, backend, torch = (str(env.get(k)) for k in ("comm_library", "backend", "torch"))
    text = library if library.lower().startswith(backend.lower()) and backend != "None" else f"{library} on {backend}"
    return text if torch in library else f"{text}, torch {torch}"


def format_report(doc: dict[str, Any], source: str) -> str:
    """The nccl-tests-shaped table of one collective job document (text ending in a newline)."""
    job, env, rows = doc["job"], doc.get("env") or {}, doc["rows"]
    op = job.get("op") or rows[0]["op"]
    world_size = int(job.get("world_size") or rows[0]["world_size"])
    lines = [
        (f"# shardscope collectives report: job {job.get('job_id')}: {op} measured with torch.distributed "
         f"(nccl-tests equivalent: {BINARIES.get(op, op)}), {world_size} ranks"),
        (f"# comm {_comm(env)}, "
         f"timing {env.get('timing', 'unknown')}, placement {job.get('placement')}, transport {job.get('transport')}, "
         f"measured {env.get('measured_at')}; from {source}"),
        (f"# nThread 1 nGpus 1 minBytes {job.get('min_bytes')} maxBytes {job.get('max_bytes')} "
         f"step: {job.get('factor')}(factor) warmup iters: {job.get('warmup')} iters: {job.get('iters')} "
         f"agg iters: 1 validation: {1 if _validated(job, rows) else 0} graph: 0"),
        "#",
        "# Using devices",
        *_rank_lines(env, world_size),
        "#",
        HEADER,
    ]
    busbws: list[float] = []
    failed: list[int] = []
    for size_bytes, count, dtype, by_mode in _grouped(rows):
        lead = f"{size_bytes:12d}  {count:12d}  {NCCL_TESTS_TYPES.get(dtype, dtype):>8s}  {_REDOP.get(op, 'none'):>6s}  {_ROOT.get(op, -1):6d}"
        groups = []
        for mode in (False, True):  # out-of-place, then in-place, as nccl-tests prints them
            row = by_mode.get(mode)
            if row is None:
                groups.append(f"  {'N/A':>7s}  {'N/A':>6s}  {'N/A':>6s}  {'N/A':>6s}")
                continue
            busbws.append(float(row["busbw_gbps"]))
            if row.get("check_ok") is False:
                failed.append(size_bytes)
            groups.append(f"  {format_time_us(row['time_s'] * 1e6)}  {row['algbw_gbps']:6.2f}  {row['busbw_gbps']:6.2f}"
                          f"  {_wrong(row):>6s}")
        lines.append(lead + "".join(groups))
    if failed:
        lines.append(f"# Data check FAILED at sizes (B): {', '.join(str(s) for s in failed)}")
    lines.append(f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):g} ")
    lines.append("#")
    return "\n".join(lines) + "\n"


def report(paths: Iterable[str]) -> str:
    """The tables of several job files, one after the other, separated by a blank line."""
    return "\n".join(format_report(read_job_document(path), path) for path in paths)


def _grouped(rows: list[dict[str, Any]]) -> list[tuple[int, int, str, dict[bool, dict[str, Any]]]]:
    """Rows grouped per printed line (size, count, dtype), keyed by in-place, in first-seen order."""
    lines: dict[tuple[int, int, str], dict[bool, dict[str, Any]]] = {}
    for row in rows:
        key = (int(row["size_bytes"]), int(row["count"]), str(row["dtype"]))
        lines.setdefault(key, {})[bool(row["in_place"])] = row
    return [(size, count, dtype, by_mode) for (size, count, dtype), by_mode in lines.items()]


def _validated(job: dict[str, Any], rows: list[dict[str, Any]]) -> bool:
    """Whether results were checked (the job's --check, or any row carrying a check)."""
    return bool(job.get("check")) or any(row.get("check_ok") is not None for row in rows)


def _wrong(row: dict[str, Any]) -> str:
    """The ``#wrong`` column: wrong elements summed over ranks, ``N/A`` when not checked."""
    if row.get("wrong") is not None:
        return f"{int(row['wrong']):g}"
    if row.get("check_ok") is True:
        return "0"
    return "N/A"


def _rank_lines(env: dict[str, Any], world_size: int) -> list[str]:
    """``#  Rank r Group 0 on HOST device d [bus id] NAME`` for every rank, as nccl-tests lists them.

    Ranks are placed as :func:`shardscope.device.init_distributed` places them: local rank
    modulo the visible devices; no process ids are recorded, so none are printed.
    """
    host = env.get("host") or "unknown"
    names = list(env.get("devices") or ["unknown"])
    bus_ids = env.get("device_pci_bus_ids") or []
    local = int(env.get("local_world_size") or world_size)
    cuda = env.get("device_type") == "cuda"
    lines = []
    for rank in range(world_size):
        device = (rank % local) % len(names) if cuda else 0
        bus = bus_ids[device] if cuda and device < len(bus_ids) else env.get("device_type") or "?"
        lines.append(f"#  Rank {rank:2d} Group  0 on {host:>10s} device {device:2d} [{bus}] {names[device]}")
    return lines
