"""Build an emulated fabric from a preset with ``ip netns``, veth pairs, bridges and ``tc``; tear it down.

Layout: one network namespace per host (``<base>-h<i>``, interface ``eth0`` with address
``subnet[i+1]``) and, when the preset has switches, one more (``<base>-sw``) holding a Linux
bridge ``br<j>`` per switch. Every link is a veth pair created directly inside the two
namespaces it joins, so no interface ever exists in the machine's own namespace, no route
leads out, and traffic between ranks cannot leave the namespaces built here. A capped link
gets a ``tbf`` qdisc (a delayed one ``netem``) on both of its ends, one per direction.

:class:`EmulatedFabric` is a context manager; every fabric that is up is also registered for
teardown at interpreter exit and on SIGTERM/SIGINT/SIGHUP. A SIGKILL-ed owner leaves its
namespaces behind: :func:`shardscope.emulated.netns.cleanup` (``shardscope fabric cleanup``,
also run before every emulated job) removes them.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import signal
import threading
from dataclasses import dataclass
from types import FrameType
from typing import Any, Self

from shardscope.emulated import netns
from shardscope.emulated.presets import FabricPreset, Link, host_index, host_name, is_host
from shardscope.errors import UserError

#: The interface every host namespace talks through (GLOO_SOCKET_IFNAME).
HOST_IFACE = "eth0"
DEFAULT_SUBNET = "10.213.0.0/24"
#: Queueing a tbf allows before dropping, and the smallest token bucket (bytes).
TBF_LATENCY_MS = 50
TBF_MIN_BURST_BYTES = 64 * 1024
NETEM_LIMIT_PACKETS = 10_000


def check_subnet(subnet: str, hosts: int) -> ipaddress.IPv4Network:
    """The IPv4 private network ``subnet`` if it has room for ``hosts`` hosts, else UserError."""
    try:
        net = ipaddress.ip_network(subnet, strict=True)
    except ValueError:
        raise UserError(f"emulated.subnet {subnet!r} is not a network address such as 10.213.0.0/24") from None
    if not isinstance(net, ipaddress.IPv4Network) or not net.is_private or net.is_loopback:
        raise UserError(f"emulated.subnet {subnet!r} must be a private IPv4 range (10.x, 172.16-31.x, 192.168.x or 169.254.x)")
    if net.num_addresses - 2 < hosts:
        raise UserError(f"emulated.subnet {subnet!r} has room for {net.num_addresses - 2} hosts, but the fabric has {hosts}")
    return net


@dataclass(frozen=True)
class Names:
    """Namespace and interface names of one fabric instance (``base`` = ``<prefix><pid>-<hex>``)."""

    base: str

    def __post_init__(self) -> None:
        if not self.base or any(c not in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in self.base):
            raise UserError(f"namespace base {self.base!r} must be lower-case letters, digits and '-'")

    def host(self, index: int) -> str:
        """Namespace of host ``index``."""
        return f"{self.base}-h{index}"

    @property
    def switch(self) -> str:
        """Namespace holding every bridge and inter-switch veth."""
        return f"{self.base}-sw"


def _tbf_burst(rate_mbit: float) -> int:
    return max(TBF_MIN_BURST_BYTES, int(rate_mbit * 1e6 / 8 * 1e-3))


def qdisc_commands(ns: str, dev: str, link: Link) -> list[list[str]]:
    """tc commands shaping the egress of ``dev`` in ``ns`` to ``link``'s rate and delay (empty if uncapped)."""
    base = ["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:"]
    if link.delay_ms > 0:
        rate = ["rate", f"{link.rate_mbit:g}mbit"] if link.rate_mbit is not None else []
        return [[*base, "netem", "delay", f"{link.delay_ms:g}ms", *rate, "limit", str(NETEM_LIMIT_PACKETS)]]
    if link.rate_mbit is not None:
        return [[*base, "tbf", "rate", f"{link.rate_mbit:g}mbit", "burst", str(_tbf_burst(link.rate_mbit)),
                 "latency", f"{TBF_LATENCY_MS}ms"]]
    return []


def build_commands(preset: FabricPreset, names: Names, subnet: str = DEFAULT_SUBNET) -> list[list[str]]:
    """Every ``ip``/``tc`` command that builds ``preset`` under ``names``, in order (pure: nothing runs)."""
    net = check_subnet(subnet, preset.hosts)
    addresses = list(net.hosts())
    switches = preset.switches
    bridge = {s: f"br{i}" for i, s in enumerate(switches)}
    namespaces = [names.host(i) for i in range(preset.hosts)] + ([names.switch] if switches else [])
    cmds: list[list[str]] = [["ip", "netns", "add", ns] for ns in namespaces]
    devices: dict[str, list[str]] = {ns: [] for ns in namespaces}
    shaping: list[list[str]] = []
    for s in switches:
        cmds.append(["ip", "-n", names.switch, "link", "add", bridge[s], "type", "bridge"])
        devices[names.switch].append(bridge[s])
    for k, link in enumerate(preset.links):
        ends = _link_ends(link, k, names, bridge)
        (ns_a, dev_a, _), (ns_b, dev_b, _) = ends
        if ns_a == ns_b:
            cmds.append(["ip", "-n", ns_a, "link", "add", dev_a, "type", "veth", "peer", "name", dev_b])
        else:
            cmds.append(["ip", "link", "add", "name", dev_a, "netns", ns_a, "type", "veth", "peer", "name", dev_b, "netns", ns_b])
        for ns, dev, master in ends:
            devices[ns].append(dev)
            if master:
                cmds.append(["ip", "-n", ns, "link", "set", "dev", dev, "master", master])
            shaping += qdisc_commands(ns, dev, link)
    for ns in namespaces:
        for dev in devices[ns]:
            # No IPv6 link-local addresses: gloo must find exactly one (IPv4) address on eth0.
            cmds.append(["ip", "-n", ns, "link", "set", "dev", dev, "addrgenmode", "none"])
    for i in range(preset.hosts):
        cmds.append(["ip", "-n", names.host(i), "addr", "add", f"{addresses[i]}/{net.prefixlen}", "dev", HOST_IFACE])
    for ns in namespaces:
        cmds.append(["ip", "-n", ns, "link", "set", "dev", "lo", "up"])
        cmds += [["ip", "-n", ns, "link", "set", "dev", dev, "up"] for dev in devices[ns]]
    return cmds + shaping


def _link_ends(link: Link, k: int, names: Names, bridge: dict[str, str]) -> tuple[tuple[str, str, str | None], tuple[str, str, str | None]]:
    """(namespace, device, bridge to enslave to) of both ends of link number ``k``."""

    def end(node: str, other: str, side: str) -> tuple[str, str, str | None]:
        """One end of the link: a host's eth0, or a port of the switch's bridge."""
        if is_host(node):
            return names.host(host_index(node)), HOST_IFACE, None
        # On a switch: the port towards a host is named after it; inter-switch ports t<k>a / t<k>b.
        return names.switch, (other if is_host(other) else f"t{k}{side}"), bridge[node]

    return end(link.a, link.b, "a"), end(link.b, link.a, "b")


# -- teardown on exit and on signals ---------------------------------------------------------

_ACTIVE: dict[int, EmulatedFabric] = {}
_PREVIOUS: dict[int, Any] = {}
_LOCK = threading.RLock()
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def teardown_all() -> None:
    """Tear down every fabric this process still has up (atexit and signal handlers call this)."""
    with _LOCK:
        fabrics = list(_ACTIVE.values())
    for fabric in fabrics:
        fabric.down()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    teardown_all()
    previous = _PREVIOUS.get(signum)
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _install_handlers() -> None:
    if _PREVIOUS or threading.current_thread() is not threading.main_thread():
        return
    for sig in _SIGNALS:
        _PREVIOUS[sig] = signal.signal(sig, _on_signal)
    atexit.register(teardown_all)


class EmulatedFabric:
    """One preset built in fresh namespaces; ``with EmulatedFabric(preset) as fab:`` builds and removes it."""

    def __init__(self, preset: FabricPreset, prefix: str = netns.DEFAULT_PREFIX, subnet: str = DEFAULT_SUBNET) -> None:
        self.preset = preset
        self.subnet = str(check_subnet(subnet, preset.hosts))
        self.names = Names(netns.new_base(prefix))
        self._up = False

    @property
    def namespaces(self) -> list[str]:
        """Every namespace of this fabric (hosts first, then the switch namespace if any)."""
        return [self.names.host(i) for i in range(self.preset.hosts)] + ([self.names.switch] if self.preset.switches else [])

    def host_namespace(self, index: int) -> str:
        """The namespace host ``index`` runs in."""
        return self.names.host(index)

    def host_address(self, index: int) -> str:
        """The IPv4 address of host ``index`` on :data:`HOST_IFACE`."""
        return str(list(ipaddress.ip_network(self.subnet).hosts())[index])

    def describe(self) -> dict[str, Any]:
        """What was built: preset, subnet, namespaces and host addresses (stored with results)."""
        return {
            "preset": self.preset.name,
            "subnet": self.subnet,
            "interface": HOST_IFACE,
            "namespaces": self.namespaces,
            "addresses": {host_name(i): self.host_address(i) for i in range(self.preset.hosts)},
        }

    def up(self) -> Self:
        """Build the fabric; on any failure remove whatever was built and raise UserError."""
        with _LOCK:
            _install_handlers()
            _ACTIVE[id(self)] = self
            self._up = True
        try:
            for cmd in build_commands(self.preset, self.names, self.subnet):
                netns.run(cmd)
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Stop every process inside the fabric and delete its namespaces; safe to call twice."""
        with _LOCK:
            if not self._up:
                return
            self._up = False
            _ACTIVE.pop(id(self), None)
        netns.delete_namespaces(self.namespaces)

    def __enter__(self) -> Self:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()
