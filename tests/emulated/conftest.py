"""Fixtures of the emulated-fabric tests: a private namespace prefix, the root check, a leak guard.

Tests that build fabrics (network namespaces, veth links, tc qdiscs) change the machine, so they
run only when asked: ``SHARDSCOPE_SYSTEM_TESTS=1`` (``.ci/run`` sets it), as root with iproute2.
Each test gets its own prefix (``sst<6 hex>-``), so tests never see, and cleanup never
touches, namespaces of other runs or of other people on a shared machine.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator

import pytest
from shardscope.emulated import netns


def namespaces_under(prefix: str) -> list[str]:
    """Every namespace on the machine whose name starts with ``prefix``."""
    return [name for name in netns.list_namespaces() if name.startswith(prefix)]


@pytest.fixture
def fabric_root() -> None:
    """Skip, with the one-sentence reason, unless asked for and emulated fabrics can be built (root, ip, tc)."""
    if os.environ.get("SHARDSCOPE_SYSTEM_TESTS") != "1":
        pytest.skip("builds network namespaces on this machine; set SHARDSCOPE_SYSTEM_TESTS=1 to run it (.ci/run does)")
    problem = netns.support_problem()
    if problem:
        pytest.skip(f"needs root with iproute2, as in CI: {problem}")


@pytest.fixture
def prefix(fabric_root: None) -> Iterator[str]:
    """A namespace prefix used by this test alone; whatever it leaves behind fails the test and is removed."""
    value = f"sst{secrets.token_hex(3)}-"
    yield value
    leaked = namespaces_under(value)
    if leaked:
        netns.delete_namespaces(leaked, grace_s=0.5)
    assert not leaked, f"namespaces left behind: {leaked}"


@pytest.fixture
def ours(prefix: str) -> Callable[[], list[str]]:
    """A call listing the namespaces that exist now under this test's prefix."""
    return lambda: namespaces_under(prefix)
