"""The identity of a machine's topology: ``topology_hash``, the key every stored topology row is joined on.

Two probes of the same hardware must get the same key, or runs of one machine could not be
joined across days. So the hash covers what the machine *is* (GPUs, links, islands, NUMA
nodes, CPU, fabric, host name, probe method) and leaves out what only says when or from
where it was read: the probe time and the provenance file names in ``source``. Those stay in
the document itself (and in ``topologies.topology_json``) for provenance.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

#: ``source`` keys that change from run to run on the same machine: the UTC time of the probe, the path of a
#: parsed file and the names of the raw probe files beside topology.json.
VOLATILE_SOURCE_KEYS = ("probed_at", "file", "raw_files")


def hardware_view(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The topology document less its volatile ``source`` keys (what :func:`topology_hash` digests)."""
    view = dict(doc)
    source = view.get("source")
    if isinstance(source, Mapping):
        view["source"] = {k: v for k, v in source.items() if k not in VOLATILE_SOURCE_KEYS}
    return view


def topology_hash(doc: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces) of :func:`hardware_view`: the same for every probe
    of the same hardware, whatever the time or the folder."""
    canonical = json.dumps(hardware_view(doc), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()
