#!/usr/bin/env python3
"""compare_calibrations.py: how much slower or faster the machine ran the same calibration grid
the second time (issue 20, item 3).

  scripts/compare_calibrations.py FIRST-rows.csv SECOND-rows.csv

Reads two calibration row files (`feather calibrate --out P.yaml` writes P-rows.csv beside the
profile; calib/rows_csv.h format) and matches their steps by label: the grid is the same for the
same build and settings. Prints, per term and for the step total, the median, 10th and 90th
percentile of second / first over the steps that spent time in the term. A calibration taken
right after a validation, compared with the one before it, says whether the machine held its
speed in between (medians near 1) or not, which the short DRAM and GEMM-peak probes can miss
(results/validation/issue-20-drift/). Standard library only.
"""
import csv
import statistics
import sys

TERMS = ["gemm", "decode_attention", "cascade_prefix", "prefill_attention", "overhead", "total"]


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        first = {r["label"]: r for r in csv.DictReader(open(argv[1], newline=""))}
        second = list(csv.DictReader(open(argv[2], newline="")))
    except (OSError, KeyError) as error:
        print(f"compare_calibrations.py: {error}", file=sys.stderr)
        return 2
    matched = [(first[r["label"]], r) for r in second if r["label"] in first]
    print(f"{len(matched)} of {len(second)} steps matched by label")
    for term in TERMS:
        key = f"measured_{term}_ns"
        ratios = sorted(float(b[key]) / float(a[key]) for a, b in matched
                        if float(a[key]) > 0 and float(b[key]) > 0)
        if not ratios:
            continue
        p10 = ratios[len(ratios) // 10]
        p90 = ratios[len(ratios) * 9 // 10]
        print(f"{term:18s} steps {len(ratios):4d}  second / first: median {statistics.median(ratios):.3f}"
              f"  p10 {p10:.3f}  p90 {p90:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
