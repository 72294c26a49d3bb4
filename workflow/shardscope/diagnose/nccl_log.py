"""What NCCL actually did, read from its own log (``NCCL_DEBUG=INFO``, ``NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV,TUNING``).

Lines are matched wherever they appear, so launcher prefixes (``[0] ``, ``[1,0]<stdout>:``),
timestamps and the ``host:pid:tid [dev] NCCL INFO`` header of every NCCL generation are
tolerated. What is read:

- the NCCL version (``NCCL version 2.21.5+cuda12.4``);
- every connection ``Channel 00/0 : 0[0] -> 1[1] via P2P/IPC`` (and the older ``Channel 00 :``
  and ``Ring 00 :`` forms, with or without bus ids and ``[send]/[receive]``), classified into
  :data:`TRANSPORTS`: ``P2P/IPC``, ``P2P/CUMEM``, ``P2P/direct`` (one process driving several
  GPUs), ``SHM`` (through host memory), ``NET/IB`` (any IB/RoCE plugin), ``NET/Socket``,
  ``NET/other``, ``COLLNET``; with ``/read`` and ``GDRDMA`` flags;
- channel counts (``4 coll channels, 4 collnet channels, 0 nvls channels, 4 p2p channels``),
  and the highest channel index seen;
- NVLS: availability (``NVLS multicast support is [not] available on dev N``) and use
  (``NVLS comm 0x..``, ``NVLS Head``, a non-zero ``nvls channels``);
- ``NCCL_*`` variables NCCL reports (``NCCL_P2P_LEVEL set by environment to LOC``);
- the network (``Using network IB``), GRAPH search results (``Pattern 4, ..., type NVL/PIX``),
  ``P2P is disabled between connected GPUs``, and GPUDirect RDMA (``/GDRDMA`` on network
  connections; ``gdr_rdma`` is None when the log shows no network connection);
- TUNING choices (``1026048 Bytes -> Algo 1 proto 2 time 34.69``) with NCCL's algorithm and
  protocol numbering (``include/nccl_common.h``), and the names in newer logs.

How the collectives worker should capture it (for the collectives owner): run each job with
``NCCL_DEBUG=INFO``, ``NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV,TUNING`` and
``NCCL_DEBUG_FILE=<results>/<job_id>.nccl.%h.%p.log`` (NCCL expands ``%h`` to the host and
``%p`` to the pid, one file per rank), then store ``summarize_files(paths).to_dict()`` under
``nccl_log`` in the job document (and the file names under ``nccl_log_files``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shardscope.errors import UserError

TRANSPORTS = ("P2P/IPC", "P2P/CUMEM", "P2P/direct", "SHM", "NET/IB", "NET/Socket", "NET/other", "COLLNET")
#: NCCL's algorithm and protocol indices (include/nccl_common.h, NCCL 2.19+).
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")

_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+[^\s]*)")
_CONNECTION = re.compile(
    r"\b(?:Channel|Ring) (?P<channel>\d+)(?:/\d+)? : (?P<src>\d+)(?:\[(?P<src_bus>[0-9a-fA-Fx]+)\])? -> "
    r"(?P<dst>\d+)(?:\[(?P<dst_bus>[0-9a-fA-Fx]+)\])?(?: \[(?P<dir>send|receive)\])? via (?P<via>.+?)\s*(?:comm 0x[0-9a-f]+.*)?$"
)
_CHANNEL_RING = re.compile(r"\bChannel (\d+)/(\d+) :(?:\s+\d+)+\s*$")
_CHANNEL_COUNTS = re.compile(
    r"(?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?(?:(?P<nvls>\d+) nvls channels, )?"
    r"(?P<p2p>\d+) p2p channels, (?P<per_peer>\d+) p2p channels per peer"
)
_NVLS_SUPPORT = re.compile(r"NVLS multicast support is (?P<not>not )?available on (?:dev|domain) (?P<dev>\d+)")
_NVLS_USED = re.compile(r"NVLS comm 0x|NVLS Head\s+\d+:|NVLS multicast is available on this communicator")
_ENV = re.compile(r"\b(?P<name>NCCL_[A-Z0-9_]+) set (?:by environment )?to (?P<value>\S+?)\.?\s*$")
_NETWORK = re.compile(r"Using network (?P<net>.+?)\s*$")
_PATTERN = re.compile(r"Pattern (?P<pattern>\d+), crossNic \d+, nChannels (?P<n>\d+), (?:bw|speed) (?P<bw>[\d.]+)/"
                      r"(?P<bw_inter>[\d.]+), type (?P<intra>\w+)/(?P<inter>\w+)")
_P2P_DISABLED = re.compile(r"P2P is disabled between (?:NVLINK )?connected GPUs (\d+) and (\d+)")
_TUNING_NUM = re.compile(r"(?P<bytes>\d+) Bytes -> Algo (?P<algo>\d+) proto (?P<proto>\d+) time (?P<time>[\d.]+)")
_TUNING_NAME = re.compile(r"(?P<bytes>\d+) Bytes -> Algo (?P<algo>[A-Za-z_]+) proto (?P<proto>[A-Za-z0-9_]+)")
_COMM = re.compile(r"\bnRanks (?P<ranks>\d+) nNodes (?P<nodes>\d+) localRanks (?P<local>\d+)")
_WARN = re.compile(r"NCCL WARN (?P<msg>.*)$")


def classify_transport(via: str) -> tuple[str, bool, bool]:
    """(transport class of :data:`TRANSPORTS`, uses P2P read, uses GPUDirect RDMA) of a ``via ...`` text."""
    text = via.strip()
    read = text.endswith("/read") or "/read" in text
    gdr = "GDRDMA" in text
    if text.startswith("P2P/IPC"):
        return "P2P/IPC", read, gdr
    if text.startswith("P2P/CUMEM"):
        return "P2P/CUMEM", read, gdr
    if text.startswith(("P2P/direct", "P2P")):
        return "P2P/direct", read, gdr
    if text.startswith("SHM") or "shared memory" in text:
        return "SHM", read, gdr
    if text.startswith("NET/Socket"):
        return "NET/Socket", read, gdr
    if re.match(r"NET/(IB|IBext|IBV|OFI)", text) or "RoCE" in text:
        return "NET/IB", read, gdr
    if text.startswith("NET"):
        return "NET/other", read, gdr
    if text.startswith("COLLNET"):
        return "COLLNET", read, gdr
    return "NET/other", read, gdr


@dataclass
class NcclLogSummary:
    """Everything :func:`parse_nccl_log` read (see the module docstring); ``to_dict`` is the stored form."""

    version: str | None = None
    transports: dict[str, int] = field(default_factory=dict)
    connections: int = 0
    p2p_read: bool = False
    gdr_rdma: bool | None = None
    pairs: list[dict[str, Any]] = field(default_factory=list)
    channels: dict[str, int] = field(default_factory=dict)
    nvls_available: bool | None = None
    nvls_devices: list[int] = field(default_factory=list)
    nvls_used: bool = False
    env: dict[str, str] = field(default_factory=dict)
    network: str | None = None
    graph_types: list[str] = field(default_factory=list)
    p2p_disabled_pairs: list[list[int]] = field(default_factory=list)
    algorithms: dict[str, int] = field(default_factory=dict)
    protocols: dict[str, int] = field(default_factory=dict)
    ranks: int | None = None
    nodes: int | None = None
    warnings: list[str] = field(default_factory=list)
    lines_read: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types: the ``nccl_log`` entry of a job document and the ``--json`` of ``nccl-log``."""
        return asdict(self)


def _add_pair(pairs: dict[tuple[int, int, str], dict[str, Any]], src: int, dst: int, transport: str) -> None:
    key = (src, dst, transport)
    if key not in pairs:
        pairs[key] = {"from_rank": src, "to_rank": dst, "transport": transport, "channels": 0}
    pairs[key]["channels"] += 1


def parse_nccl_log(text: str | Iterable[str]) -> NcclLogSummary:
    """Read an ``NCCL_DEBUG=INFO`` log (one rank's file, or many ranks interleaved): its text, or its lines
    (any iterable, so a file can be streamed)."""
    out = NcclLogSummary()
    transports: Counter[str] = Counter()
    algos: Counter[str] = Counter()
    protos: Counter[str] = Counter()
    pairs: dict[tuple[int, int, str], dict[str, Any]] = {}
    graph: set[str] = set()
    nvls_yes: set[int] = set()
    nvls_no: set[int] = set()
    disabled: set[tuple[int, int]] = set()
    gdr_values: set[int] = set()
    max_channel = -1
    counts: dict[str, int] = {}
    for raw in text.splitlines() if isinstance(text, str) else text:
        line = raw.rstrip()
        if "NCCL" not in line and " via " not in line and "NVLS" not in line and "Bytes -> Algo" not in line:
            continue
        out.lines_read += 1
        # literal tests before each regex: a huge log is mostly these lines, and a regex per line costs seconds
        if out.version is None and "NCCL version" in line and (m := _VERSION.search(line)):
            out.version = m[1]
        if " via " in line and (m := _CONNECTION.search(line)):
            kind, read, gdr = classify_transport(m["via"])
            transports[kind] += 1
            out.p2p_read |= read and kind.startswith("P2P")
            if kind.startswith("NET"):
                gdr_values.add(int(gdr))
            max_channel = max(max_channel, int(m["channel"]))
            _add_pair(pairs, int(m["src"]), int(m["dst"]), kind)
            continue
        if m := _CHANNEL_RING.search(line):
            counts["ring_channels"] = max(counts.get("ring_channels", 0), int(m[2]))
            continue
        if m := _CHANNEL_COUNTS.search(line):
            for name in ("coll", "collnet", "nvls", "p2p", "per_peer"):
                if m[name] is not None:
                    counts[name] = max(counts.get(name, 0), int(m[name]))
            continue
        if m := _NVLS_SUPPORT.search(line):
            (nvls_no if m["not"] else nvls_yes).add(int(m["dev"]))
            continue
        if _NVLS_USED.search(line):
            out.nvls_used = True
            continue
        if m := _ENV.search(line):
            out.env[m["name"]] = m["value"]
            continue
        if m := _NETWORK.search(line):
            out.network = m["net"]
            continue
        if m := _PATTERN.search(line):
            graph.add(f"{m['intra']}/{m['inter']}")
            continue
        if m := _P2P_DISABLED.search(line):
            disabled.add(tuple(sorted((int(m[1]), int(m[2])))))  # type: ignore[arg-type]
            continue
        if m := _TUNING_NUM.search(line):
            a, p = int(m["algo"]), int(m["proto"])
            algos[ALGORITHMS[a] if a < len(ALGORITHMS) else f"algo{a}"] += 1
            protos[PROTOCOLS[p] if p < len(PROTOCOLS) else f"proto{p}"] += 1
            continue
        if m := _TUNING_NAME.search(line):
            algos[m["algo"]] += 1
            protos[m["proto"]] += 1
            continue
        if m := _COMM.search(line):
            out.ranks, out.nodes = int(m["ranks"]), int(m["nodes"])
            continue
        if m := _WARN.search(line):
            out.warnings.append(m["msg"].strip())
    out.transports = dict(sorted(transports.items()))
    out.connections = sum(transports.values())
    out.pairs = sorted(pairs.values(), key=lambda p: (p["from_rank"], p["to_rank"], p["transport"]))
    if max_channel >= 0:
        counts["max_channel_index"] = max_channel
    out.channels = counts
    if counts.get("nvls", 0) > 0:
        out.nvls_used = True
    out.nvls_available = True if nvls_yes else (False if nvls_no else None)
    out.nvls_devices = sorted(nvls_yes)
    out.graph_types = sorted(graph)
    out.p2p_disabled_pairs = [list(p) for p in sorted(disabled)]
    out.algorithms = dict(sorted(algos.items()))
    out.protocols = dict(sorted(protos.items()))
    out.gdr_rdma = (1 in gdr_values) if gdr_values else None
    return out


def merge(summaries: Iterable[NcclLogSummary]) -> NcclLogSummary:
    """One summary of several ranks' files (counts added, flags combined)."""
    items = list(summaries)
    if not items:
        raise ValueError("nothing to merge")
    out = NcclLogSummary()
    for s in items:
        out.version = out.version or s.version
        out.connections += s.connections
        out.lines_read += s.lines_read
        for key, value in s.transports.items():
            out.transports[key] = out.transports.get(key, 0) + value
        for key, value in s.algorithms.items():
            out.algorithms[key] = out.algorithms.get(key, 0) + value
        for key, value in s.protocols.items():
            out.protocols[key] = out.protocols.get(key, 0) + value
        for key, value in s.channels.items():
            out.channels[key] = max(out.channels.get(key, 0), value)
        out.p2p_read |= s.p2p_read
        out.nvls_used |= s.nvls_used
        out.env.update(s.env)
        out.network = out.network or s.network
        out.pairs.extend(s.pairs)
        out.graph_types = sorted(set(out.graph_types) | set(s.graph_types))
        out.p2p_disabled_pairs = sorted({tuple(p) for p in out.p2p_disabled_pairs} | {tuple(p) for p in s.p2p_disabled_pairs})  # type: ignore[misc]
        out.nvls_devices = sorted(set(out.nvls_devices) | set(s.nvls_devices))
        out.warnings.extend(s.warnings)
        out.ranks = out.ranks or s.ranks
        out.nodes = out.nodes or s.nodes
    flags = [s.nvls_available for s in items if s.nvls_available is not None]
    out.nvls_available = any(flags) if flags else None
    gdr = [s.gdr_rdma for s in items if s.gdr_rdma is not None]
    out.gdr_rdma = any(gdr) if gdr else None
    out.transports = dict(sorted(out.transports.items()))
    out.p2p_disabled_pairs = [list(p) for p in out.p2p_disabled_pairs]
    return out


#: Longest piece of a line read at once: a file without newlines is read in pieces, never whole.
_LINE_CHUNK = 1 << 16


def _stream_lines(path: str | Path) -> Iterator[str]:
    """The lines of a text file, read one at a time (at most :data:`_LINE_CHUNK` characters each)."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        while line := handle.readline(_LINE_CHUNK):
            yield line


def summarize_files(paths: Iterable[str | Path], max_input_mib: float | None = None) -> NcclLogSummary:
    """The merged summary of NCCL log files (one per rank, as ``NCCL_DEBUG_FILE`` writes them).

    Each file's size is checked first (``max_input_mib``, see :func:`shardscope.fileio.check_input_size`)
    and the file is streamed, so memory stays small whatever the file holds.
    """
    from shardscope.fileio import check_input_size

    summaries = []
    for path in paths:
        check_input_size(path, max_input_mib, "an NCCL_DEBUG=INFO log file")
        try:
            summary = parse_nccl_log(_stream_lines(path))
        except OSError as exc:
            raise UserError(f"{path}: cannot be read ({exc.strerror or exc})") from None
        if summary.lines_read == 0:
            raise UserError(f"{path}: has no NCCL log lines; expected output of a run with NCCL_DEBUG=INFO")
        summaries.append(summary)
    if not summaries:
        raise UserError("no NCCL log files given")
    return merge(summaries)


#: Environment settings that force NCCL off NVLink P2P.
_P2P_OFF = {"NCCL_P2P_DISABLE": ("1",), "NCCL_P2P_LEVEL": ("LOC", "0")}


def transport_flags(summary: NcclLogSummary, transport_label: str, topology: Mapping[str, Any] | None = None) -> list[str]:
    """Contradictions between a job's transport label and what NCCL did; [] when none.

    A job labelled ``pcie`` (NVLink unused: ``NCCL_P2P_DISABLE=1``, ``NCCL_NVLS_ENABLE=0``) is
    flagged when NVLS was on, when the graph search reports NVLink paths (``type NVL/..``), or
    when NCCL used P2P on a topology whose GPUs are NVLinked. A ``default`` job on an NVLink
    topology is flagged when no P2P connection was made at all (NCCL fell back to SHM or NET).
    """
    flags: list[str] = []
    nvlinked = bool(topology) and any((link.get("nvlinks") or 0) > 0 for link in (topology or {}).get("links", []))
    p2p = sum(v for k, v in summary.transports.items() if k.startswith("P2P"))
    if transport_label == "pcie":
        if summary.nvls_used:
            flags.append("labelled PCIe-forced but NVLS (NVLink SHARP) was on: the job did use NVLink; set NCCL_NVLS_ENABLE=0")
        if any(t.startswith("NVL") for t in summary.graph_types):
            flags.append(f"labelled PCIe-forced but NCCL's graph search used NVLink paths ({', '.join(summary.graph_types)})")
        if p2p and nvlinked:
            flags.append(f"labelled PCIe-forced but NCCL made {p2p} P2P connection(s) on a topology with NVLink: "
                         "P2P between NVLinked GPUs runs over NVLink; set NCCL_P2P_DISABLE=1")
    elif nvlinked and summary.connections and not p2p and (summary.nodes or 1) == 1:
        flags.append("NVLink topology but NCCL made no P2P connection (only "
                     f"{', '.join(summary.transports)}): P2P is disabled or failed (NCCL_P2P_DISABLE, a VM, ACS)")
    if summary.p2p_disabled_pairs:
        flags.append(f"NCCL reports P2P disabled between connected GPUs {summary.p2p_disabled_pairs}: traffic goes "
                     "through host memory (typical of VMs, ACS redirect or GPUs without peer access)")
    return flags
