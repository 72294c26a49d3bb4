"""The faults of issue 35, each tried on this machine: one line per fault with what was done, what survived,
PASS or FAIL and the seconds it took.

    .venv/bin/python benchmarks/faults.py [--only NAME ...] [--keep]

Faults (names for ``--only``):

- ``kill-agent``: a CPU ddp training job's torchrun agent is SIGKILLed while its ranks run; the job's result
  must be ``failed`` and stay so, and no rank may outlive the job (issue 35 item 1).
- ``stop-rank``: one rank of a training job is SIGSTOPped; the job must end as ``failed`` within its limit
  (item 2). Where the config has ``training.job_timeout_s`` (issue-34-spec) the limit is set to 45 s; the
  script stops waiting after 70 s and says so.
- ``report``: script, ``<img onerror>``, ``<svg onload>`` and ``javascript:`` payloads in every string field of
  three results that collect accepts; collected, drawn, rendered; the report's HTML parsed for live markup.
- ``shell``: ``$(…)``, backticks and ``;`` in every path key of the config; the topology and plan rules run
  and every rule's shell command is dry-run; marker files must not appear.
- ``readers``: 100,000-deep JSON to every reader; 10^7 empty rows and a 33 MiB file to collect (exit 2, one
  sentence, peak memory).
- ``plan-1024``: ``plan`` of a 1,024-GPU topology (NVLink pairs, two NUMA nodes) with a 45 s cap, beside 128.
- ``full-disk``: collect, topology detect and plan writing to a full 64 KiB tmpfs (root only).
- ``kill-collect``: six collects SIGKILLed at random moments; the database must be unchanged or complete each
  time, and the next collect must remove the copies they left.

Timings come from a shared machine; read them as orders of magnitude. Every process this script starts is
found again by a marker in its command line and ended by its id.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "workflow"), str(REPO / "tests")]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "workflow"), os.environ.get("PYTHONPATH", "")])}
PAYLOAD = ('<script>alert(1)</script><img src=x onerror=alert(2)>"><svg onload=alert(3)>'
           "[x](javascript:alert(4))![y](javascript:alert(5))")
HOSTILE = "x$(touch pwned1)`touch pwned2`;touch pwned3;"
CONFIG = REPO / "config" / "config.yaml"
EIGHT_GPUS = REPO / "tests" / "data" / "topo" / "01-hgx-h200-nvswitch-nv18-12nics.txt"

Outcome = tuple[str, str, bool]  # what was done, what survived, passed


def shardscope(*args: str, timeout: float = 120, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m shardscope ARGS`` from this tree."""
    return subprocess.run([sys.executable, "-m", "shardscope", *args], capture_output=True, text=True, env=ENV,
                          timeout=timeout, check=False, cwd=cwd)


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:110] if lines else ""


def processes_with(marker: str) -> dict[int, str]:
    """pid -> command line of every process whose command line holds ``marker`` (found in /proc)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline:
                found[int(entry.name)] = cmdline
    return found


def end_processes(marker: str) -> None:
    """SIGCONT and SIGKILL, by id, every process this script started that is still there (found by ``marker``)."""
    for pid in processes_with(marker):
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except OSError:
                pass


# --------------------------------------------------------------------------- training faults (items 1 and 2)


def training_plan(work: Path, steps: int, limit_s: float | None) -> tuple[Path, str, str]:
    """A CPU plan of one ddp job of ``steps`` steps; (plan path, job id, what the limit is)."""
    import yaml

    work.mkdir(parents=True, exist_ok=True)
    done = shardscope("topology", "detect", "--out", str(work / "topology.json"))
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["cpu"].update(steps=steps, repeats=1)
    config["training"].update(strategies=["ddp"], conditions={}, memory_bound=None, search=None)
    if limit_s is not None:  # issue-34-spec's keys; a tree without them refuses them, and plans without
        config["training"].update(job_timeout_s=limit_s, timeout_s=min(30, limit_s / 2))
    for attempt in (1, 2):
        (work / "config.yaml").write_text(yaml.safe_dump(config))
        done = shardscope("plan", "--topology", str(work / "topology.json"), "--config", str(work / "config.yaml"),
                          "--out", str(work / "plan.json"))
        if done.returncode == 0 or attempt == 2:
            break
        config["training"].pop("job_timeout_s", None)
        config["training"].pop("timeout_s", None)
    assert done.returncode == 0, done.stderr
    spec = json.loads((work / "plan.json").read_text())["training"][0]
    job = spec["job_id"]
    limits = {key: value for key, value in spec.items() if "timeout" in key}
    limit = f"job spec {limits}" if limits else "no time limit in this tree's training job spec"
    return work / "plan.json", job, limit


def start_job(plan: Path, job: str, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "shardscope", "job", "run", "--plan", str(plan), "--id", job,
                             "--out", str(out), "--log", str(out.with_suffix(".log"))], env=ENV, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def ranks_and_agent(marker: str) -> tuple[list[int], list[int]]:
    """(rank pids, torchrun agent pids) of the job whose paths hold ``marker``."""
    found = processes_with(marker)
    agents = [p for p, cmd in found.items() if "torch.distributed.run" in cmd or "torchrun" in cmd]
    ranks = [p for p, cmd in found.items()
             if "shardscope.training" in cmd and p not in agents and " job run " not in cmd]
    return sorted(ranks), agents


def wait_for_ranks(marker: str, count: int, limit_s: float = 120) -> list[int]:
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        ranks, _ = ranks_and_agent(marker)
        if len(ranks) >= count:
            return ranks
        time.sleep(0.2)
    raise TimeoutError(f"the job's {count} ranks did not start within {limit_s:g} s")


def outcome_of(out: Path) -> str:
    try:
        return str(json.loads(out.read_text())["outcome"])
    except (OSError, ValueError, KeyError):
        return "none"


def kill_agent(work: Path) -> Outcome:
    plan, job, _ = training_plan(work, steps=60, limit_s=None)
    out = work / "result.json"
    proc = start_job(plan, job, out)
    try:
        wait_for_ranks(str(work), 2)
        time.sleep(3)  # the ranks are in their steps
        _, agents = ranks_and_agent(str(work))
        for pid in agents:
            os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        proc.wait(timeout=60)
        declared = outcome_of(out)
        ended = time.monotonic() - killed
        outcomes, alive_for = {declared}, 0.0
        while time.monotonic() - killed < 30:
            outcomes.add(outcome_of(out))
            if not ranks_and_agent(str(work))[0]:
                break
            time.sleep(0.25)
            alive_for = time.monotonic() - killed
        outcomes.add(outcome_of(out))
        ranks_left = len(ranks_and_agent(str(work))[0])
    finally:
        end_processes(str(work))
    survived = (f"declared {declared} {ended:.1f} s after the kill; outcomes seen {'/'.join(sorted(outcomes))}; "
                f"ranks alive {alive_for:.1f} s after, {ranks_left} still at the end")
    return "SIGKILL the torchrun agent of a running ddp job", survived, outcomes == {"failed"} and ranks_left == 0


def stop_rank(work: Path) -> Outcome:
    plan, job, limit = training_plan(work, steps=3000, limit_s=45)
    out = work / "result.json"
    proc = start_job(plan, job, out)
    cap = 70.0
    try:
        ranks = wait_for_ranks(str(work), 2)
        time.sleep(3)
        os.kill(ranks[-1], signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            proc.wait(timeout=cap)
            took = f"the job ended {time.monotonic() - stopped:.1f} s after the stop as {outcome_of(out)}"
            ended = True
        except subprocess.TimeoutExpired:
            took, ended = f"the job had not ended {cap:g} s after the stop (the script ended it)", False
    finally:
        end_processes(str(work))
    return f"SIGSTOP one rank of a ddp job ({limit})", took, ended and outcome_of(out) == "failed"


# --------------------------------------------------------------------------- report, shell, readers


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _strings(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, str):
        return [path]
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    return [p for key, child in items for p in _strings(child, (*path, key))]


def _poison(doc: dict[str, Any], probe: Path) -> tuple[dict[str, Any], int]:
    from shardscope.results.store import validate_inputs

    taken = 0
    for path in _strings(doc):
        trial = copy.deepcopy(doc)
        holder = trial
        for key in path[:-1]:
            holder = holder[key]
        holder[path[-1]] = f"{holder[path[-1]]}{PAYLOAD}"
        probe.write_text(json.dumps(trial))
        if not validate_inputs([str(probe)])[1]:
            doc, taken = trial, taken + 1
    return doc, taken


def report(work: Path) -> Outcome:
    from factories import collective_doc, training_doc
    from shardscope.figures.plots import draw_all
    from shardscope.paper.render import render_report
    from shardscope.results.store import collect

    work.mkdir(parents=True, exist_ok=True)
    paths, fields = [], 0
    docs = (collective_doc("all_reduce"), training_doc("ddp"), training_doc("zero3", step_time_s=0.03))
    for i, doc in enumerate(docs):
        bad, taken = _poison(doc, work / "probe.json")
        fields += taken
        paths.append(work / f"result-{i}.json")
        paths[-1].write_text(json.dumps(bad))
    collect(work / "r.duckdb", [str(p) for p in paths])
    draw_all(work / "r.duckdb", work / "figures")
    html = render_report(str(work / "r.duckdb"), str(work / "figures"), str(REPO / "paper" / "report.md"),
                         str(work / "report.html")).read_text()
    page = _Tags()
    page.feed(html)
    live = [tag for tag, attrs in page.tags if tag in ("script", "svg", "a") or any(a.startswith("on") for a in attrs)
            or any("javascript" in (v or "") for v in attrs.values())
            or (tag == "img" and not (attrs.get("src") or "").startswith("data:image/png;base64,"))]
    shown = html.count("&lt;script&gt;alert(1)")
    return (f"payloads in {fields} string fields of 3 results, collected and rendered",
            f"{len(live)} live injected elements/attributes; payload shown as text {shown} times",
            not live and shown > 0)


def shell(work: Path) -> Outcome:
    import yaml

    folder = work / HOSTILE
    folder.mkdir(parents=True)
    assert shardscope("topology", "detect", "--out", str(folder / "topo.json")).returncode == 0
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config.update(results=f"{HOSTILE}/results", db=f"{HOSTILE}/db/shardscope.duckdb",
                  topology={**config["topology"], "file": f"{HOSTILE}/topo.json"})
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    snakemake = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "workflow" / "Snakefile"),
                 "--configfile", "config.yaml"]
    ran = subprocess.run([*snakemake, "--cores", "1", f"{HOSTILE}/results/plan/plan.json"], cwd=work, env=ENV,
                         capture_output=True, text=True, timeout=300, check=False)
    dry = subprocess.run([*snakemake, "--dry-run", "--printshellcmds", "all"], cwd=work, env=ENV,
                         capture_output=True, text=True, timeout=300, check=False)
    commands = [line.split("Shell command:", 1)[1] for line in (dry.stdout + dry.stderr).splitlines()
                if "Shell command:" in line and line.split("Shell command:", 1)[1].strip() != "None"]
    split = [c for c in commands if any("pwned" in w and HOSTILE not in w for w in shlex.split(c))]
    markers = [m for m in ("pwned1", "pwned2", "pwned3") if (work / m).exists() or (REPO / m).exists()]
    return ("$(…), backticks and ; in results, db and topology.file; topology+plan run, all rules dry-run",
            f"rules ran: {'yes' if ran.returncode == 0 else 'no (' + last_line(ran.stderr) + ')'}; "
            f"{len(commands)} shell commands, {len(split)} split the path; markers created: {markers or 'none'}",
            ran.returncode == 0 and not split and not markers)


#: A small wrapper that runs a command and prints its peak RSS: measured from this process, the fork would count
#: this process's own pages (the report fault leaves it at hundreds of MB) until the exec.
_PEAK = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(code)")


def _measured(args: list[str]) -> tuple[int, float, str]:
    """(exit status, peak MB, last stderr line but the peak) of ``shardscope ARGS`` started by :data:`_PEAK`."""
    done = subprocess.run([sys.executable, "-c", _PEAK, sys.executable, "-m", "shardscope", *args], env=ENV,
                          capture_output=True, text=True, check=False)
    *said, peak = done.stderr.strip().splitlines()
    text = "\n".join(said)
    return done.returncode, int(peak) / 1024, last_line(text) + (" Traceback!" if "Traceback" in text else "")


#: The heading line collect puts above its list of problems (one problem here).
COLLECT_HEADING = r"error: 1 problem\(s\) in the inputs; nothing was loaded:\n  "


def readers(work: Path) -> Outcome:
    work.mkdir(parents=True, exist_ok=True)
    deep = work / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    commands = {
        "collect": ["collect", "--db", str(work / "r.duckdb")],
        "plan": ["plan", "--config", str(REPO / "config" / "config.yaml"), "--topology"],
        "topology show": ["topology", "show"], "topology parse": ["topology", "parse", "--out", str(work / "t.json")],
        "verdict": ["verdict"], "collectives report": ["collectives", "report"],
        "collectives import": ["collectives", "import", "--out", str(work / "c.json")],
    }
    # collect lists its problems under one heading line; the others print one line
    bad = [name for name, argv in commands.items()
           if (done := shardscope(*argv, str(deep))).returncode != 2 or "Traceback" in done.stderr
           or f"shardscope: error: {deep}" not in re.sub(COLLECT_HEADING, "error: ", done.stderr)]
    rows = work / "rows.json"
    rows.write_text('{"kind": "training", "steps": [' + ",".join(["{}"] * 10**7) + "]}")
    huge = work / "huge.json"
    with open(huge, "wb") as handle:
        handle.truncate(33 * 2**20)
    status_rows, peak_rows, said_rows = _measured(["collect", "--db", str(work / "r.duckdb"), str(rows)])
    status_huge, peak_huge, said_huge = _measured(["collect", "--db", str(work / "r.duckdb"), str(huge)])
    ok = not bad and status_rows == 2 == status_huge and "Traceback" not in said_rows + said_huge
    return ("100,000-deep JSON to 7 readers; 10^7 empty rows (30 MB) and 33 MiB to collect",
            f"deep: {7 - len(bad)}/7 one sentence exit 2{' (not: ' + ', '.join(bad) + ')' if bad else ''}; rows: exit "
            f"{status_rows}, peak {peak_rows:.0f} MB; 33 MiB: exit {status_huge}, peak {peak_huge:.0f} MB", ok)


def _topology(gpus: int, path: Path) -> None:
    """A topology.json of ``gpus`` GPUs in NVLink pairs over two NUMA nodes (pairs' links listed; the rest unknown)."""
    half = gpus // 2
    doc = {"schema": "shardscope.topology/1", "accelerator": "nvidia", "fabric": "nvlink_islands", "gpu_count": gpus,
           "gpus": [{"index": i, "name": "NVIDIA H100 80GB HBM3", "memory_bytes": None, "numa_node": int(i >= half),
                     "cpu_affinity": "64-127" if i >= half else "0-63", "nearest_nics": [], "nearest_nic_code": None,
                     "pci_bus_id": None, "pcie_generation": None, "pcie_width": None} for i in range(gpus)],
           "islands": [[i, i + 1] for i in range(0, gpus, 2)],
           "links": [{"a": i, "b": i + 1, "code": "NV12", "nvlinks": 12} for i in range(0, gpus, 2)],
           "nics": [], "notes": [], "cpu": {}, "pcie_only_view": False,
           "numa_nodes": [{"id": 0, "cpus": "0-63", "cores": 64}, {"id": 1, "cpus": "64-127", "cores": 64}],
           "source": {"method": "synthetic", "file": str(path)}}
    path.write_text(json.dumps(doc))


def plan_1024(work: Path) -> Outcome:
    work.mkdir(parents=True, exist_ok=True)
    times = {}
    for gpus, cap in ((128, 45), (1024, 45)):
        _topology(gpus, work / f"topo{gpus}.json")
        start = time.monotonic()
        try:
            done = shardscope("plan", "--topology", str(work / f"topo{gpus}.json"), "--config", str(CONFIG),
                              "--out", str(work / f"plan{gpus}.json"), timeout=cap)
            failed = "" if done.returncode == 0 else f" (exit {done.returncode})"
            times[gpus] = f"{time.monotonic() - start:.1f} s{failed}"
        except subprocess.TimeoutExpired:
            times[gpus] = f"over {cap} s"
    ok = not times[1024].startswith("over") and float(times[1024].split()[0]) <= 5
    return ("plan of 128 and 1,024 GPUs (NVLink pairs, 2 NUMA nodes)",
            f"128 GPUs {times[128]}, 1,024 GPUs {times[1024]} (target 5 s)", ok)


# --------------------------------------------------------------------------- storage faults


def full_disk(work: Path) -> Outcome:
    from factories import collective_doc

    work.mkdir(parents=True, exist_ok=True)
    mount = work / "full"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True,
                          text=True, check=False)
    if done.returncode:
        return ("collect, topology detect, plan onto a full disk",
                f"not tried: cannot mount a tmpfs ({last_line(done.stderr)})", False)
    try:
        try:
            with open(mount / "filler", "wb", buffering=0) as handle:
                while True:
                    handle.write(b"\0" * 4096)
        except OSError:
            pass
        (work / "in.json").write_text(json.dumps(collective_doc()))
        runs = {"collect": shardscope("collect", "--db", str(mount / "r.duckdb"), "--manifest", str(mount / "m.json"),
                                      str(work / "in.json")),
                "topology detect": shardscope("topology", "detect", "--out", str(mount / "t.json")),
                "plan": shardscope("plan", "--topology", str(EIGHT_GPUS), "--config", str(CONFIG),
                                   "--out", str(mount / "plan.json"))}
        good = [n for n, r in runs.items() if r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
                and "Traceback" not in r.stderr]
        left = sorted(str(p.relative_to(mount)) for p in mount.rglob("*")
                      if p.is_file() and p.name not in ("filler", "r.duckdb.lock"))
    finally:
        subprocess.run(["umount", str(mount)], check=False)
    return ("collect (with --manifest), topology detect, plan onto a full 64 KiB tmpfs",
            f"{len(good)}/3 one sentence exit 2 ('{last_line(runs['collect'].stderr)[:60]}…'); "
            f"files left: {left or 'none'}",
            len(good) == 3 and not left)


KILLS = 6


def kill_collect(work: Path) -> Outcome:
    from factories import collective_doc, training_doc

    work.mkdir(parents=True, exist_ok=True)
    db = work / "r.duckdb"
    base = work / "base.json"
    base.write_text(json.dumps(collective_doc("all_gather")))
    start = time.monotonic()
    assert shardscope("collect", "--db", str(db), str(base)).returncode == 0
    takes = time.monotonic() - start  # one whole collect: the kills fall inside it
    rng = random.Random(35)
    unchanged = complete = mixed = 0
    for i in range(KILLS):
        docs = [work / f"k{i}-{j}.json" for j in range(3)]
        for j, path in enumerate(docs):
            path.write_text(json.dumps(training_doc("ddp", host=f"kill{i}-{j}")))
        before = db.read_bytes()
        proc = subprocess.Popen([sys.executable, "-m", "shardscope", "collect", "--db", str(db), *map(str, docs)],
                                env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3 * takes, 1.1 * takes))
        proc.kill()
        proc.wait()
        from shardscope.results.store import connect_readonly

        with connect_readonly(db) as con:
            hosts = {h for (h,) in con.execute("SELECT host FROM runs WHERE host LIKE 'kill%'").fetchall()}
        wanted = {f"kill{i}-{j}" for j in range(3)}
        if db.read_bytes() == before:
            unchanged += 1
        elif wanted <= hosts:
            complete += 1
        else:
            mixed += 1
    copies = [p.name for p in work.iterdir() if re.fullmatch(r"\.r\.duckdb\.[a-z0-9_]{8}\.tmp(\.wal)?", p.name)]
    planted = not copies  # no kill fell inside the copy's life: plant what one leaves, to see it removed
    if planted:
        (work / ".r.duckdb.planted0.tmp").write_bytes(db.read_bytes())
    assert shardscope("collect", "--db", str(db), str(base)).returncode == 0
    after = [p.name for p in work.iterdir() if re.fullmatch(r"\.r\.duckdb\.[a-z0-9_]{8}\.tmp(\.wal)?", p.name)]
    return (f"{KILLS} collects SIGKILLed at random within 0.3-1.1x a collect's {takes:.1f} s, then one more collect",
            f"database unchanged {unchanged}, complete {complete}, mixed {mixed}; temporary copies left by the kills "
            f"{len(copies)}{' (1 planted)' if planted else ''}, after the next collect {len(after)}",
            mixed == 0 and not after)


FAULTS: dict[str, Callable[[Path], Outcome]] = {
    "kill-agent": kill_agent, "stop-rank": stop_rank, "report": report, "shell": shell, "readers": readers,
    "plan-1024": plan_1024, "full-disk": full_disk, "kill-collect": kill_collect,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(FAULTS), help="run only these faults")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (printed) for inspection")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="shardscope-faults-"))
    failed = 0
    try:
        for name in args.only or FAULTS:
            start = time.monotonic()
            try:
                done, survived, passed = FAULTS[name](root / name)
            except Exception as exc:  # a fault the script could not stage is reported, not hidden
                done, survived, passed = "(could not be staged)", f"{type(exc).__name__}: {str(exc)[:150]}", False
            failed += not passed
            verdict = "PASS" if passed else "FAIL"
            print(f"{name:<12} | {done} | {survived} | {verdict} | {time.monotonic() - start:.1f} s", flush=True)
    finally:
        end_processes(str(root))
        if args.keep:
            print(f"work folder: {root}")
        else:
            subprocess.run(["rm", "-rf", str(root)], check=False)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
