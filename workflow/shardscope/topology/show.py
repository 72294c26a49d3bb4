"""``shardscope topology show``: a short human summary of a topology.json document.

:func:`summarize` picks what a person asks first (fabric, GPUs, islands, NUMA nodes with
their GPUs, the nearest NIC of each GPU, caveats) into a plain dict, the ``--format json``
output; :func:`render_text` prints that dict as a few aligned lines.
"""

from __future__ import annotations

from typing import Any

from shardscope.topology.model import Link, sys_socket_groups

#: One line per fabric class: what it means for traffic between GPUs.
FABRIC_MEANING = {
    "nvswitch": "every GPU pair joined by NVLink through NVSwitch chips",
    "nvlink_mesh": "every GPU pair joined by NVLink (or XGMI) links",
    "nvlink_partial": "one NVLink-connected group, but some GPU pairs go over PCIe",
    "nvlink_islands": "several NVLink islands, joined to each other only by PCIe",
    "pcie": "no NVLink: every GPU pair talks over PCIe",
    "single": "one GPU",
    "cpu": "no GPU: jobs run as CPU processes",
}
NO_NAMES_NOTE = "GPU names and memory are not in this probe output (`shardscope topology detect` on the node reads them)"
NO_GPU_NUMA_NOTE = "the NUMA node of each GPU is unknown"
NO_NIC_NOTE = "no NIC in this probe output, so no nearest NIC per GPU"


def ranges(indices: list[int]) -> str:
    """``[0, 1, 2, 3, 6]`` -> ``0-3,6``: GPU lists short enough for one line."""
    parts: list[str] = []
    run: list[int] = []
    for i in sorted(indices):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            parts.append(_run(run))
        run = [i]
    if run:
        parts.append(_run(run))
    return ",".join(parts)


def _run(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def summarize(doc: dict[str, Any]) -> dict[str, Any]:
    """The summary of a validated ``topology.json`` (the ``--format json`` contract).

    Keys: ``fabric``, ``fabric_meaning``, ``accelerator``, ``source``, ``gpus`` (index, name,
    memory_bytes, numa_node, island, nearest_nics as ``{name, device}``, nearest_nic_code),
    ``islands`` (gpus and the NVLink codes inside), ``numa_nodes`` (id, cpus, cores, gpus),
    ``cpu``, ``notes`` and ``warnings`` (what the view may hide; see :mod:`shardscope.topology.views`).
    """
    gpus = doc["gpus"]
    island_of = {g: i for i, isl in enumerate(doc["islands"]) for g in isl}
    nic_device = {n["name"]: n.get("device") for n in doc.get("nics", [])}
    return {
        "fabric": doc["fabric"],
        "fabric_meaning": FABRIC_MEANING.get(doc["fabric"], ""),
        "accelerator": doc.get("accelerator", "none"),
        "source": _source(doc["source"]),
        "gpus": [
            {
                "index": g["index"],
                "name": g.get("name"),
                "memory_bytes": g.get("memory_bytes"),
                "numa_node": g.get("numa_node"),
                "island": island_of.get(g["index"]),
                "nearest_nics": [{"name": n, "device": nic_device.get(n)} for n in g.get("nearest_nics", [])],
                "nearest_nic_code": g.get("nearest_nic_code"),
            }
            for g in gpus
        ],
        "islands": [{"gpus": isl, "codes": _codes_inside(doc["links"], isl)} for isl in doc["islands"]],
        "numa_nodes": [
            dict(n, gpus=[g["index"] for g in gpus if g.get("numa_node") == n["id"]]) for n in doc["numa_nodes"]
        ],
        "cpu": dict(doc.get("cpu", {})),
        "notes": list(doc.get("notes", [])) + _derived_notes(doc),
        "warnings": list(doc.get("warnings", [])),
    }


def _source(source: dict[str, Any]) -> str:
    """``nvidia-smi (saved/topo.txt)`` or ``os on host-1``: how the topology was obtained."""
    method = source.get("method", "unknown")
    where = source.get("file") or (f"on {source['host']}" if source.get("host") else "")
    return f"{method} ({where})" if source.get("file") else f"{method} {where}".strip()


def _codes_inside(links: list[dict[str, Any]], island: list[int]) -> list[str]:
    """The distinct NVLink codes between GPUs of one island (``NV12``, ``XGMI``…)."""
    members = set(island)
    codes = {link["code"] for link in links if link["a"] in members and link["b"] in members and link.get("nvlinks")}
    return sorted(codes)


def _derived_notes(doc: dict[str, Any]) -> list[str]:
    """Caveats the document implies but does not state: missing names, unknown GPU NUMA nodes, NICs."""
    gpus = doc["gpus"]
    notes = []
    if gpus and all(g.get("name") is None for g in gpus):
        notes.append(NO_NAMES_NOTE)
    if len(gpus) > 1 and all(g.get("numa_node") is None for g in gpus):
        indices = [g["index"] for g in gpus]
        sockets = sys_socket_groups(indices, [Link(**link) for link in doc["links"]])
        split = "; SYS paths put GPUs " + " and ".join(f"[{ranges(s)}]" for s in sockets) + " on different CPU sockets"
        notes.append(NO_GPU_NUMA_NOTE + (split if sockets else ""))
    if gpus and not doc.get("nics"):
        notes.append(NO_NIC_NOTE)
    return notes


def _gib(value: int | None) -> str:
    return f"{value / 2**30:.1f} GiB" if value else ""


def _gpu_line(gpu: dict[str, Any], with_island: bool) -> str:
    """``GPU0  NVIDIA H200  140.4 GiB  NUMA 0  island 0  nearest NIC NIC0 (mlx5_0) via PXB``."""
    nics = ", ".join(f"{n['name']} ({n['device']})" if n["device"] and n["device"] != n["name"] else n["name"]
                     for n in gpu["nearest_nics"])
    fields = [
        f"GPU{gpu['index']}",
        gpu["name"] or "",
        _gib(gpu["memory_bytes"]),
        f"NUMA {gpu['numa_node']}" if gpu["numa_node"] is not None else "NUMA ?",
        f"island {gpu['island']}" if with_island else "",
        f"nearest NIC {nics} via {gpu['nearest_nic_code']}" if nics else "",
    ]
    return "  " + "  ".join(f for f in fields if f)


def _islands_line(summary: dict[str, Any]) -> str:
    """``islands: 4 of 2 GPUs: [0-1] NV12 …``, or why there are none to speak of."""
    islands = summary["islands"]
    if not any(i["codes"] for i in islands):
        return "islands:    none (no NVLink: every GPU is on its own)"
    sizes = "/".join(str(n) for n in sorted({len(i["gpus"]) for i in islands}))
    shown = "  ".join(f"[{ranges(i['gpus'])}]" + (f" {'/'.join(i['codes'])}" if i["codes"] else "") for i in islands)
    return f"islands:    {len(islands)} of {sizes} GPU(s): {shown}"


def render_text(summary: dict[str, Any]) -> str:
    """The summary as a few lines of text for a terminal."""
    lines = [
        f"source:     {summary['source']}",
        f"fabric:     {summary['fabric']} ({summary['fabric_meaning']})",
    ]
    gpus = summary["gpus"]
    if gpus:
        lines.append(f"GPUs:       {len(gpus)} ({summary['accelerator']})")
        with_island = any(i["codes"] for i in summary["islands"])
        lines += [_gpu_line(g, with_island) for g in gpus]
        lines.append(_islands_line(summary))
    cpu = summary["cpu"]
    if cpu:
        lines.append(
            f"CPU:        {cpu.get('model') or 'unknown model'}; {cpu.get('sockets', '?')} socket(s), "
            f"{cpu.get('physical_cores', '?')} cores, {cpu.get('logical_cpus', '?')} logical CPUs"
        )
    lines.append(f"NUMA nodes: {len(summary['numa_nodes'])}")
    for node in summary["numa_nodes"]:
        cpus = f"CPUs {node['cpus']}" + (f" ({node['cores']})" if node.get("cores") else "") if node.get("cpus") else ""
        members = f"GPU {ranges(node['gpus'])}" if node["gpus"] else ("no GPU" if gpus else "")
        lines.append("  " + "  ".join(f for f in (f"node {node['id']}:", members, cpus) if f))
    if summary.get("warnings"):
        lines.append("warnings:")
        lines += [f"  ! {warning}" for warning in summary["warnings"]]
    if summary["notes"]:
        lines.append("notes:")
        lines += [f"  - {note}" for note in summary["notes"]]
    return "\n".join(lines) + "\n"
