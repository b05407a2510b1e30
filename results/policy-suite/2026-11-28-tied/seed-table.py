#!/usr/bin/env python3
"""seed-table.py: the seed comparison of README.md from `feather sweep` outputs.

  seed-table.py OTHERS BEFORE AFTER [SEED ...]
each a folder pattern with {seed} (e.g. out/seeds/others-{seed}); default seeds 1 2 3. Prints a
Markdown table: per scenario and seed, FCFS, the best non-Feather scheduler, and converge
before/after as x FCFS / x best other (mean batch); bold where below 0.98x FCFS or 0.95x best.
"""
import csv
import sys


def load(folder):
    table = {}
    with open(f"{folder}/table.csv", newline="") as f:
        for row in csv.DictReader(f):
            table.setdefault(row["name"], {})[row["scheduler"]] = row
    return table


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    others, before, after = argv[1:4]
    seeds = [int(s) for s in argv[4:]] or [1, 2, 3]
    print("| scenario | seed | FCFS tok/s | best other (tok/s) | converge before | converge after |")
    print("| --- | ---: | ---: | --- | --- | --- |")
    runs = {s: (load(others.format(seed=s)), load(before.format(seed=s)),
                load(after.format(seed=s))) for s in seeds}
    names = [n for n in runs[seeds[0]][2] if all(n in t for r in runs.values() for t in r)]
    for name in names:
        for s in seeds:
            o, b, a = runs[s]
            fcfs = float(o[name]["fcfs+always"]["throughput_tok_s"])
            best = max(o[name].values(), key=lambda r: float(r["throughput_tok_s"]))
            best_tps = float(best["throughput_tok_s"])

            def cell(row):
                t = float(row["throughput_tok_s"])
                text = f"{t / fcfs:.2f} / {t / best_tps:.2f} ({float(row['mean_batch_size']):.0f})"
                return f"**{text}**" if t < 0.98 * fcfs or t < 0.95 * best_tps else text

            print(f"| {name} | {s} | {fcfs:.0f} | {best['scheduler']} ({best_tps:.0f}) | "
                  f"{cell(next(iter(b[name].values())))} | {cell(next(iter(a[name].values())))} |")


if __name__ == "__main__":
    main(sys.argv)
