"""Each strategy at its own best micro-batch: a real micro-batch search under a CPU memory budget, then a
comparison at one global batch with gradient accumulation (issue 17, "fastest within memory").

1. Plans the default CPU config with ``training.search`` for the chosen strategies and a memory
   budget (``training.memory_budget_gib``; on CPU a trial fits when the tracked tensor peak is
   within it), and runs the search of each (``shardscope.training.search``: doubling from 1, then
   bisection; every trial a real 2-rank run, kept under ``--keep``/trials).
2. Picks one global batch per rank: the largest power of two at most the largest best
   micro-batch; each strategy trains it at the largest micro-batch that divides it and fits,
   accumulating gradients over the rest (``grad_accum``).
3. Prints each search's trials (micro-batch, outcome, tracked peak) and each strategy's tokens/s
   at its own micro-batch and at the smallest one (every strategy at DDP's), and the per-step
   losses, which agree across strategies at equal global batch.

The defaults (tiny model at seq 16, a 16 MiB budget, strategies ddp and fsdp) keep it to a few
minutes on 2 cores::

    nice .venv/bin/python benchmarks/best_microbatch.py [--budget-mib 16] [--limit 32] [--strategies ddp fsdp] [--keep DIR]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


def plan_for(strategies: list[str], budget_mib: float, limit: int, seq_len: int) -> dict[str, Any]:
    """The CPU plan of the default config with the search of ``strategies`` under ``budget_mib``."""
    from shardscope.plan.machine import MachineProbe
    from shardscope.plan.planner import make_plan
    from shardscope.topology.detect import detect_cpu_only

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config = copy.deepcopy(config)
    config["training"].update(strategies=strategies, search={"limit": limit, "strategies": strategies},
                              memory_budget_gib=budget_mib / 1024)
    config["cpu"]["seq_len"] = seq_len
    return make_plan(detect_cpu_only().topology.to_dict(), config, MachineProbe(which=lambda name: None))


def largest_divisor_at_most(n: int, most: int) -> int:
    """The largest divisor of ``n`` that is at most ``most`` (1 at least)."""
    return max(d for d in range(1, n + 1) if n % d == 0 and d <= max(most, 1))


def run_at(plan_path: Path, job: Any, micro_batch: int, grad_accum: int, folder: Path) -> dict[str, Any]:
    """``job`` at ``micro_batch`` x ``grad_accum`` (a real run through the job's launcher); its result document."""
    from shardscope.jobs.run import run_training

    job_id = f"{job.job_id}-mb{micro_batch}x{grad_accum}"
    spec = dataclasses.replace(job, job_id=job_id, micro_batch=micro_batch, grad_accum=grad_accum)
    out = folder / f"{job_id}.json"
    run_training(spec, str(out), str(folder / f"{job_id}.log"), str(plan_path))
    return json.loads(out.read_text())


def main() -> int:
    """Search, compare, print."""
    from shardscope.contracts.jobs import job_from_dict
    from shardscope.training.search import run_search

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", nargs="+", default=["ddp", "fsdp"])
    parser.add_argument("--budget-mib", type=float, default=16.0)
    parser.add_argument("--limit", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=16)
    parser.add_argument("--keep", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        plan = plan_for(args.strategies, args.budget_mib, args.limit, args.seq_len)
        plan_path = folder / "plan.json"
        plan_path.write_text(json.dumps(plan))
        jobs = {j["job_id"]: job_from_dict(j) for j in plan["training"]}
        searches = {}
        for entry in plan["search"]:
            found = run_search(str(plan_path), entry["job_id"], str(folder / f"{entry['job_id']}-search.json"),
                               str(folder / "trials"), str(folder / f"{entry['job_id']}-search.log"), entry["limit"])
            searches[entry["strategy"]] = found
            print(f"search {entry['strategy']}: best micro-batch {found['best_micro_batch']} ({found['reason']})")
            for t in found["trials"]:
                print(f"  mb {t['micro_batch']:>3}: {t['outcome']:<12} tracked peak {(t['tracked_peak_bytes'] or 0) / 2**20:7.2f} MiB"
                      f" (RSS {(t['peak_memory_bytes'] or 0) / 2**20:.0f} MiB)"
                      + (f"  {t['error']}" if t.get("error") else ""))
        bests = {s: f["best_micro_batch"] for s, f in searches.items()}
        if not all(bests.values()):
            print(f"a strategy fits no micro-batch under {args.budget_mib} MiB: {bests}")
            return 1
        per_rank = 1 << (max(bests.values()).bit_length() - 1)
        smallest = largest_divisor_at_most(per_rank, min(bests.values()))
        print(f"global batch: {per_rank} sequences per rank x 2 ranks (the largest power of two within the best micro-batches)")
        rows = {}
        for strategy in args.strategies:
            job = jobs[next(e["job_id"] for e in plan["search"] if e["strategy"] == strategy)]
            own = largest_divisor_at_most(per_rank, bests[strategy])
            for label, mb in (("own best", own), ("common", smallest)):
                if label == "common" and mb == own and ("own best", strategy) in rows:
                    rows[label, strategy] = rows["own best", strategy]
                    continue
                doc = run_at(plan_path, job, mb, per_rank // mb, folder)
                rows[label, strategy] = {"micro_batch": mb, "grad_accum": per_rank // mb, "outcome": doc["outcome"],
                                         "tokens_per_s": (doc.get("summary") or {}).get("tokens_per_s"),
                                         "ci95": [(doc.get("summary") or {}).get(k) for k in ("ci95_low_tokens_per_s", "ci95_high_tokens_per_s")],
                                         "losses": [round(s["loss"], 5) for s in doc.get("steps", [])]}
        for (label, strategy), row in rows.items():
            ci = row["ci95"]
            print(f"{label:<9}{strategy:<8} mb {row['micro_batch']:>2} x accum {row['grad_accum']:>2}: {row['outcome']:<11}"
                  f" {row['tokens_per_s'] or 0:8.0f} tokens/s (95% CI {ci[0] or 0:.0f}..{ci[1] or 0:.0f}) losses {row['losses']}")
        base = rows["own best", args.strategies[0]]["losses"]
        spread = max(abs(a - b) for r in rows.values() for a, b in zip(r["losses"], base))
        print(f"largest loss difference across strategies and micro-batches at one global batch: {spread:.2e}")
        if args.json:
            args.json.write_text(json.dumps({"searches": searches, "runs": {f"{k[0]}/{k[1]}": v for k, v in rows.items()},
                                             "loss_spread": spread}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
