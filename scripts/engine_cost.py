"""engine_cost.py: the CPU time the real engines' schedulers spend per scheduling round.

feather's C++ selectors are 50-100x faster than the Python schedulers of vLLM and SGLang, so
`scheduler_time: measured` does not charge a baseline what its real engine would spend. This
script measures the real code on this machine's CPU, without a model or GPU, and fits a cost
table that `scheduler_time: engine` (sim/serving/engine_cost.h) evaluates per round:

- ``vllm``: ``vllm.v1.core.sched.scheduler.Scheduler.schedule()`` of the pinned vLLM, built by
  scripts/vllm-conformance's harness pattern (python/feather/vllm/conformance.py: a real
  Scheduler, KVCacheManager and block pool on the CPU). Each observation is one schedule() call
  of a run that admits W waiting requests of P prompt tokens (G prefix groups) and decodes them
  to completion; its inputs are the running requests it continues, the requests it admits and
  their prompt blocks, and the waiting count.
- ``sglang-lpm`` / ``sglang-dfs-weight``: ``SchedulePolicy.calc_priority`` of the pinned SGLang
  with its real ``RadixCache`` (``create_simulated``, CPU tensors) and real ``Req`` objects:
  W waiting requests of P prompt tokens in G groups, against a tree that also holds H unrelated
  cached sequences (the server's history: DFS-weight walks the whole tree). LPM's switch to
  FCFS above 128 waiting requests is turned off, as the paper did.

Subcommands (each measurement runs in its engine's virtual environment; scripts/engine-cost.sh
runs all of it):

  engine_cost.py measure-vllm   OUT.jsonl [--quick]
  engine_cost.py measure-sglang OUT.jsonl [--quick]
  engine_cost.py fit OUT.yaml ROWS.jsonl... [--copy-from TABLE.yaml]
                                # least squares, held-out grid points, YAML table
  engine_cost.py check-sglang TABLE.yaml W P G # one point measured against the table
  engine_cost.py what-if TABLE.yaml WHEEL OUT.yaml  # an older SGLang's per-token match added

Times are ``time.thread_time_ns()`` deltas (CPU time of the calling thread; both schedulers are
single-threaded Python) with the garbage collector paused around each timed call, as it would
be a separate cost the engine pays at an unpredictable point.
"""

from __future__ import annotations

import argparse
from array import array
import gc
import json
import os
import platform
import random
import sys
import time
from typing import Any

# ---------------------------------------------------------------------------------------------
# Shared helpers


def _prompts(w: int, p: int, groups: int, rng: random.Random, vocab: int = 30000,
             unique_tokens: int = 64) -> list[list[int]]:
    """W prompts of P tokens: G groups share a (P - unique) prefix, each has its own tail."""
    unique = min(unique_tokens, p)
    heads = [[rng.randrange(3, vocab) for _ in range(p - unique)] for _ in range(groups)]
    return [heads[i % groups] + [rng.randrange(3, vocab) for _ in range(unique)]
            for i in range(w)]


def _timed(fn):
    gc.disable()
    start = time.thread_time_ns()
    result = fn()
    ns = time.thread_time_ns() - start
    gc.enable()
    return result, ns


def _machine() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"host": platform.node(), "cpu_model": cpu, "python": platform.python_version(),
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


# ---------------------------------------------------------------------------------------------
# vLLM: Scheduler.schedule()


def _vllm_grid(quick: bool) -> list[tuple[int, int, int]]:
    if quick:
        return [(w, p, g) for w in (16, 64) for p in (256, 2048) for g in (1, 4)]
    return [(w, p, g) for w in (16, 64, 256, 1024) for p in (256, 1024, 4096, 10240)
            for g in (1, 8)]


def measure_vllm(out: str, quick: bool) -> None:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "python", "feather", "vllm"))
    import conformance as harness  # noqa: E402  (the conformance harness, without feather's ext)
    import vllm

    rng = random.Random(1)
    output_tokens = 16
    rows = []
    for w, p, g in _vllm_grid(quick):
        serving = {"block_tokens": 16, "max_num_seqs": 500, "max_num_batched_tokens": 32768,
                   "chunked_prefill": True, "prefix_caching": True,
                   # Enough blocks for every request at once: cost without preemption.
                   "kv_cache_blocks": (w * (p + output_tokens)) // 16 + w + 64}
        scheduler = harness.vllm_scheduler(serving, max_model_len=p + output_tokens + 16)
        prompts = _prompts(w, p, g, rng)
        block = 16
        for i, prompt in enumerate(prompts):
            scheduler.add_request(harness.make_vllm_request(i, prompt, output_tokens, block))
        prompt_blocks = {str(i): len(prompt) // block for i, prompt in enumerate(prompts)}
        calls = 0
        while scheduler.has_requests() and calls < 300:
            running_before = len(scheduler.running)
            waiting_before = len(scheduler.waiting)
            output, ns = _timed(scheduler.schedule)
            new = output.scheduled_new_reqs
            admitted = len(new)
            admitted_blocks = sum(prompt_blocks[r.req_id] for r in new)
            rows.append({"engine": "vllm", "op": "schedule", "grid": [w, p, g], "ns": ns,
                         "running": running_before, "waiting": waiting_before,
                         "admitted": admitted, "admitted_blocks": admitted_blocks,
                         "tokens": output.total_num_scheduled_tokens})
            scheduler.update_from_output(output, harness.model_runner_output(scheduler, output))
            calls += 1
        print(f"vllm W={w} P={p} G={g}: {calls} schedule() calls", file=sys.stderr)
    _write_rows(out, rows, {"engine": "vllm", "version": vllm.__version__, **_machine()})


# ---------------------------------------------------------------------------------------------
# SGLang: SchedulePolicy.calc_priority with its RadixCache


def _sglang_grid(quick: bool) -> list[tuple[int, int, int, int]]:
    if quick:
        return [(w, p, g, h) for w in (16, 64) for p in (256, 2048) for g in (1, 4)
                for h in (0, 256)]
    return [(w, p, g, h) for w in (16, 64, 256, 1024) for p in (256, 2048, 10240)
            for g in (1, 8) for h in (0, 2048)]


def _sglang_env():
    """Imports SGLang's policy and cache on the CPU and sets the server args they read.

    Returns (sglang, schedule_policy, Req, SamplingParams, new_tree, new_policy, ids):
    new_tree(seqs) is a simulated RadixCache holding seqs, new_policy(name, tree) a
    SchedulePolicy with LPM's FCFS fallback off, ids(seq) token ids as that release passes them.
    Two API generations: 0.5.23 (InsertParams, array token ids, the fallback a module constant)
    and 0.5.6 (insert(key, value), list token ids, the fallback a literal 128 in
    _determine_active_policy, replaced on the instance: the one change the paper made).
    """
    os.environ.setdefault("SGLANG_DISABLE_REQUEST_LOGGING", "1")
    import torch
    import sglang
    from sglang.srt.managers import schedule_policy
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey
    from sglang.srt.sampling.sampling_params import SamplingParams

    try:
        from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    except ImportError:  # 0.5.6 and older
        InsertParams = None

    literal_fallback = not hasattr(schedule_policy, "WAITING_QUEUE_PREFIX_MATCH_MAX")

    def ids(seq):
        return array("q", seq) if InsertParams else list(seq)

    def new_tree(seqs):
        tree = RadixCache.create_simulated()
        for seq in seqs:
            key, value = RadixKey(token_ids=ids(seq)), torch.arange(len(seq), dtype=torch.int64)
            if InsertParams:
                tree.insert(InsertParams(key=key, value=value))
            else:
                tree.insert(key, value)
        return tree

    def new_policy(name, tree):
        sched = schedule_policy.SchedulePolicy(name, tree, False, False, False)
        if literal_fallback:
            sched._determine_active_policy = lambda queue: sched.policy
        return sched

    # The paper turned LPM's FCFS fallback above 128 waiting requests off.
    schedule_policy.WAITING_QUEUE_PREFIX_MATCH_MAX = 1 << 30
    return sglang, schedule_policy, Req, SamplingParams, new_tree, new_policy, ids


def measure_sglang(out: str, quick: bool) -> None:
    sglang, _, Req, SamplingParams, new_tree, new_policy, ids = _sglang_env()
    rng = random.Random(2)
    rows = []
    for policy in ("lpm", "dfs-weight"):
        for w, p, g, h in _sglang_grid(quick):
            prompts = _prompts(w, p, g, rng)
            # What the engine has cached: each group's prefix once (the first request of each
            # group ran), plus H unrelated sequences of P/4 tokens (history).
            cached = [prompts[i] for i in range(min(g, w))]
            cached += [[rng.randrange(3, 30000) for _ in range(max(16, p // 4))]
                       for _ in range(h)]
            tree = new_tree(cached)
            nodes = _count_nodes(tree.root_node)
            sched = new_policy(policy, tree)
            reps = 5 if w <= 256 else 2
            for rep in range(reps):
                queue = [Req(rid=f"r{rep}-{i}", origin_input_text="", origin_input_ids=ids(prompt),
                             sampling_params=SamplingParams(max_new_tokens=16))
                         for i, prompt in enumerate(prompts)]
                _, ns = _timed(lambda: sched.calc_priority(queue))
                rows.append({"engine": "sglang", "op": policy, "grid": [w, p, g, h], "ns": ns,
                             "waiting": w, "waiting_tokens": w * p, "tree_nodes": nodes,
                             "rep": rep})
            print(f"sglang {policy} W={w} P={p} G={g} H={h}: nodes {nodes}, "
                  f"{rows[-1]['ns'] / 1e6:.2f} ms", file=sys.stderr)
    _write_rows(out, rows, {"engine": "sglang", "version": sglang.__version__, **_machine()})


def check_sglang(table: str, w: int, p: int, g: int) -> None:
    """calc_priority measured at one point (outside the grid, say) against TABLE's prediction."""
    import re

    sglang, _, Req, SamplingParams, new_tree, new_policy, ids = _sglang_env()
    text = open(table).read()

    def term(op: str, name: str) -> float:
        block = text.split(f"  {op}:")[1].split("\n  sglang_")[0]
        found = re.search(rf"{name}: {{value: ([0-9.e+-]+)", block)
        return float(found.group(1)) if found else 0.0

    prompts = _prompts(w, p, g, random.Random(5), unique_tokens=100)
    for policy, op in (("lpm", "sglang_lpm"), ("dfs-weight", "sglang_dfs_weight")):
        tree = new_tree(prompts[:g])
        nodes = _count_nodes(tree.root_node)
        sched = new_policy(policy, tree)
        times = []
        for rep in range(3):
            queue = [Req(rid=f"r{rep}-{i}", origin_input_text="",
                         origin_input_ids=ids(prompt),
                         sampling_params=SamplingParams(max_new_tokens=16))
                     for i, prompt in enumerate(prompts)]
            times.append(_timed(lambda: sched.calc_priority(queue))[1])
        predicted = (term(op, "constant_ns") + term(op, "per_waiting_ns") * w +
                     term(op, "per_waiting_token_ns") * w * p + term(op, "per_tree_node_ns") * nodes)
        measured = sorted(times)[1]
        print(f"sglang {sglang.__version__} {policy}: W={w} P={p} G={g} ({nodes} nodes): measured {measured / 1e6:.1f} ms, "
              f"table {predicted / 1e6:.1f} ms ({predicted / measured - 1:+.1%})")


def _count_nodes(root) -> int:
    count, stack = 0, [root]
    while stack:
        node = stack.pop()
        count += 1
        stack.extend(node.children.values())
    return count


def _write_rows(out: str, rows: list[dict[str, Any]], header: dict[str, Any]) -> None:
    with open(out, "w") as f:
        f.write(json.dumps({"header": header}) + "\n")
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(f"wrote {len(rows)} observations to {out}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# What if: an older SGLang's radix match


def old_match(wheel: str) -> float:
    """ns per token of an SGLang wheel's token-by-token radix match (_key_match_page_size1).

    Releases up to at least 0.5.6 compare keys one token at a time in a Python loop; 0.5.23
    gallops with slice compares. Only the function is timed (an old release does not import on
    the CPU next to the pinned torch): it is one term of calc_priority, not the whole call.
    """
    import ast
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        source = z.read("sglang/srt/mem_cache/radix_cache.py").decode()
    fn = next(n for n in ast.parse(source).body
              if isinstance(n, ast.FunctionDef) and n.name == "_key_match_page_size1")
    fn.body = [stmt for stmt in fn.body  # 0.5.x checks the keys' extra_key first: not timed
               if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call))]
    scope: dict[str, Any] = {}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), wheel, "exec"), {"List": list}, scope)
    match = scope["_key_match_page_size1"]

    class Key(list):  # 0.5.x passes RadixKey objects with .token_ids
        @property
        def token_ids(self):
            return self

    rng = random.Random(3)
    tokens = Key(rng.randrange(3, 30000) for _ in range(10000))
    other = Key(tokens)
    times = sorted(_timed(lambda: match(tokens, other))[1] for _ in range(31))
    return times[15] / len(tokens)


def what_if(table: str, ns_per_token: float, wheel: str, out: str) -> None:
    """TABLE with the old match loop's per-token cost added to both SGLang operations."""
    lines = open(table).read().splitlines()
    result, op = [], ""
    for line in lines:
        stripped = line.strip()
        if line.startswith("  ") and not line.startswith("    ") and stripped.endswith(":"):
            op = stripped[:-1]
        if op.startswith("sglang_") and stripped.startswith("per_waiting_token_ns:"):
            value = float(stripped.split("value:")[1].split(",")[0])
            indent = line[:len(line) - len(line.lstrip())]
            note = (f"what if: {value:.4g} ns measured on the pinned SGLang plus "
                    f"{ns_per_token:.4g} ns, the token-by-token match loop of "
                    f"{os.path.basename(wheel)} timed alone on this machine")
            line = (f"{indent}per_waiting_token_ns: {{value: {value + ns_per_token:.6g}, "
                    f"source: assumed, note: {json.dumps(note)}}}")
        result.append(line)
    header = [f"# WHAT IF, not a measurement of a whole engine: {os.path.basename(table)} with",
              "# SGLang's radix match as older releases did it (one Python loop iteration per",
              "# token), added per waiting prompt token. Written by engine_cost.py what-if."]
    with open(out, "w") as f:
        f.write("\n".join(header + result) + "\n")
    print(f"{wheel}: {ns_per_token:.1f} ns per token; wrote {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("measure-vllm", "measure-sglang"):
        p = sub.add_parser(name)
        p.add_argument("out")
        p.add_argument("--quick", action="store_true", help="a small grid (tests, smoke runs)")
    p = sub.add_parser("what-if", help="a table with an older SGLang's per-token match cost")
    p.add_argument("table")
    p.add_argument("wheel", help="an SGLang wheel (pip download --no-deps sglang==0.4.6)")
    p.add_argument("out")
    p = sub.add_parser("check-sglang", help="one point measured against a table's prediction")
    p.add_argument("table")
    p.add_argument("waiting", type=int)
    p.add_argument("prompt_tokens", type=int)
    p.add_argument("groups", type=int)
    p = sub.add_parser("fit")
    p.add_argument("out")
    p.add_argument("rows", nargs="+")
    p.add_argument("--copy-from", metavar="TABLE",
                   help="copy the operations no row measures from TABLE (sources unchanged)")
    args = parser.parse_args(argv)
    if args.command == "measure-vllm":
        measure_vllm(args.out, args.quick)
    elif args.command == "measure-sglang":
        measure_sglang(args.out, args.quick)
    elif args.command == "check-sglang":
        check_sglang(args.table, args.waiting, args.prompt_tokens, args.groups)
    elif args.command == "what-if":
        what_if(args.table, old_match(args.wheel), args.wheel, args.out)
    else:
        from engine_cost_fit import fit_main
        return fit_main(args.out, args.rows, args.copy_from)
    return 0


if __name__ == "__main__":
    sys.exit(main())
