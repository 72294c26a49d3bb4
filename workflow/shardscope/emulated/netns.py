"""Bounded wrappers around ``ip`` and ``tc``: namespace names, the capability probe, cleanup.

Every namespace shardscope creates is named ``<prefix><owner pid>-<4 hex>-<role>`` (role
``h<i>`` for a host, ``sw`` for the switches, ``probe`` for the capability probe). Cleanup
matches that whole pattern, never the prefix alone, so namespaces of other tools (or of other
people on a shared machine) are never touched; by default it only removes namespaces whose
owner process is gone, so a running job on the same machine keeps its fabric.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time

from shardscope.errors import UserError

#: Seconds any single ``ip`` / ``tc`` command may take.
COMMAND_TIMEOUT_S = 20.0
#: Default namespace prefix (config ``emulated.prefix``).
DEFAULT_PREFIX = "ssfab-"
PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,11}-$")
_ROLE_RE = r"(?:h[0-9]{1,2}|sw|probe)"


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is a valid namespace prefix (letters/digits ending in '-'), else UserError."""
    if not isinstance(prefix, str) or not PREFIX_RE.match(prefix):
        raise UserError(f"emulated.prefix {prefix!r} must be 1-12 lower-case letters or digits followed by '-', e.g. 'ssfab-'")
    return prefix


def new_base(prefix: str) -> str:
    """A fresh namespace base name owned by this process: ``<prefix><pid>-<4 hex>``."""
    return f"{check_prefix(prefix)}{os.getpid()}-{secrets.token_hex(2)}"


def owner_pid(name: str, prefix: str) -> int | None:
    """The pid that created namespace ``name``, or None when ``name`` is not one of ours."""
    match = re.fullmatch(re.escape(prefix) + r"([0-9]{1,9})-[0-9a-f]{4}-" + _ROLE_RE, name)
    return int(match.group(1)) if match else None


def run(args: list[str], timeout_s: float = COMMAND_TIMEOUT_S, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one ``ip``/``tc`` command with a timeout; UserError quoting it and its stderr on failure."""
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise UserError(f"`{' '.join(args)}` did not finish within {timeout_s:g} s") from None
    except OSError as exc:
        raise UserError(f"cannot run `{args[0]}`: {exc.strerror}") from None
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise UserError(f"`{' '.join(args)}` failed: {detail[-1] if detail else f'exit status {proc.returncode}'}")
    return proc


def list_namespaces() -> list[str]:
    """Names of every named network namespace on this machine (``ip netns list``)."""
    out = run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def namespace_pids(name: str) -> list[int]:
    """Pids of the processes living in namespace ``name`` (``ip netns pids``)."""
    proc = run(["ip", "netns", "pids", name], check=False)
    return [int(tok) for tok in proc.stdout.split() if tok.isdigit()]


def _alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (exited, not yet reaped by its parent) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def kill_processes(names: list[str], grace_s: float = 3.0) -> list[int]:
    """SIGTERM every process inside the namespaces ``names``, SIGKILL what is left after ``grace_s``.

    Returns the pids that were signalled. A namespace is only freed (and its veths deleted)
    when no process is left in it, which is why teardown does this before ``ip netns del``.
    """
    me = os.getpid()
    signalled: list[int] = []
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        pids = [p for name in names for p in namespace_pids(name) if p not in (me, 1)]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
            signalled.append(pid)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.05)
    return sorted(set(signalled))


def delete_namespaces(names: list[str], grace_s: float = 3.0) -> None:
    """Stop every process in ``names`` and delete the namespaces (with them every veth, bridge and qdisc)."""
    kill_processes(names, grace_s)
    existing = set(list_namespaces())
    for name in names:
        if name in existing:
            run(["ip", "netns", "del", name], check=False)


def leftovers(prefix: str, include_live: bool = False) -> list[str]:
    """Our namespaces under ``prefix``: those whose owner is gone, or all of them with ``include_live``."""
    found = []
    for name in list_namespaces():
        pid = owner_pid(name, prefix)
        if pid is not None and (include_live or (pid != os.getpid() and not _alive(pid))):
            found.append(name)
    return found


def cleanup(prefix: str, include_live: bool = False) -> list[str]:
    """Remove leftover namespaces (and their processes and links) under ``prefix``; return their names."""
    names = leftovers(check_prefix(prefix), include_live)
    if names:
        delete_namespaces(names, grace_s=1.0)
    return names


@functools.cache
def _probe(prefix: str) -> tuple[str | None, bool]:
    """(problem or None, whether netem works), found by building and deleting one namespace."""
    if not sys.platform.startswith("linux"):
        return f"emulated fabrics need Linux network namespaces, and this is {sys.platform}", False
    if os.geteuid() != 0:
        return "emulated fabrics need root (they create network namespaces, veth links and tc qdiscs), and this process is not root", False
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"emulated fabrics need the `ip` and `tc` commands of iproute2, and {' and '.join(missing)} is not installed", False
    name = f"{new_base(prefix)}-probe"
    try:
        made = run(["ip", "netns", "add", name], check=False)
        if made.returncode != 0:
            return f"cannot create a network namespace ({made.stderr.strip() or 'ip netns add failed'}); emulated fabrics need CAP_SYS_ADMIN and CAP_NET_ADMIN", False
        tbf = run(["tc", "-n", name, "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "100mbit", "burst", "64kb", "latency", "50ms"], check=False)
        if tbf.returncode != 0:
            return "this kernel has no tbf qdisc (sch_tbf), which emulated fabrics need to cap link rates", False
        netem = run(["tc", "-n", name, "qdisc", "replace", "dev", "lo", "root", "netem", "delay", "1ms"], check=False)
        return None, netem.returncode == 0
    finally:
        run(["ip", "netns", "del", name], check=False)


def support_problem(need_delay: bool = False, prefix: str = DEFAULT_PREFIX) -> str | None:
    """Why emulated fabrics cannot run here (one sentence), or None when they can.

    ``need_delay``: a preset asks for link delays, which need the netem qdisc as well.
    """
    problem, has_netem = _probe(check_prefix(prefix))
    if problem is None and need_delay and not has_netem:
        return "this kernel has no netem qdisc (sch_netem), which links with delay_ms > 0 need; set their delay_ms to 0 or load sch_netem"
    return problem
