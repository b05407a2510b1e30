"""Step-by-step conformance of feather's vLLM model against vLLM's own Scheduler.

feather's serving loop (sim/serving/simulator.h) claims vLLM v1's rules: running requests first,
then waiting ones in queue order, chunked prefill within a token budget, prefix caching with
16-token blocks, preemption by recompute of the newest running request. This module checks the
claim against the real thing: it replays a scenario's workload through feather's simulator and
through vLLM's ``vllm.v1.core.sched.scheduler.Scheduler`` with its real ``KVCacheManager`` and
block pool, in lockstep, and compares every step:

- which requests are scheduled and how many tokens each (``num_scheduled_tokens``);
- each scheduled request's context (tokens already computed, so prefix-cache hits at admission,
  ``num_cached_tokens``);
- preempted requests (``preempted_req_ids``) and finished ones;
- the number of leading KV blocks every running request shares physically (vLLM's
  ``num_common_prefix_blocks``, the basis of its cascade-attention decision).

How the two are driven. Time is feather's: feather's simulator decides when a step starts (its
cost model prices every step); before vLLM schedules that step, every request whose arrival time
is at or before the step's start is added to vLLM (``Scheduler.add_request``). vLLM runs on the CPU
without a model, the way vLLM's own scheduler tests do: a ``ModelRunnerOutput`` samples one token
for every request whose scheduled tokens reach the end of its sequence (none for a partial
prefill chunk), and requests stop at their ``max_tokens`` (``ignore_eos``). Both sides use
FCFS order and admit every request the limits allow (feather: selector ``fcfs``, stop policy
``always``).

What is deliberately configured to match (each named in ``vllm_scheduler``):
- vLLM's block pool keeps block 0 as its null block, so vLLM gets ``kv_cache_blocks + 1`` blocks;
- ``max_model_len`` large enough for every prompt + output (it only caps tokens per step);
- ``scheduler_time: zero`` on feather's side, so step times are the cost model's alone.

vLLM 0.32 no longer has cascade attention (its ``num_common_prefix_blocks`` is always empty); the
count compared here is computed from vLLM's real block table and reference counts with the rule
vLLM used while it had cascade attention (leading blocks of the first running request whose
reference count equals the number of running requests).

Use ``scripts/vllm-conformance.sh`` (regenerates the golden files under tests/golden/vllm and
compares live), or ``python -m feather.vllm.conformance SCENARIO [--set k=v] [--steps N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # no GPU: vLLM's CPU platform
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

# A token id no prompt uses (synthetic prompts draw ids in [1, 2^31)); sampled for every output.
SAMPLED_TOKEN = 0


def _tiny_model_dir() -> str:
    """A Llama config.json for vLLM's ModelConfig (the scheduler reads lengths, not weights)."""
    import tempfile

    path = os.path.join(tempfile.gettempdir(), f"feather-vllm-tiny-llama-{os.getuid()}")
    os.makedirs(path, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "vocab_size": 32000,
        "max_position_embeddings": 1 << 20,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "float16",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    target = os.path.join(path, "config.json")
    text = json.dumps(config)
    if not os.path.exists(target) or open(target).read() != text:
        with open(target + ".tmp", "w") as f:
            f.write(text)
        os.replace(target + ".tmp", target)
    return path


def vllm_scheduler(serving: dict[str, Any], max_model_len: int, scheduler_cls: Any = None):
    """vLLM's real Scheduler configured like feather's serving section, on the CPU, no model."""
    import torch
    from vllm.config import (CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig,
                             VllmConfig)
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    block = int(serving["block_tokens"])
    scheduler_config = SchedulerConfig(
        max_num_seqs=int(serving["max_num_seqs"]),
        max_num_batched_tokens=int(serving["max_num_batched_tokens"]),
        max_model_len=max_model_len,
        enable_chunked_prefill=bool(serving["chunked_prefill"]),
        is_encoder_decoder=False,
    )
    model_config = ModelConfig(model=_tiny_model_dir(), dtype="float16", seed=0,
                               skip_tokenizer_init=True, max_model_len=max_model_len)
    cache_config = CacheConfig(block_size=block, gpu_memory_utilization=0.9,
                               cache_dtype="auto",
                               enable_prefix_caching=bool(serving["prefix_caching"]))
    config = VllmConfig(scheduler_config=scheduler_config, model_config=model_config,
                        cache_config=cache_config, device_config=DeviceConfig(device="cpu"))
    # vLLM's block pool takes block 0 as its null block: one more block gives the same capacity.
    num_blocks = int(serving["kv_cache_blocks"]) + 1
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], FullAttentionSpec(
            block_size=block, num_kv_heads=1, head_size=1, dtype=torch.float32))],
    )
    cache_config.num_gpu_blocks = num_blocks
    cls = scheduler_cls or Scheduler
    return cls(vllm_config=config, kv_cache_config=kv_cache_config,
               structured_output_manager=StructuredOutputManager(config), block_size=block,
               log_stats=False)


def make_vllm_request(request_id: int, prompt: list[int], max_tokens: int, block: int):
    """A vLLM Request with vLLM's own block hasher (chained hashes of 16-token blocks)."""
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    global _HASHER
    if _HASHER is None or _HASHER[0] != block:
        init_none_hash(sha256)
        _HASHER = (block, get_request_block_hasher(block, sha256))
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    return Request(request_id=str(request_id), prompt_token_ids=prompt, sampling_params=params,
                   pooling_params=None, block_hasher=_HASHER[1])


_HASHER: tuple[int, Any] | None = None


def common_prefix_blocks(scheduler) -> int:
    """vLLM's num_common_prefix_blocks by the rule it used while it had cascade attention."""
    if not scheduler.running:
        return 0
    manager = scheduler.kv_cache_manager.coordinator.single_type_managers[0]
    blocks = manager.req_to_blocks.get(scheduler.running[0].request_id, [])
    count = 0
    for b in blocks:
        if b.ref_cnt != len(scheduler.running):
            break
        count += 1
    return count


def model_runner_output(scheduler, output):
    """One sampled token per request whose scheduled tokens reach the end of its sequence."""
    from vllm.v1.outputs import ModelRunnerOutput

    req_ids = list(output.num_scheduled_tokens.keys())
    sampled = []
    for rid in req_ids:
        request = scheduler.requests[rid]
        # num_computed_tokens already counts this step's tokens (vLLM advances it in schedule()).
        sampled.append([SAMPLED_TOKEN] if request.num_computed_tokens >= request.num_tokens
                       else [])
    return ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
                             sampled_token_ids=sampled)


@dataclass
class Step:
    """One engine step as a scheduler formed it."""

    scheduled: list[tuple[int, int, int]]  # (id, context tokens, new tokens), in schedule order
    preempted: list[int] = field(default_factory=list)
    common_prefix_blocks: int = 0
    finished: list[int] = field(default_factory=list)

    def key(self) -> tuple:
        return (sorted(self.scheduled), sorted(self.preempted), self.common_prefix_blocks)


@dataclass
class Replay:
    name: str
    feather: list[Step]
    vllm: list[Step]
    first_difference: int | None
    differences: int
    detail: str = ""
    scheduler: Any = None  # vLLM's scheduler after the replay (the plugin's statistics)


def _feather_step(plan: dict[str, Any], block: int) -> Step:
    """A step as feather.Simulation.schedule() describes it."""
    return Step(scheduled=[(r[0], r[1], r[2]) for r in plan["requests"]],
                preempted=list(plan["preempted"]),
                common_prefix_blocks=plan["common_prefix_tokens"] // block)


def _vllm_step(scheduler, output, preempted: list[int]) -> Step:
    """A step as vLLM scheduled it (its requests already advanced by this step's tokens)."""
    scheduled = []
    for rid, n in output.num_scheduled_tokens.items():
        request = scheduler.requests[rid]
        scheduled.append((int(rid), request.num_computed_tokens - n, n))
    return Step(scheduled=scheduled, preempted=preempted,
                common_prefix_blocks=common_prefix_blocks(scheduler))


def describe_difference(a: Step, b: Step) -> str:
    fa, fb = {r[0]: r[1:] for r in a.scheduled}, {r[0]: r[1:] for r in b.scheduled}
    parts = []
    only_a = sorted(set(fa) - set(fb))
    only_b = sorted(set(fb) - set(fa))
    if only_a:
        parts.append(f"only feather schedules {only_a[:8]}{'...' if len(only_a) > 8 else ''}")
    if only_b:
        parts.append(f"only vLLM schedules {only_b[:8]}{'...' if len(only_b) > 8 else ''}")
    differing = [(i, fa[i], fb[i]) for i in sorted(set(fa) & set(fb)) if fa[i] != fb[i]]
    if differing:
        i, x, y = differing[0]
        parts.append(f"{len(differing)} requests differ in (context, new tokens), first {i}: "
                     f"feather {x}, vLLM {y}")
    if sorted(a.preempted) != sorted(b.preempted):
        parts.append(f"preempted: feather {a.preempted}, vLLM {b.preempted}")
    if a.common_prefix_blocks != b.common_prefix_blocks:
        parts.append(f"common prefix blocks: feather {a.common_prefix_blocks}, "
                     f"vLLM {b.common_prefix_blocks}")
    return "; ".join(parts)


def replay(scenario: str, overrides: list[str] | None = None, max_steps: int = 0,
           scheduler_cls: Any = None, stop_at_difference: bool = True,
           vllm_policy: bool = True, on_step: Any = None) -> Replay:
    """Replays SCENARIO through feather and vLLM in lockstep; see the module comment.

    `vllm_policy` False lifts the FCFS + always requirement, for a `scheduler_cls` that runs the
    scenario's own selector and policy (feather.vllm.plugin_check); `on_step`, when set, gets
    what feather's step reported to its stop policy (``Simulation.last_feedback()``: its time in
    ns, the decode part, the step shape) before vLLM's update_from_output of that step."""
    import feather

    overrides = list(overrides or []) + ["scheduler_time=zero"]
    sim = feather.Simulation(scenario, overrides)
    serving = sim.serving
    if vllm_policy and (serving["selector"] != "fcfs" or serving["stop"] != "always"):
        raise ValueError(f"{scenario}: conformance needs scheduler.selector fcfs and "
                         f"scheduler.stop always (vLLM's own policy), not "
                         f"{serving['selector']} + {serving['stop']}")
    work = sim.requests()
    offsets, tokens = work["prompt_offsets"], work["prompt_tokens"]
    arrival, outputs = work["arrival_ns"], work["output_tokens"]
    n = len(arrival)
    longest = max(int(offsets[i + 1] - offsets[i]) + int(outputs[i]) for i in range(n))
    scheduler = vllm_scheduler(serving, max_model_len=longest + 16, scheduler_cls=scheduler_cls)
    block = int(serving["block_tokens"])

    feather_steps: list[Step] = []
    vllm_steps: list[Step] = []
    added = 0
    first_difference = None
    differences = 0
    detail = ""
    while max_steps == 0 or len(feather_steps) < max_steps:
        plan = sim.schedule()
        if plan is None:
            break
        now = plan["now_ns"]
        while added < n and arrival[added] <= now:
            prompt = tokens[offsets[added]:offsets[added + 1]].tolist()
            scheduler.add_request(make_vllm_request(added, prompt, int(outputs[added]), block))
            added += 1
        ours = _feather_step(plan, block)
        # A preemption that empties vLLM's batch makes an empty step; feather retries the round
        # at the same moment without one. Fold vLLM's empty steps into the next real one.
        preempted: list[int] = []
        while True:
            output = scheduler.schedule()
            preempted += [int(r) for r in output.preempted_req_ids]
            if output.total_num_scheduled_tokens > 0 or not scheduler.has_requests():
                break
            scheduler.update_from_output(output, model_runner_output(scheduler, output))
        theirs = _vllm_step(scheduler, output, preempted)
        step_ns = sim.complete()
        if on_step is not None:
            on_step(sim.last_feedback())
        before = set(scheduler.requests)
        scheduler.update_from_output(output, model_runner_output(scheduler, output))
        theirs.finished = sorted(int(r) for r in before - set(scheduler.requests))
        feather_steps.append(ours)
        vllm_steps.append(theirs)
        if ours.key() != theirs.key():
            differences += 1
            if first_difference is None:
                first_difference = len(feather_steps) - 1
                detail = describe_difference(ours, theirs)
                if stop_at_difference:
                    break
    return Replay(name=str(serving["name"]), feather=feather_steps, vllm=vllm_steps,
                  first_difference=first_difference, differences=differences, detail=detail,
                  scheduler=scheduler)


def feather_steps(scenario: str, overrides: list[str] | None = None,
                  max_steps: int = 0) -> list[Step]:
    """feather's side of a replay alone (no vLLM needed): what check_golden compares."""
    import feather

    sim = feather.Simulation(scenario, list(overrides or []) + ["scheduler_time=zero"])
    block = int(sim.serving["block_tokens"])
    steps: list[Step] = []
    while max_steps == 0 or len(steps) < max_steps:
        plan = sim.schedule()
        if plan is None:
            break
        steps.append(_feather_step(plan, block))
        sim.complete()
    return steps


def check_golden(scenario: str, golden_path: str) -> tuple[int, int, str]:
    """Replays SCENARIO through feather alone and compares it with vLLM's recorded side:
    (equal steps, steps, first difference or "")."""
    with open(golden_path) as f:
        header, theirs = read_golden(f.read().splitlines())
    ours = feather_steps(scenario, header.get("overrides", []))
    equal = 0
    first = ""
    for index, (a, b) in enumerate(zip(ours, theirs)):
        if a.key() == b.key():
            equal += 1
        elif not first:
            first = f"step {index}: {describe_difference(a, b)}"
    if len(ours) != len(theirs) and not first:
        first = f"feather ran {len(ours)} steps, vLLM {len(theirs)}"
    return equal, max(len(ours), len(theirs)), first


# Golden files: vLLM's side of a replay, so that feather's C++ tests check the simulator against
# vLLM without vLLM installed (tests/sim/serving/vllm_golden_test.cc). JSON lines: a header, then
# one line per step holding only what a reader cannot infer from the previous step. A request
# scheduled in both steps whose context grew by exactly its previous new tokens and that runs
# one new token (a decode) is implicit; everything else is listed:
#   {"s": step, "new": [[id, context, new], ...]   scheduled now, not in the previous step
#                "chg": [[id, context, new], ...]   in both, but not an implicit decode
#                "gone": [id, ...]                  in the previous step, not in this one
#                "pre": [id, ...], "fin": [id, ...], "cpb": common prefix blocks}
# Empty fields are left out. Order of "new" is vLLM's scheduling order.
GOLDEN_FORMAT = 1


def golden_lines(result: Replay, header: dict[str, Any]) -> list[str]:
    lines = [json.dumps({"format": GOLDEN_FORMAT, **header, "steps": len(result.vllm)},
                        separators=(",", ":"))]
    previous: dict[int, tuple[int, int]] = {}
    for index, step in enumerate(result.vllm):
        current = {r[0]: (r[1], r[2]) for r in step.scheduled}
        entry: dict[str, Any] = {"s": index}
        new = [list(r) for r in step.scheduled if r[0] not in previous]
        chg = [list(r) for r in step.scheduled
               if r[0] in previous and (r[1], r[2]) != (sum(previous[r[0]]), 1)]
        gone = sorted(i for i in previous if i not in current)
        for key, value in (("new", new), ("chg", chg), ("gone", gone), ("pre", step.preempted),
                           ("fin", step.finished)):
            if value:
                entry[key] = value
        if step.common_prefix_blocks:
            entry["cpb"] = step.common_prefix_blocks
        lines.append(json.dumps(entry, separators=(",", ":")))
        previous = current
    return lines


def read_golden(lines: list[str]) -> tuple[dict[str, Any], list[Step]]:
    """The inverse of golden_lines (the C++ test has its own reader; this one checks ours)."""
    header = json.loads(lines[0])
    if header.get("format") != GOLDEN_FORMAT:
        raise ValueError(f"golden format {header.get('format')}, expected {GOLDEN_FORMAT}")
    steps: list[Step] = []
    previous: dict[int, tuple[int, int]] = {}
    order: list[int] = []
    for line in lines[1:]:
        entry = json.loads(line)
        gone = set(entry.get("gone", []))
        changed = {r[0]: (r[1], r[2]) for r in entry.get("chg", [])}
        current: dict[int, tuple[int, int]] = {}
        kept = [i for i in order if i not in gone]
        for i in kept:
            current[i] = changed.get(i, (sum(previous[i]), 1))
        new = [r[0] for r in entry.get("new", [])]
        for r in entry.get("new", []):
            current[r[0]] = (r[1], r[2])
        order = kept + new
        steps.append(Step(scheduled=[(i, *current[i]) for i in order],
                          preempted=entry.get("pre", []), finished=entry.get("fin", []),
                          common_prefix_blocks=entry.get("cpb", 0)))
        previous = current
    return header, steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m feather.vllm.conformance",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE")
    parser.add_argument("--steps", type=int, default=0, help="stop after N steps (0: all)")
    parser.add_argument("--golden", help="write vLLM's side as a golden file here")
    parser.add_argument("--keep-going", action="store_true",
                        help="count every differing step instead of stopping at the first")
    args = parser.parse_args(argv)
    import vllm

    result = replay(args.scenario, args.overrides, args.steps,
                    stop_at_difference=not args.keep_going)
    total = len(result.feather)
    equal = total - result.differences
    print(f"{result.name}: {equal} of {total} steps equal "
          f"(vLLM {vllm.__version__}); "
          + ("no difference" if result.first_difference is None else
             f"first difference at step {result.first_difference}: {result.detail}"))
    if args.golden:
        if result.first_difference is not None:
            print("not writing a golden file for a replay that differs", file=sys.stderr)
            return 1
        header = {"scenario": os.path.basename(args.scenario), "overrides": args.overrides,
                  "vllm": vllm.__version__}
        text = "\n".join(golden_lines(result, header)) + "\n"
        with open(args.golden + ".tmp", "w") as f:
            f.write(text)
        os.replace(args.golden + ".tmp", args.golden)
    return 0 if result.first_difference is None else 1


if __name__ == "__main__":
    sys.exit(main())
