#!/usr/bin/env python3
"""seed-table.py: the seed check of README.md from `feather sweep` tables.

  seed-table.py TABLE[+CONVERGE] ...   (each the table.csv of one seed's sweep)

TABLE holds the non-Feather schedulers and cht+converge; with +CONVERGE, converge's row comes
from that table instead (a sweep of converge alone, e.g. from another binary). Prints a Markdown
table: per scenario, converge as x FCFS / x the best non-Feather scheduler (its name), one
column per argument; bold where below the issue's bars
(0.98x FCFS everywhere, 0.95x the best other where prefixes are shared); then the misses per
table. Standard library only.
"""
import csv
import sys


def load(path):
    table = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            table.setdefault(row["name"], {})[row["scheduler"]] = row
    return table


def main(paths):
    if not paths:
        sys.exit(__doc__)
    tables = []
    for p in paths:
        table = load(p.split("+")[0])
        if "+" in p:
            for name, runs in load(p.split("+")[1]).items():
                table[name]["cht+converge"] = runs["cht+converge"]
        tables.append(table)
    print("| scenario | " + " | ".join(f"`{p}`" for p in paths) + " |")
    print("| --- |" + " --- |" * len(paths))
    misses = [0] * len(paths)
    for name in tables[0]:
        cells = []
        for i, table in enumerate(tables):
            runs = table[name]
            tps = {k: float(v["throughput_tok_s"]) for k, v in runs.items()}
            others = {k: v for k, v in tps.items() if not k.startswith("cht+")}
            best = max(others, key=others.get)
            fcfs, mine = tps["fcfs+always"], tps["cht+converge"]
            bad = mine < 0.98 * fcfs or (name != "no-sharing" and mine < 0.95 * others[best])
            misses[i] += bad
            text = f"{mine / fcfs:.2f} / {mine / others[best]:.2f} ({best.split('+')[0]})"
            cells.append(f"**{text}**" if bad else text)
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()
    print("misses: " + ", ".join(f"{p}: {m}" for p, m in zip(paths, misses)))


if __name__ == "__main__":
    main(sys.argv[1:])
