#!/usr/bin/env python3
"""trace-reuse.py: where a run's prefix reuse on the Mooncake trace could come from.

  trace-reuse.py TRACE.jsonl RESULTS.h5 ...   (a `feather run` / sweep point's results.h5)

For each request, in the order it started (first token), walks its leading hash_ids while some
earlier-started request holds the block, and counts each block as held by a request running at
that moment or only by requests that had already finished (whose KV the prefix cache may have
evicted). Prints the two totals and the run's cached prompt tokens. Needs h5py and numpy.
"""
import json
import sys

import h5py
import numpy as np


def main(trace_path, results):
    trace = [json.loads(line) for line in open(trace_path)]
    for path in results:
        with h5py.File(path) as f:
            r = f["requests"]
            start, finish = r["first_token_ns"][:], r["finish_ns"][:]
            cached = int(r["cached_tokens"][:].sum())
        holders = {}  # block id -> requests holding it, started so far
        by_running = by_finished = 0
        for i in np.argsort(start, kind="stable"):
            t = start[i]
            for block in trace[i]["hash_ids"]:
                held = holders.get(block, [])
                if any(start[j] <= t < finish[j] for j in held):
                    by_running += 1
                elif any(finish[j] <= t for j in held):
                    by_finished += 1
                else:
                    break
            for block in trace[i]["hash_ids"]:
                holders.setdefault(block, []).append(i)
        print(f"{path}: leading reused blocks held by a running request {by_running}, "
              f"only by finished ones {by_finished}; cached prompt tokens {cached / 1e6:.1f} M")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
