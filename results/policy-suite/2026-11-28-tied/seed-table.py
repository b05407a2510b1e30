#!/usr/bin/env python3
"""seed-table.py: the seed comparison of README.md from `feather sweep` outputs.

  seed-table.py [--seeds 1,2,3] OTHERS LABEL=POLICY [LABEL=POLICY ...]
OTHERS and each POLICY a folder pattern with {seed} (e.g. out/seeds/others-{seed}). Prints a
Markdown table: per scenario and seed, FCFS, the best non-Feather scheduler, and each policy
folder's one scheduler as x FCFS / x best other (mean batch); bold where below 0.98x FCFS or
0.95x the best other (the issue's bars).
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
    args = argv[1:]
    seeds = [1, 2, 3]
    if len(args) >= 2 and args[0] == "--seeds":
        seeds = [int(s) for s in args[1].split(",")]
        args = args[2:]
    if len(args) < 2 or any("=" not in a for a in args[1:]):
        sys.exit(__doc__)
    others = args[0]
    policies = [a.split("=", 1) for a in args[1:]]
    runs = {s: (load(others.format(seed=s)), [load(p.format(seed=s)) for _, p in policies])
            for s in seeds}
    print("| scenario | seed | FCFS tok/s | best other (tok/s) | "
          + " | ".join(label for label, _ in policies) + " |")
    print("| --- | ---: | ---: | --- |" + " --- |" * len(policies))
    names = [n for n in runs[seeds[0]][1][0]
             if all(n in o and all(n in t for t in ts) for o, ts in runs.values())]
    for name in names:
        for s in seeds:
            o, tables = runs[s]
            fcfs = float(o[name]["fcfs+always"]["throughput_tok_s"])
            best = max(o[name].values(), key=lambda r: float(r["throughput_tok_s"]))
            best_tps = float(best["throughput_tok_s"])
            cells = []
            for table in tables:
                row = next(iter(table[name].values()))
                t = float(row["throughput_tok_s"])
                text = f"{t / fcfs:.2f} / {t / best_tps:.2f} ({float(row['mean_batch_size']):.0f})"
                cells.append(f"**{text}**" if t < 0.98 * fcfs or t < 0.95 * best_tps else text)
            print(f"| {name} | {s} | {fcfs:.0f} | {best['scheduler']} ({best_tps:.0f}) | "
                  + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv)
