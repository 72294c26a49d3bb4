"""Fabric presets: small graphs of emulated hosts, switches and links with a rate and a delay.

A preset names ``hosts`` hosts ``h0 … h{n-1}`` (one rank each), any number of switches
(``s0``, ``s1``, … : Linux bridges) and the links between them. Every host has exactly one
link and the whole graph is a tree, so the fabric is one Ethernet segment without loops and
every pair of hosts has exactly one path: the slowest link on that path is the pair's
bottleneck, as a PCIe hop or an NVLink-group boundary is on a real node.

Presets come from :data:`BUILTIN` and from the ``emulated.fabrics`` config mapping (which
may redefine a built-in). Each names ``placements``: which hosts a job's ranks run on, in
rank order (``all`` is always there).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from shardscope.errors import UserError

#: Names of fabrics and placements (they become file names and labels).
NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
HOST_RE = re.compile(r"^h(0|[1-9][0-9]?)$")
SWITCH_RE = re.compile(r"^s(0|[1-9][0-9]?)$")
MAX_HOSTS = 16
MAX_SWITCHES = 16
MAX_DELAY_MS = 1000.0
MAX_RATE_MBIT = 1_000_000.0


def host_name(index: int) -> str:
    """The node name of host ``index`` (``h0``, ``h1``, …)."""
    return f"h{index}"


def host_index(name: str) -> int:
    """The index of host node ``name`` (``h3`` -> 3)."""
    return int(name[1:])


def is_host(name: str) -> bool:
    """True for a host node name (``h<i>``), False for a switch (``s<j>``)."""
    return bool(HOST_RE.match(name))


@dataclass(frozen=True)
class Link:
    """One emulated cable: nodes ``a`` and ``b``, a rate cap per direction and a one-way delay.

    ``rate_mbit`` None means uncapped (as fast as the two CPUs move bytes through the kernel);
    otherwise each direction is shaped by a token bucket (tc ``tbf``) to ``rate_mbit`` megabits
    per second (1e6 bit/s). ``delay_ms`` adds that one-way delay per direction (tc ``netem``).
    """

    a: str
    b: str
    rate_mbit: float | None = None
    delay_ms: float = 0.0

    def __post_init__(self) -> None:
        for end in (self.a, self.b):
            if not (HOST_RE.match(end) or SWITCH_RE.match(end)):
                raise UserError(f"link {self.a}-{self.b}: node {end!r} is neither a host (h0, h1, …) nor a switch (s0, s1, …)")
        if self.a == self.b:
            raise UserError(f"link {self.a}-{self.b} joins a node to itself; expected two different nodes")
        if self.rate_mbit is not None and not (isinstance(self.rate_mbit, (int, float)) and 0 < self.rate_mbit <= MAX_RATE_MBIT):
            raise UserError(f"link {self.a}-{self.b}: rate_mbit must be null (uncapped) or a number in (0, {MAX_RATE_MBIT:g}], got {self.rate_mbit!r}")
        if not (isinstance(self.delay_ms, (int, float)) and 0 <= self.delay_ms <= MAX_DELAY_MS):
            raise UserError(f"link {self.a}-{self.b}: delay_ms must be a number in [0, {MAX_DELAY_MS:g}], got {self.delay_ms!r}")

    @property
    def name(self) -> str:
        """``a-b``, the key of this link in stored results."""
        return f"{self.a}-{self.b}"

    @property
    def shaped(self) -> bool:
        """True when this link needs a qdisc (a rate cap or a delay)."""
        return self.rate_mbit is not None or self.delay_ms > 0

    def to_dict(self) -> dict[str, Any]:
        """The link's parameters as stored with every result measured over it."""
        return {"a": self.a, "b": self.b, "rate_mbit": self.rate_mbit, "delay_ms": float(self.delay_ms)}


@dataclass(frozen=True)
class FabricPreset:
    """A named emulated fabric: hosts, links and the placements jobs may use.

    ``placements`` maps a placement name to the host indices of the ranks, in rank order;
    ``all`` (every host, in index order) is added when missing.
    """

    name: str
    hosts: int
    links: tuple[Link, ...]
    placements: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        where = f"fabric {self.name!r}"
        if not isinstance(self.name, str) or not NAME_RE.match(self.name):
            raise UserError(f"fabric name {self.name!r} must be lower-case letters, digits and '_' (starting with a letter)")
        if not isinstance(self.hosts, int) or isinstance(self.hosts, bool) or not 2 <= self.hosts <= MAX_HOSTS:
            raise UserError(f"{where}: hosts must be an integer from 2 to {MAX_HOSTS}, got {self.hosts!r}")
        self._check_graph(where)
        placements = {"all": tuple(range(self.hosts)), **{k: tuple(v) for k, v in dict(self.placements).items()}}
        for pname, ranks in placements.items():
            if not isinstance(pname, str) or not NAME_RE.match(pname):
                raise UserError(f"{where}: placement name {pname!r} must be lower-case letters, digits and '_'")
            if len(ranks) < 2 or len(set(ranks)) != len(ranks) or not all(isinstance(h, int) and 0 <= h < self.hosts for h in ranks):
                raise UserError(f"{where}: placement {pname!r} must list at least two different hosts among h0…h{self.hosts - 1}, got {list(ranks)!r}")
        object.__setattr__(self, "placements", MappingProxyType(placements))

    def _check_graph(self, where: str) -> None:
        hosts = {host_name(i) for i in range(self.hosts)}
        nodes: set[str] = set(hosts)
        degree = dict.fromkeys(hosts, 0)
        seen: set[frozenset[str]] = set()
        for link in self.links:
            pair = frozenset((link.a, link.b))
            if pair in seen:
                raise UserError(f"{where}: link {link.name} is listed twice")
            seen.add(pair)
            for end in (link.a, link.b):
                if is_host(end):
                    if end not in hosts:
                        raise UserError(f"{where}: link {link.name} names host {end}, but the fabric has hosts h0…h{self.hosts - 1}")
                    degree[end] += 1
                nodes.add(end)
        switches = nodes - hosts
        if len(switches) > MAX_SWITCHES:
            raise UserError(f"{where}: at most {MAX_SWITCHES} switches, got {len(switches)}")
        for host, count in sorted(degree.items()):
            if count != 1:
                raise UserError(f"{where}: host {host} has {count} links; every host needs exactly one (its network port)")
        if len(self.links) != len(nodes) - 1 or not _connected(nodes, self.links):
            raise UserError(f"{where}: the links must join all hosts and switches into one tree (connected, no loops)")

    @property
    def switches(self) -> tuple[str, ...]:
        """The switch nodes, sorted by index."""
        names = {end for link in self.links for end in (link.a, link.b) if not is_host(end)}
        return tuple(sorted(names, key=lambda s: int(s[1:])))

    @property
    def needs_delay(self) -> bool:
        """True when some link asks for a delay (the kernel must have the netem qdisc)."""
        return any(link.delay_ms > 0 for link in self.links)

    def path(self, a: int, b: int) -> list[Link]:
        """The links on the one path between hosts ``a`` and ``b``."""
        adjacency: dict[str, list[tuple[str, Link]]] = {}
        for link in self.links:
            adjacency.setdefault(link.a, []).append((link.b, link))
            adjacency.setdefault(link.b, []).append((link.a, link))
        start, goal = host_name(a), host_name(b)
        stack: list[tuple[str, list[Link]]] = [(start, [])]
        visited = {start}
        while stack:
            node, route = stack.pop()
            if node == goal:
                return route
            for nxt, link in adjacency.get(node, []):
                if nxt not in visited:
                    visited.add(nxt)
                    stack.append((nxt, [*route, link]))
        return []

    def bottleneck_mbit(self, hosts: tuple[int, ...] | list[int]) -> float | None:
        """The lowest rate cap on any path between two of ``hosts`` (None: every path uncapped)."""
        rates = [link.rate_mbit for i, a in enumerate(hosts) for b in hosts[i + 1:]
                 for link in self.path(a, b) if link.rate_mbit is not None]
        return min(rates) if rates else None

    def to_dict(self) -> dict[str, Any]:
        """The preset as a plain mapping (the config form; also stored with results)."""
        return {
            "description": self.description,
            "hosts": self.hosts,
            "links": [link.to_dict() for link in self.links],
            "placements": {k: [host_name(h) for h in v] for k, v in self.placements.items()},
        }


def _connected(nodes: set[str], links: tuple[Link, ...]) -> bool:
    if not nodes:
        return False
    adjacency: dict[str, set[str]] = {n: set() for n in nodes}
    for link in links:
        adjacency[link.a].add(link.b)
        adjacency[link.b].add(link.a)
    start = next(iter(sorted(nodes)))
    seen, todo = {start}, [start]
    while todo:
        for nxt in adjacency[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen == nodes


def star(name: str, hosts: int, rate_mbit: float | None, delay_ms: float = 0.0, description: str = "") -> FabricPreset:
    """``hosts`` hosts on one switch, every host link with the same rate and delay."""
    links = tuple(Link(host_name(i), "s0", rate_mbit, delay_ms) for i in range(hosts))
    return FabricPreset(name, hosts, links, description=description)


#: Link rate of ``pcie_like`` and of the cross-group link of ``nvl_groups`` (megabit/s).
SLOW_MBIT = 200.0

BUILTIN: dict[str, FabricPreset] = {
    "fast": star("fast", 2, None, description="two hosts on one switch, links uncapped (the NVSwitch stand-in)"),
    "pcie_like": star("pcie_like", 2, SLOW_MBIT, description=f"two hosts on one switch, each link capped at {SLOW_MBIT:g} Mbit/s (the PCIe stand-in)"),
    "nvl_groups": FabricPreset(
        "nvl_groups", 4,
        (Link("h0", "s0"), Link("h1", "s0"), Link("h2", "s1"), Link("h3", "s1"), Link("s0", "s1", SLOW_MBIT)),
        placements={"in_group": (0, 1), "across_groups": (0, 2)},
        description=f"two NVL pairs (h0,h1 on s0; h2,h3 on s1) on uncapped links, the pairs joined by one {SLOW_MBIT:g} Mbit/s link",
    ),
}


def _link_from_config(where: str, index: int, item: Any) -> Link:
    if not isinstance(item, Mapping) or "a" not in item or "b" not in item:
        raise UserError(f"{where}.links[{index}]: expected a mapping with a, b and optionally rate_mbit, delay_ms")
    unknown = set(item) - {"a", "b", "rate_mbit", "delay_ms"}
    if unknown:
        raise UserError(f"{where}.links[{index}]: unknown key {min(unknown)!r}; expected a, b, rate_mbit, delay_ms")
    try:
        return Link(str(item["a"]), str(item["b"]), item.get("rate_mbit"), item.get("delay_ms", 0.0) or 0.0)
    except UserError as exc:
        raise UserError(f"{where}.links[{index}]: {exc}") from None


def preset_from_config(name: str, spec: Any) -> FabricPreset:
    """A :class:`FabricPreset` from its config mapping (``hosts``, ``links``, ``placements``, ``description``)."""
    where = f"emulated.fabrics.{name}"
    if not isinstance(spec, Mapping):
        raise UserError(f"{where}: expected a mapping with hosts, links and optionally placements, description")
    unknown = set(spec) - {"hosts", "links", "placements", "description"}
    if unknown:
        raise UserError(f"{where}: unknown key {min(unknown)!r}; expected hosts, links, placements, description")
    links = spec.get("links")
    if not isinstance(links, list) or not links:
        raise UserError(f"{where}.links: expected a non-empty list of links")
    placements: dict[str, tuple[int, ...]] = {}
    for pname, hosts in dict(spec.get("placements") or {}).items():
        if not isinstance(hosts, list) or not all(isinstance(h, str) and HOST_RE.match(h) for h in hosts):
            raise UserError(f"{where}.placements.{pname}: expected a list of host names such as [h0, h2]")
        placements[str(pname)] = tuple(host_index(h) for h in hosts)
    try:
        return FabricPreset(name, spec.get("hosts"), tuple(_link_from_config(where, i, item) for i, item in enumerate(links)),
                            placements, str(spec.get("description") or ""))
    except UserError as exc:
        message = str(exc)
        raise UserError(message if message.startswith(where) else f"{where}: {message}") from None


def all_presets(section: Mapping[str, Any] | None = None) -> dict[str, FabricPreset]:
    """The built-in presets, overridden and extended by ``emulated.fabrics`` of the config."""
    presets = dict(BUILTIN)
    for name, spec in dict((section or {}).get("fabrics") or {}).items():
        presets[str(name)] = preset_from_config(str(name), spec)
    return presets


def get_preset(name: str, section: Mapping[str, Any] | None = None) -> FabricPreset:
    """The preset called ``name``; UserError lists the known names otherwise."""
    presets = all_presets(section)
    if name not in presets:
        raise UserError(f"unknown emulated fabric {name!r}; expected one of {', '.join(sorted(presets))}")
    return presets[name]
