"""The step model after calibration on one pipeline run: modeled against measured step time of each strategy.

    .venv/bin/python benchmarks/step_calibration.py --db results/shardscope.duckdb

Fits the step model's compute rate, overlap, per-collective-call host overhead and host seconds per
recorded Python call (``training_runs.host_calls_per_step``: the frameworks' hooks and dispatch)
to the database's measured training runs (collectives timed by alpha-beta fits of its measured
sweeps, bytes as each run recorded them; :mod:`shardscope.costmodel.step_calibration`), then prints
per strategy the measured, modeled and held-out (leave-one-out) step times, the recorded Python
calls, the fitted coefficients and the ranking agreement; then the same fit without the host term
(what it changes). Exit status 1 when a strategy's in-sample error exceeds 20% (issue 19's CPU
target), 2 when nothing can be calibrated.
"""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    """Print the calibrations; 0 when every strategy is within 20%."""
    from shardscope.costmodel.step_calibration import calibrate_steps, format_calibrations
    from shardscope.results.store import connect_readonly

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="a results database with measured training runs and sweeps")
    args = parser.parse_args()
    with connect_readonly(args.db) as con:
        found, notes = calibrate_steps(con)
        without, _ = calibrate_steps(con, host_calls=False)
    print(format_calibrations(found, notes))
    if not found:
        return 2
    if not any(s.get("host_calls") for c in found for s in c.strategies):
        print("\nnote: no run in this database recorded host_calls_per_step (older runs): no host term was fitted")
    for c, w in zip(found, without):
        held = [abs(s["held_out_s"] / s["measured_s"] - 1) for s in c.strategies]
        print(f"\n{c.model} on {c.world_size} ranks: held out (each strategy predicted from a fit on the others): "
              f"{sum(e <= 0.20 for e in held)} of {len(held)} within 20%, median {sorted(held)[len(held) // 2]:.1%}, "
              f"worst {max(held):.1%}")
        print(f"  without the host term (fit on rate, overlap, per-collective-call overhead only): worst {w.worst_error:.1%}, "
              f"held out worst {w.held_out_worst_error:.1%}; per strategy "
              + ", ".join(f"{s['strategy']} {s['modeled_s'] / s['measured_s'] - 1:+.1%}" for s in w.strategies))
    worst = max(c.worst_error for c in found)
    rows = [s for c in found for s in c.strategies]
    within = sum(abs(s["modeled_s"] / s["measured_s"] - 1) <= 0.20 for s in rows)
    with_ci = [s for s in rows if s.get("measured_ci95_s")]
    inside = sum(s["measured_ci95_s"][0] <= s["modeled_s"] <= s["measured_ci95_s"][1] for s in with_ci)
    noisy = sum((s["measured_ci95_s"][1] - s["measured_ci95_s"][0]) / 2 / s["measured_s"] > 0.20 for s in with_ci)
    print(f"\n{within} of {len(rows)} strategies within 20%; modeled inside the run's own 95% CI for {inside} of "
          f"{len(with_ci)}; {noisy} of {len(with_ci)} runs measured with a CI half-width above 20%")
    print(f"worst in-sample |error| {worst:.1%} (target 20%)")
    return 0 if worst <= 0.20 else 1


if __name__ == "__main__":
    sys.exit(main())
