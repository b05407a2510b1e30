"""Runs SGLang's own PrefillAdder (python/sglang/srt/managers/schedule_policy.py) on states read
as JSON from stdin and prints, per state, the indices it admits and the truncated chunk length.

Used by tests/python/test_sglang_prefill_adder.py to compare feather's
sim/serving/sglang_prefill_adder.h with the engine. Run with SGLang's interpreter (0.5.6 in
~/.cache/feather/venv-sglang-056). PrefillAdder itself is SGLang's; the objects around it are
minimal mocks: a Req with the fields add_one_req reads, a token pool whose available_size() is
the free KV tokens, a radix cache with no evictable tokens and no-op locks, and a running batch
of mocked Reqs, and global server args with NSA context parallelism off. The loop over the waiting queue restates Scheduler.get_new_batch_prefill
(scheduler.py): stop when running + admitted reaches max_running_requests or on the first result
other than CONTINUE.
"""
import json
import sys
from types import SimpleNamespace

from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder
from sglang.srt.server_args import set_global_server_args_for_scheduler

# PrefillAdder.__init__ asks the global server args whether NSA context parallelism is on.
set_global_server_args_for_scheduler(SimpleNamespace(enable_nsa_prefill_context_parallel=False))


class _Pool:
    def __init__(self, free):
        self.free = free

    def available_size(self):
        return self.free


class _Cache:
    disable = False

    def evictable_size(self):
        return 0

    def inc_lock_ref(self, node):
        return None

    def dec_lock_ref(self, node, *args):
        return None


def _req(extend_input_len, max_new_tokens, output_len, prefix_len=0):
    prompt = prefix_len + extend_input_len - output_len
    return SimpleNamespace(
        extend_input_len=extend_input_len,
        sampling_params=SimpleNamespace(max_new_tokens=max_new_tokens, ignore_eos=False),
        output_ids=[0] * output_len,
        origin_input_ids=[0] * max(prompt, 0),
        host_hit_length=0,
        prefix_indices=[0] * prefix_len,
        fill_ids=[0] * (prefix_len + extend_input_len),
        last_node=None,
        last_host_node=None,
    )


def run(state):
    running = SimpleNamespace(reqs=[_req(1, rem, 0) for rem in state["running_remaining"]])
    adder = PrefillAdder(
        state["page_size"], _Cache(), _Pool(state["available_tokens"]), running,
        state["new_token_ratio"], state["rem_input_tokens"],
        state["rem_chunk_tokens"] if state["rem_chunk_tokens"] >= 0 else None)
    waiting = [_req(*w) for w in state["waiting"]]
    index = {id(r): i for i, r in enumerate(waiting)}
    for req in waiting:
        if len(adder.can_run_list) >= state["max_running_requests"] - len(running.reqs):
            break
        res = adder.add_one_req(req, has_chunked_req=False, truncation_align_size=None)
        if res != AddReqResult.CONTINUE:
            break
    chunked = adder.new_chunked_req.extend_input_len if adder.new_chunked_req else -1
    return [[index[id(r)] for r in adder.can_run_list], chunked]


if __name__ == "__main__":
    json.dump([run(s) for s in json.load(sys.stdin)], sys.stdout)
