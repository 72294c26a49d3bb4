"""Each strategy at its own best micro-batch, from a real pipeline run (issue 17, "fastest within memory").

1. With ``--run DIR`` runs the pipeline (``snakemake --cores 2``) into ``DIR`` with the default config and an
   override that turns the micro-batch search on: ``training.search`` for ``--strategies`` up to ``--limit``
   (the global batch: ``limit`` x ranks), under ``training.memory_budget_gib`` = ``--budget-mib`` / 1024 (on
   CPU a trial fits when the tracked tensor peak is within it). Every trial runs with the gradient
   accumulation to the global batch; each searched job then trains at its best micro-batch (rule
   ``train_best``, placement ``…@best_microbatch``).
2. Reads the database (``--db FILE``, or the run's) and prints the trials (table ``search_trials``: micro-batch,
   accumulation, outcome, tracked peak against the budget, tokens/s), each strategy's best run (tokens/s with
   its 95% interval over repeats, relative to DDP's best run) and the largest per-step loss difference between
   the best runs (equal global batch, same data: the losses agree when accumulation is right).

It prints what one run measured; nothing is asserted. Default (tiny model, seq 64, 2 ranks, ddp and fsdp,
limit 8, a 21 MiB budget) about 8 minutes on 2 idle cores::

    nice .venv/bin/python benchmarks/best_microbatch.py --run /tmp/ss-search [--budget-mib 21] [--limit 8]
    nice .venv/bin/python benchmarks/best_microbatch.py --run /tmp/ss-cond --emulated fast pcie_like   # per condition
    .venv/bin/python benchmarks/best_microbatch.py --db /tmp/ss-search/shardscope.duckdb
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


def override(folder: Path, strategies: list[str], limit: int, budget_mib: float, emulated: list[str] | None = None) -> Path:
    """The override config of the search run (results and database inside ``folder``); with ``emulated`` presets,
    the emulated fabrics on, training ``strategies`` over each (every condition's jobs also run at their best)."""
    path = folder / "search-override.yaml"
    doc: dict[str, Any] = {"results": str(folder / "results"), "db": str(folder / "shardscope.duckdb"),
                           "training": {"search": {"limit": limit, "strategies": strategies},
                                        "memory_budget_gib": budget_mib / 1024}}
    if emulated:
        doc["emulated"] = {"enabled": True, "presets": emulated, "strategies": strategies}
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def run_pipeline(folder: Path, extra: Path) -> None:
    """``snakemake --cores 2`` with the default config and ``extra`` (stops on failure, naming the log)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu")
    env.setdefault("TORCH_EXTENSIONS_DIR", str(REPO / ".venv" / "torch_extensions"))
    cmd = [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", "config/config.yaml", str(extra)]
    print("running:", " ".join(cmd), flush=True)
    with open(folder / "snakemake.log", "w", encoding="utf-8") as log:
        status = subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    if status:
        raise SystemExit(f"the pipeline failed (status {status}); see {folder / 'snakemake.log'}")


def report(db: Path) -> dict[str, Any]:
    """Print the trials, the best runs and the loss agreement stored in ``db``; return them."""
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        trials = con.execute("""
            SELECT t.strategy, t.micro_batch, t.grad_accum, t.global_batch, t.outcome, t.tracked_peak_bytes,
                   t.memory_budget_bytes, t.tokens_per_s, t.is_best, t.trial_order
            FROM search_trials t JOIN runs r USING (run_id)
            QUALIFY dense_rank() OVER (PARTITION BY t.search_job_id ORDER BY r.measured_at DESC, r.run_id DESC) = 1
            ORDER BY t.strategy, t.trial_order""").df()
        best = con.execute("""
            SELECT tr.placement, tr.strategy, tr.micro_batch, tr.grad_accum, tr.outcome, tr.tokens_per_s, tr.ci95_low_tokens_per_s,
                   tr.ci95_high_tokens_per_s, tr.repeats, tr.run_id
            FROM training_runs tr JOIN runs r USING (run_id) WHERE tr.placement LIKE '%@best_microbatch'
            QUALIFY row_number() OVER (PARTITION BY tr.placement, tr.strategy ORDER BY r.measured_at DESC, r.run_id DESC) = 1
            ORDER BY tr.placement, tr.strategy""").df()
        steps = con.execute("SELECT run_id, step, loss FROM training_steps WHERE run_id IN (SELECT unnest(?))",
                            [list(best["run_id"])]).df()
    print("micro-batch search trials (each at the accumulation to the global batch):")
    for rec in trials.to_dict("records"):
        peak, budget = rec["tracked_peak_bytes"], rec["memory_budget_bytes"]
        print(f"  {rec['strategy']:<6} mb {rec['micro_batch']:>2} x accum {rec['grad_accum']:>2} (global {rec['global_batch']}):"
              f" {rec['outcome']:<11} tracked peak {peak / 2**20:6.2f} MiB of {budget / 2**20:.2f} MiB"
              + (f", {rec['tokens_per_s']:.0f} tokens/s" if rec["tokens_per_s"] == rec["tokens_per_s"] and rec["tokens_per_s"] else "")
              + ("  <- best" if rec["is_best"] else ""))
    ddp = dict(zip(best.loc[best["strategy"] == "ddp", "placement"], best.loc[best["strategy"] == "ddp", "tokens_per_s"]))
    print("each strategy at its own best micro-batch (rule train_best), per fabric condition (placement):")
    for rec in best.to_dict("records"):
        base = ddp.get(rec["placement"])
        ratio = f", {rec['tokens_per_s'] / base:.2f}x DDP's best" if base and rec["tokens_per_s"] else ""
        print(f"  {rec['placement']:<32} {rec['strategy']:<6} mb {rec['micro_batch']:>2} x accum {int(rec['grad_accum'] or 1):>2}: {rec['outcome']:<11}"
              f" {rec['tokens_per_s'] or 0:8.0f} tokens/s (95% CI {rec['ci95_low_tokens_per_s'] or 0:.0f}.."
              f"{rec['ci95_high_tokens_per_s'] or 0:.0f}, {rec['repeats']} repeats){ratio}")
    spreads = []
    for placement, runs in best.groupby("placement"):  # one sizing per condition: compare losses within it
        losses = steps[steps["run_id"].isin(runs["run_id"])].pivot(index="step", columns="run_id", values="loss")
        if losses.shape[1] > 1:
            spreads.append(float((losses.max(axis=1) - losses.min(axis=1)).max()))
    spread = max(spreads) if spreads else float("nan")
    print(f"largest per-step loss difference between the best runs of one condition (equal global batch): {spread:.2e}")
    bests = dict(zip(trials.loc[trials["is_best"], "strategy"], trials.loc[trials["is_best"], "micro_batch"]))
    print(f"best micro-batch per strategy: {bests}")
    return {"trials": trials, "best": best, "loss_spread": spread, "bests": bests}


def main() -> int:
    """Run (optionally) and report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="run the pipeline with the search into this folder first")
    parser.add_argument("--db", type=Path, help="report from this database (default: the run's)")
    parser.add_argument("--strategies", nargs="+", default=["ddp", "fsdp"])
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--budget-mib", type=float, default=21.0)
    parser.add_argument("--emulated", nargs="+", metavar="PRESET",
                        help="also turn the emulated fabrics on with these presets (e.g. fast pcie_like; needs root, ip, "
                             "tc): each condition's jobs then run at their strategy's best micro-batch too")
    args = parser.parse_args()
    if not args.run and not args.db:
        parser.error("give --run DIR (run the pipeline, then report) or --db FILE (report only)")
    if args.run:
        run_pipeline(args.run, override(args.run.resolve(), args.strategies, args.limit, args.budget_mib, args.emulated))
    report(args.db or args.run.resolve() / "shardscope.duckdb")
    return 0


if __name__ == "__main__":
    sys.exit(main())
