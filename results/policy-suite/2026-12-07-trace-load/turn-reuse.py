#!/usr/bin/env python3
"""turn-reuse.py: where each conversation turn's prefix reuse went, per run of the Mooncake trace.

  turn-reuse.py TRACE.jsonl SWEEP_DIR > turn-reuse.csv   (a `feather sweep` output folder)

A request's predecessor is the latest earlier request of the trace that shares the longest
leading run of its hash_ids, at least two blocks (every request of the trace shares block 0, a
512-token system prompt, so one block says nothing about a conversation). When the request
started (its first token), its predecessor had not started yet, was running, or had finished.
Per run and class: how many requests, their median wait (first token - arrival, s), and the
prompt tokens they could have reused from the predecessor (shared blocks x 512, capped by the
prompt) but did not find cached ("missed", M tokens). Needs h5py and numpy.
"""
import csv
import glob
import json
import os
import sys

import h5py
import numpy as np

BLOCK_TOKENS = 512  # the trace's hash block (../shared/traces/README.md)
CLASSES = ("pred-not-started", "pred-running", "pred-finished")


def predecessors(trace):
    last = {}  # leading hash run (as a tuple) -> latest request holding it
    pred, shared = [], []
    for r in trace:
        h = r["hash_ids"]
        p, s = -1, 0
        for n in range(len(h), 1, -1):
            if tuple(h[:n]) in last:
                p, s = last[tuple(h[:n])], n
                break
        pred.append(p)
        shared.append(s)
        for n in range(2, len(h) + 1):
            last[tuple(h[:n])] = len(pred) - 1
    return pred, shared


def main(trace_path, sweep_dir):
    trace = [json.loads(line) for line in open(trace_path)]
    pred, shared = predecessors(trace)
    prompt = np.array([r["input_length"] for r in trace], dtype=np.int64)
    rows = {r["point"]: r for r in csv.DictReader(open(os.path.join(sweep_dir, "table.csv")))}
    out = csv.writer(sys.stdout)
    out.writerow(["point", "scheduler", "throughput_tok_s", "mean_ttft_s", "cached_prompt_mtok",
                  "class", "requests", "median_wait_s", "missed_mtok"])
    for path in sorted(glob.glob(os.path.join(sweep_dir, "points", "*", "results.h5"))):
        point = os.path.basename(os.path.dirname(path))
        row = rows[point]
        with h5py.File(path) as f:
            r = f["requests"]
            start = r["first_token_ns"][:].astype(np.int64)
            finish = r["finish_ns"][:].astype(np.int64)
            arrival = r["arrival_ns"][:].astype(np.int64)
            cached = r["cached_tokens"][:].astype(np.int64)
        for c in CLASSES:
            members = []
            for i, p in enumerate(pred):
                if p < 0:
                    continue
                k = ("pred-not-started" if start[p] > start[i] else
                     "pred-running" if finish[p] > start[i] else "pred-finished")
                if k == c:
                    members.append(i)
            m = np.array(members, dtype=np.int64)
            could = np.minimum(np.array(shared, dtype=np.int64)[m] * BLOCK_TOKENS, prompt[m])
            missed = np.maximum(could - cached[m], 0).sum() if len(m) else 0
            wait = np.median((start[m] - arrival[m]) / 1e9) if len(m) else 0.0
            out.writerow([row["name"], row["scheduler"], f"{float(row['throughput_tok_s']):.2f}",
                          f"{float(row['mean_ttft_ms']) / 1e3:.1f}",
                          f"{float(row['cached_prompt_tokens']) / 1e6:.2f}", c, len(m),
                          f"{wait:.1f}", f"{missed / 1e6:.2f}"])


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
