#!/usr/bin/env python3
"""same_plan_shapes.py: which step shapes carry the same-plan error, with the machine's common
speed factor taken out (issue 20, item 3).

  scripts/same_plan_shapes.py DIR/same-plan-rows.csv [MORE.csv ...]

Reads the rows `feather validate` writes (calib/rows_csv.h format: each real step's shape, its
measured terms and total, and the profile's predicted total). On a shared VM a busy neighbour
slows every step alike, so the plain step MAPE measures the load as much as the model. Here
r = measured / predicted per step; k = the median r (the common factor: 1 on the calibrating
machine in the calibrating state); the scale-free error of a step is r / k - 1. Printed: k, the
plain MAPE, the scale-free MAPE (what is left once the common factor is out: shape errors plus
step-to-step noise), and per kind of step (decode / prefill / mixed, cascade or not) and bin of
new tokens n, the steps, their median r / k - 1 (the shape's own bias) and scale-free MAPE.
Standard library only.
"""
import csv
import statistics
import sys
from collections import defaultdict


def kind_of(row):
    decode, prefill = float(row["decode_requests"]), float(row["prefill_requests"])
    kind = "decode" if prefill == 0 else "prefill" if decode == 0 else "mixed"
    return kind + ("+cascade" if float(row["cascade_prefix_tokens"]) > 0 else "")


def bin_of(n):
    """(sort key, name) of the power-of-two bin of n new tokens: n=1, n=2-3, ..., n>=2048."""
    low = 1
    while low * 2 <= n and low < 2048:
        low *= 2
    name = "n=1" if low == 1 else f"n>={low}" if low == 2048 else f"n={low}-{2 * low - 1}"
    return low, name


def outside_grid(row):
    """Shapes the CPU calibration grid (calib/cpu_calibration.cc) has no row like: prefill steps
    of more than 4 requests, mixed steps of more than 1 prefill request, and cascade steps that
    compute a prefill chunk (the grid's cascade rows are decode-only)."""
    decode, prefill = float(row["decode_requests"]), float(row["prefill_requests"])
    cascade = float(row["cascade_prefix_tokens"]) > 0
    return (decode == 0 and prefill > 4) or (decode > 0 and prefill > 1) or (cascade and prefill > 0)


def main(paths):
    for path in paths:
        rows = [r for r in csv.DictReader(open(path)) if float(r["measured_total_ns"]) > 0]
        ratios = [float(r["measured_total_ns"]) / float(r["predicted_total_ns"]) for r in rows]
        k = statistics.median(ratios)
        plain = statistics.fmean(abs(1 / r - 1) for r in ratios)  # |p - m| / m
        scaled = [r / k - 1 for r in ratios]
        print(f"{path}: {len(rows)} steps; common factor k = median(measured/predicted) = {k:.3f}")
        print(f"  plain step MAPE {plain:.3f}; scale-free MAPE "
              f"{statistics.fmean(abs(s) for s in scaled):.3f}")
        total = sum(float(r["measured_total_ns"]) for r in rows)
        outside = [(r, s) for r, s in zip(rows, scaled) if outside_grid(r)]
        if outside:
            time = sum(float(r["measured_total_ns"]) for r, _ in outside)
            print(f"  outside the calibration grid: {len(outside)} steps, {time / total:.1%} of the "
                  f"measured engine time, scale-free MAPE "
                  f"{statistics.fmean(abs(s) for _, s in outside):.3f}")
        groups = defaultdict(list)
        for row, s in zip(rows, scaled):
            groups[(kind_of(row),) + bin_of(float(row["new_tokens"]))].append(s)
        for (kind, _, name), values in sorted(groups.items()):
            print(f"  {kind:16s} {name:11s} steps {len(values):4d}  bias "
                  f"{statistics.median(values):+.3f}  scale-free MAPE "
                  f"{statistics.fmean(abs(v) for v in values):.3f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
