"""The step model after calibration on one pipeline run: modeled against measured step time of each strategy.

    .venv/bin/python benchmarks/step_calibration.py --db results/shardscope.duckdb

Fits the step model's compute rate, overlap and per-call host overhead to the database's measured
training runs (collectives timed by alpha-beta fits of its measured sweeps, bytes as each run
recorded them; :mod:`shardscope.costmodel.step_calibration`), then prints per strategy the measured,
modeled and held-out step times and the ranking agreement. Exit status 1 when a strategy's
in-sample error exceeds 20% (issue 19's CPU target), 2 when nothing can be calibrated.
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
    print(format_calibrations(found, notes))
    if not found:
        return 2
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
