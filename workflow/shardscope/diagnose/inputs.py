"""Measured sweeps from files: our collective job documents and nccl-tests logs, grouped into jobs.

A *sweep* is what one file measured: op, world size, the rows, and what is known about where
it ran (hosts, GPU indices, device names, transport label, backend). Files of the same job —
same op, world size, placement, transport and hosts — are *repeats* and are grouped, so the
summary can give run-to-run variation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shardscope.diagnose.sweep_summary import normalise_rows_noted
from shardscope.errors import UserError
from shardscope.fileio import loads_bounded, read_input_text

#: Size limit (MiB) for the files ``shardscope verdict`` reads; None is the default of
#: :data:`shardscope.fileio.DEFAULT_MAX_INPUT_MIB` (the command's ``--max-input-mib`` sets it).
max_input_mib: float | None = None


@dataclass(frozen=True)
class Sweep:
    """One measured sweep and where it ran."""

    source: str
    kind: str
    """``collectives`` (our worker document) or ``nccl-tests``."""
    op: str
    world_size: int
    rows: list[dict[str, Any]]
    hosts: tuple[str, ...] = ()
    members: tuple[int, ...] | None = None
    """GPU indices used on each node, when the file says (devices, CUDA_VISIBLE_DEVICES)."""
    pci_bus_ids: tuple[str, ...] = ()
    device_names: tuple[str, ...] = ()
    placement: str | None = None
    transport: str = "default"
    backend: str | None = None
    """``nccl`` or ``gloo`` for our documents; ``nccl`` for nccl-tests."""
    env: Mapping[str, Any] = field(default_factory=dict)
    nccl_env: tuple[tuple[str, str], ...] = ()
    """NCCL_* settings of the run (environment of our jobs; what NCCL logged for nccl-tests)."""
    nccl_log: Mapping[str, Any] | None = None
    """:func:`shardscope.diagnose.nccl_log.parse_nccl_log` of the NCCL lines in the file, if any."""
    input_notes: tuple[str, ...] = ()
    """What was done to the file's rows: left out (bad size or time), printed busbw flagged, rank count source."""

    @property
    def nodes(self) -> int:
        """Distinct hosts (1 when unknown)."""
        return max(len(set(self.hosts)), 1)

    def job_key(self) -> tuple[Any, ...]:
        """What makes two sweeps repeats of one job."""
        return (self.op, self.world_size, self.placement, self.transport, tuple(sorted(set(self.hosts))), self.members,
                self.nccl_env)


def _int_list(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        return None


def sweep_from_document(doc: Mapping[str, Any], source: str) -> Sweep:
    """A :class:`Sweep` from a ``shardscope.collectives/1`` job document."""
    job = doc.get("job") if isinstance(doc.get("job"), Mapping) else {}
    env = doc.get("env") if isinstance(doc.get("env"), Mapping) else {}
    try:
        op, world_size = str(job["op"]), int(job["world_size"])
    except (KeyError, TypeError, ValueError):
        raise UserError(f"{source}: job.op and job.world_size are missing; expected a collectives job document") from None
    rows = doc.get("rows")
    if not isinstance(rows, list) or not rows:
        raise UserError(f"{source}: has no rows; expected the measured sizes of a collectives job")
    comm_env = env.get("comm_env") if isinstance(env.get("comm_env"), Mapping) else {}
    members = _int_list(job.get("devices") and ",".join(str(d) for d in job["devices"])) or _int_list(
        comm_env.get("CUDA_VISIBLE_DEVICES"))
    host = env.get("host")
    nccl_env = {k: str(v) for k, v in comm_env.items() if str(k).startswith("NCCL_")}
    if isinstance(env.get("nccl_env"), Mapping):
        nccl_env.update({k: str(v.get("value") if isinstance(v, Mapping) else v) for k, v in env["nccl_env"].items()})
    log = doc.get("nccl_log") if isinstance(doc.get("nccl_log"), Mapping) else None
    normalised, notes = normalise_rows_noted(rows, op, world_size, source)
    return Sweep(source=source, kind="collectives", op=op, world_size=world_size,
                 rows=_some_rows(normalised, source), hosts=(str(host),) if host else (),
                 members=members, pci_bus_ids=tuple(env.get("device_pci_bus_ids") or ()),
                 device_names=tuple(str(d) for d in env.get("devices") or ()), placement=job.get("placement"),
                 transport=str(job.get("transport") or "default"), backend=env.get("backend"), env=dict(env),
                 nccl_env=tuple(sorted(nccl_env.items())), nccl_log=log, input_notes=tuple(notes))


def _some_rows(rows: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    """``rows`` unless every row was left out, which is a UserError rather than an empty verdict."""
    if not rows:
        raise UserError(f"{source}: no row has a positive finite size and time; expected measured collective rows")
    return rows


def sweep_from_nccl_tests(path: str, transport: str = "default", placement: str | None = None,
                          text: str | None = None) -> Sweep:
    """A :class:`Sweep` from an nccl-tests log or ``-J`` file, read by the collectives stage's importer.

    ``text`` is the file's content when the caller has read it already (it is read once). A log
    whose rank count is unknown is a UserError: busbw cannot be recomputed without it.
    """
    from shardscope.collectives.nccl_tests import parse_nccl_tests
    from shardscope.diagnose.nccl_log import parse_nccl_log

    if text is None:
        text = read_input_text(path, max_input_mib, "a collectives result or an nccl-tests log")
    result = parse_nccl_tests(text, str(path))
    if result.world_size is None:
        raise UserError(f"{path}: the rank count of this nccl-tests log is unknown (no device lines, command line or "
                        "usable busbw/algbw); expected a log that tells it (import it with "
                        "`shardscope collectives import --world-size N --out FILE` and pass that file)")
    log = parse_nccl_log(text.splitlines())
    hosts = tuple(str(d.get("host")) for d in result.devices if d.get("host"))
    per_host: dict[str, set[int]] = {}
    for device in result.devices:
        if isinstance(device.get("device"), int):
            per_host.setdefault(str(device.get("host")), set()).add(device["device"])
    sets = {tuple(sorted(v)) for v in per_host.values()}
    members = sets.pop() if len(sets) == 1 else None
    rows = [dict(row, in_place=row["placement_mode"] == "in_place") for row in result.rows if row["size_bytes"] > 0]
    normalised, notes = normalise_rows_noted(rows, result.op, result.world_size, str(path))
    return Sweep(source=str(path), kind="nccl-tests", op=result.op, world_size=result.world_size,
                 rows=_some_rows(normalised, str(path)), hosts=hosts, members=members,
                 pci_bus_ids=tuple(str(d.get("bus_id")) for d in result.devices if d.get("bus_id")),
                 device_names=tuple(sorted({str(d["name"]) for d in result.devices if d.get("name")})),
                 placement=placement, transport=transport, backend="nccl", nccl_env=tuple(sorted(log.env.items())),
                 nccl_log=log.to_dict() if log.lines_read else None, input_notes=tuple([*result.notes, *notes]))


def load_sweep(path: str) -> Sweep:
    """A sweep from ``path``: a collectives job JSON document, else an nccl-tests log or -J file."""
    text = read_input_text(path, max_input_mib, "a collectives result or an nccl-tests log")
    if text.lstrip().startswith("{"):
        try:
            doc = loads_bounded(text, path)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}: is not valid JSON (line {exc.lineno}: {exc.msg})") from None
        if isinstance(doc, dict) and doc.get("kind") == "collectives":
            return sweep_from_document(doc, str(path))
        if isinstance(doc, dict) and doc.get("kind") == "collectives_import":
            return _sweep_from_import(doc, str(path))
    return sweep_from_nccl_tests(str(path), text=text)


def _sweep_from_import(doc: Mapping[str, Any], source: str) -> Sweep:
    """A sweep from ``shardscope collectives import --out`` output."""
    devices = [d for d in doc.get("devices") or [] if isinstance(d, Mapping)]
    op, world_size = str(doc.get("op")), doc.get("world_size")
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise UserError(f"{source}: world_size is {world_size!r}; expected the rank count of the imported log "
                        "(re-import it with `shardscope collectives import --world-size N --out FILE`)")
    normalised, notes = normalise_rows_noted(doc.get("rows") or [], op, world_size, source)
    return Sweep(source=source, kind="nccl-tests", op=op, world_size=world_size,
                 rows=_some_rows(normalised, source), input_notes=tuple(notes),
                 hosts=tuple(str(d.get("host")) for d in devices if d.get("host")),
                 device_names=tuple(sorted({str(d["name"]) for d in devices if d.get("name")})),
                 placement=doc.get("placement"), transport=str(doc.get("transport") or "default"), backend="nccl")


def group_repeats(sweeps: Sequence[Sweep]) -> list[list[Sweep]]:
    """Sweeps grouped by :meth:`Sweep.job_key`, in first-seen order."""
    groups: dict[tuple[Any, ...], list[Sweep]] = {}
    for sweep in sweeps:
        groups.setdefault(sweep.job_key(), []).append(sweep)
    return list(groups.values())


_GPU_NAME = re.compile(r"(NVIDIA|Tesla|GeForce|Quadro|RTX|A100|H100|H200|B200|Instinct|MI[123]\d\d)", re.IGNORECASE)


def gpu_name(sweeps: Iterable[Sweep]) -> str | None:
    """The GPU model the files name (the first that looks like a GPU), for topologies that do not."""
    for sweep in sweeps:
        if sweep.backend == "gloo" or sweep.env.get("device_type") == "cpu":
            continue  # CPU runs list the CPU model as their device
        for name in sweep.device_names:
            if _GPU_NAME.search(name):
                return name
    return None
