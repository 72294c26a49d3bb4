"""The cost model against the public validation set: one line per published measurement.

    .venv/bin/python benchmarks/validation.py

Reads tests/data/published/collectives.json (every value with its source, see its SOURCES.md),
predicts each in-scope record with the cost model (the same code as tests/costmodel/test_validation.py)
and prints value, source, modeled, measured, ratio modeled/measured, the algorithm the model
has NCCL run and what bounds it, then the median and worst |error|. Exit status 1 when the
median exceeds 10% or the worst 25% (issue 19's targets).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from costmodel.published import published_records, record_prediction, validation_rows  # noqa: E402


def main() -> int:
    """Print the table and the summary; 0 when both targets are met."""
    rows = validation_rows()
    print(f"{'record':<45} {'op':<14} {'ranks':>5} {'nodes':>5} {'modeled':>8} {'measured':>8} {'ratio':>6}  "
          f"{'algorithm/bound':<20} source")
    for row in rows:
        print(f"{row['id']:<45} {row['op']:<14} {row['ranks']:>5} {row['nodes']:>5} {row['modeled']:>8.2f} "
              f"{row['measured']:>8.2f} {row['ratio']:>6.2f}  {row['algorithm'] + '/' + row['bottleneck']:<20} {row['source']}")
    errors = [abs(row["ratio"] - 1) for row in rows]
    worst = max(rows, key=lambda row: abs(row["ratio"] - 1))
    median = statistics.median(errors)
    print(f"\n{len(rows)} values: median |error| {median:.1%} (target 10%), worst {abs(worst['ratio'] - 1):.1%} "
          f"({worst['id']}; target 25%)")
    for row in rows:
        if row["known_miss"]:
            print(f"known miss {row['id']}: {row['known_miss']}")
    print("\nout of scope (not in the median/worst; modeled where the record names a topology):")
    for record in published_records():
        if record["in_scope"]:
            continue
        modeled = record_prediction(record) if record.get("topology") else None
        shown = f"modeled {modeled:.2f}, ratio {modeled / record['busbw_gbps']:.2f}" if modeled else "not modeled"
        print(f"  {record['id']}: measured {record['busbw_gbps']:.2f}, {shown}; {record['reason_out_of_scope']}")
    return 0 if median <= 0.10 and abs(worst["ratio"] - 1) <= 0.25 else 1


if __name__ == "__main__":
    sys.exit(main())
