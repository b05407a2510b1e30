"""feather.BatchShapeTracker (policies/batch_shape.h): the batch shape a stop policy reads.

Against feather's simulator on a small scenario: the simulator is stepped (feather.Simulation),
the tracker follows its running batch the way the vLLM plugin follows vLLM's (requests enter when
they run, leave when they finish or are preempted, in batch order), and at every step the
tracker's common prefix of the batch, computed from the requests' block-hash chains, is compared
with the common prefix the simulator's KV cache reports for the same batch (reference counts of
its physical blocks). Plus the binding's contract: StopContext's batch fields, the policies that
want them, and the error paths.
"""

import pathlib

import numpy as np
import pytest

import feather

HERE = pathlib.Path(__file__).resolve().parent
SCENARIO = HERE / "vllm_plugin" / "prefix-groups-converge.yaml"


def test_wants_batch_shape_is_exposed():
    wants = {name: feather.make_stop_policy(name).wants_batch_shape()
             for name in feather.stop_policy_names()}
    assert wants["converge"] and wants["mpc"]
    assert not wants["heuristic"] and not wants["always"]


def test_tracker_follows_the_simulators_batch():
    overrides = ["workload.requests=300", "serving.max_num_seqs=48"]
    sim = feather.Simulation(str(SCENARIO), overrides)
    block = int(sim.serving["block_tokens"])
    requests = sim.requests()
    offsets, tokens = requests["prompt_offsets"], requests["prompt_tokens"]
    # The simulator's chains hash full blocks and a trailing partial one; prefix_hashes over
    # chunks of one block gives chains with the same equalities.
    chains = [list(feather.prefix_hashes(tokens[offsets[i]:offsets[i + 1]].tolist(), block))
              for i in range(len(offsets) - 1)]
    tracker = feather.BatchShapeTracker(block)
    steps = equal = multi = 0
    while (plan := sim.schedule()) is not None:
        running = [r[0] for r in plan["requests"]]
        for rid in tracker.members():
            if rid not in running:
                tracker.leave(rid)
        if tracker.members() != running[:len(tracker)]:
            # A running request the step gave no tokens to (budget) is not in the plan; it
            # comes back later at the end: start over in the plan's order.
            for rid in tracker.members():
                tracker.leave(rid)
        for rid in running[len(tracker):]:
            tracker.enter(rid, chains[rid])
        sequences = [int(context + new) for _, context, new, _, _ in plan["requests"]]
        tracker.begin_round(sequences)
        context = feather.StopContext()
        # An empty-prefix probe candidate: the fields then describe the batch as it is.
        tracker.fill(context, 10**6, [], 0, 0, 0)
        assert context.batch_kv_tokens == sum(sequences)
        steps += 1
        if len(running) >= 2:
            multi += 1
            # Physical sharing implies equal chains: the simulator's common prefix can only be
            # shorter (a request allocates its own copy of blocks another one was still
            # prefilling), never longer.
            assert plan["common_prefix_tokens"] <= context.batch_common_prefix_tokens
            equal += plan["common_prefix_tokens"] == context.batch_common_prefix_tokens
        sim.complete()
    assert steps > 100 and multi > 100
    # Measured on this scenario: equal at every multi-request step (2,092 of 2,092); the
    # physical-copy case does not arise here.
    assert equal == multi, f"{equal} of {multi} steps equal"


def test_fill_and_admit_by_hand():
    def chain(group, shared, own):
        h = feather.prefix_hashes(list(range(group * 10**5, group * 10**5 + 16 * shared)) +
                                  list(range(own * 10**7, own * 10**7 + 64)), 16)
        return [int(x) for x in h]

    tracker = feather.BatchShapeTracker(16)
    for rid, group in enumerate([1, 2, 1, 1, 2]):
        tracker.enter(rid, chain(group, 32 if group == 1 else 20, rid))
    tracker.begin_round([600, 400, 600, 600, 400])
    context = feather.StopContext(batch_size=5, waiting=100)
    after = tracker.fill(context, 5, chain(2, 20, 5), 400, 320, 99)
    assert after == 0 and context.batch_common_prefix_tokens == 0
    assert context.batch_kv_tokens == 2600 and context.batch_unique_kv_tokens == 99 * 16
    groups = context.largest_groups
    assert len(groups) == len(feather.StopContext.prefix_group_depths)
    assert (groups[0].requests, groups[0].prefix_tokens, groups[0].candidate_in) == (3, 512, False)
    # The converge policy holds back a candidate outside a mixed batch's group of >= 8: here the
    # group has 3, so it admits.
    assert feather.make_stop_policy("converge").decide(context) == feather.StopDecision.add
    tracker.admit(5, chain(2, 20, 5), 400)
    assert tracker.members() == [0, 1, 2, 3, 4, 5] and 5 in tracker


def test_errors():
    with pytest.raises(ValueError):
        feather.BatchShapeTracker(0)
    tracker = feather.BatchShapeTracker(16)
    tracker.enter(0, [1, 2, 3])
    with pytest.raises(ValueError, match="one sequence length per member"):
        tracker.begin_round([])
    tracker.begin_round([48])
    with pytest.raises(ValueError, match="must not be in"):
        tracker.fill(feather.StopContext(), 0, [1, 2, 3], 48, 0, 0)
    tracker.leave(7)  # not in: no-op
    assert len(tracker) == 1
