"""feather.vllm.FeatherScheduler inside vLLM's real Scheduler, on the CPU, no model.

The plugin and feather's simulator replay the same workload in lockstep with the same selector,
stop policy and step times (feather.vllm.plugin_check); every step must be equal. Two workloads
in tests/python/vllm_plugin/ (block-aligned prompts, no preemption): prefix groups under the
heuristic, which stops admission hundreds of times, and a radix tree under the UCB bandit, which
learns from the injected step times. Skipped where vLLM is not installed.
"""

import os
import pathlib
import time

import pytest

vllm = pytest.importorskip(
    "vllm", reason="vLLM is not installed in this environment (scripts/vllm-conformance.sh "
    "makes one: ~/.cache/feather/venv-vllm)")

from feather.vllm import conformance, plugin_check  # noqa: E402
from feather.vllm.scheduler import (ChtRequestQueue, FeatherScheduler,  # noqa: E402
                                    PluginConfig, block_key)

HERE = pathlib.Path(__file__).resolve().parent
WORKLOADS = HERE / "vllm_plugin"
GOLDEN = HERE.parents[0] / "golden" / "vllm"


def test_scheduler_cls_resolves_the_way_vllm_resolves_it():
    # vLLM's own path: the CLI flag -> EngineArgs -> SchedulerConfig.get_scheduler_cls(), which
    # calls vllm.utils.import_utils.resolve_obj_by_qualname on the string.
    from vllm.config import SchedulerConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.v1.core.sched.scheduler import Scheduler

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    args = parser.parse_args(["--model", conformance._tiny_model_dir(),
                              "--scheduler-cls", "feather.vllm.FeatherScheduler"])
    engine_args = EngineArgs.from_cli_args(args)
    assert engine_args.scheduler_cls == "feather.vllm.FeatherScheduler"
    config = SchedulerConfig.default_factory(scheduler_cls=engine_args.scheduler_cls)
    cls = config.get_scheduler_cls()
    assert cls is FeatherScheduler and issubclass(cls, Scheduler)


@pytest.mark.parametrize("name,policy", [("prefix-groups-heuristic", "heuristic"),
                                         ("radix-bandit", "bandit")])
def test_plugin_decides_as_feathers_simulator(name, policy):
    result = plugin_check.replay_plugin(str(WORKLOADS / f"{name}.yaml"))
    assert result.first_difference is None, f"step {result.first_difference}: {result.detail}"
    assert len(result.vllm) >= 2000
    # Chosen to avoid the two known differences of feather's vLLM model (no preemption; vLLM's
    # full-sequence admission gate, left on, never binds in a pool this large).
    assert not any(step.preempted for step in result.vllm)
    scheduler = result.scheduler
    assert scheduler.policy.name() == policy
    assert scheduler.stats.stops >= 100  # the policy really closes batches
    assert scheduler.stats.rewarded_steps == len(result.vllm)
    # Every request left the paper's tree, and tree ids were recycled, but for those the cached
    # working set still retains (their KV still in vLLM's prefix cache).
    queue = scheduler.waiting
    assert isinstance(queue, ChtRequestQueue)
    assert queue.tree.num_waiting() == 0 and queue.tree.num_active() == 0
    assert queue.cached is not None and queue.cached.num_retained() == len(queue._retained)
    assert not queue._ids and len(queue._free_ids) + len(queue._retained) == queue._next_id


_SHAPE_REPLAYS: dict[str, object] = {}


def _shape_replay(policy: str):
    if policy not in _SHAPE_REPLAYS:
        _SHAPE_REPLAYS[policy] = plugin_check.replay_plugin(
            str(WORKLOADS / "prefix-groups-converge.yaml"), [f"scheduler.stop={policy}"])
    return _SHAPE_REPLAYS[policy]


@pytest.mark.parametrize("policy", ["converge", "converge-shape", "mpc"])
def test_shape_reading_policies_decide_as_feathers_simulator(policy):
    # converge and mpc read StopContext's batch fields (the plugin fills them with
    # feather.BatchShapeTracker, the code the simulator fills them with), and converge's gate
    # and mpc fit the step shape of StepFeedback (the plugin computes it as the simulator's
    # BuildPlan does; plugin_check gives both sides the model's step times).
    result = _shape_replay(policy)
    assert result.first_difference is None, f"step {result.first_difference}: {result.detail}"
    assert len(result.vllm) >= 1500
    assert not any(step.preempted for step in result.vllm)
    scheduler = result.scheduler
    assert scheduler.policy.name() == policy and scheduler.policy.wants_batch_shape()
    assert scheduler.stats.stops >= 10  # its rules really close batches
    feedback = scheduler.last_feedback
    assert feedback.decode_kv_tokens > 0 and feedback.decode_kv_unique_tokens > 0
    shape = scheduler._shape
    assert shape is not None and len(shape) == 0  # every request left the tracker
    assert not scheduler._shape_ids and not scheduler._step_shapes


def test_converge_gate_changes_the_decisions_in_the_plugin_too():
    # The gate (the fitted comparison with the mixed batch) really decides here: converge
    # forms other steps than its shape rules alone, on both sides alike.
    gated, shape = _shape_replay("converge"), _shape_replay("converge-shape")
    assert gated.first_difference is None and shape.first_difference is None
    assert len(gated.vllm) != len(shape.vllm)
    assert gated.scheduler.stats.stops < shape.scheduler.stats.stops


def test_converge_without_the_batch_shape_differs(monkeypatch):
    # The plugin as it was: no shape in the context, so converge sees an empty batch shape
    # and never stops; the replay tells it apart from feather's simulator.
    init = FeatherScheduler.__init__

    def blind(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._shape = None

    monkeypatch.setattr(FeatherScheduler, "__init__", blind)
    result = plugin_check.replay_plugin(str(WORKLOADS / "prefix-groups-converge.yaml"),
                                        max_steps=2000)
    assert result.first_difference is not None
    assert result.scheduler.stats.stops == 0


def test_converge_skips_as_feathers_simulator_does(monkeypatch):
    # On the radix tree converge's rule 3 passes over proposals outside the batch's largest
    # group (StopDecision.skip): the queue parks them and the gate asks about the next, as
    # feather's BuildBatch does. Thousands of skips, every step equal.
    overrides = ["scheduler.stop=converge"]
    result = plugin_check.replay_plugin(str(WORKLOADS / "radix-bandit.yaml"), overrides)
    assert result.first_difference is None, f"step {result.first_difference}: {result.detail}"
    assert len(result.vllm) >= 1000
    stats = result.scheduler.stats
    assert stats.skips >= 1000 and stats.stops >= 10
    queue = result.scheduler.waiting
    assert not queue._parked and queue.tree.num_waiting() == 0 and not queue._ids
    # Taken as a stop (the plugin before it could park), the same replay parts from feather's.
    monkeypatch.setattr(ChtRequestQueue, "skip", lambda self, request: False)
    blind = plugin_check.replay_plugin(str(WORKLOADS / "radix-bandit.yaml"), overrides,
                                       max_steps=600)
    assert blind.first_difference is not None and blind.scheduler.stats.skips == 0


def test_parked_requests_still_wait():
    # A parked request is out of find_best's reach but counts in len and iteration, and can be
    # aborted while parked; unpark_all brings it back in its insertion order.
    queue = ChtRequestQueue(16, gate=lambda _queue: True)
    requests = [conformance.make_vllm_request(i, list(range(i * 100 + 1, i * 100 + 49)), 4, 16)
                for i in range(3)]
    for request in requests:
        queue.add_request(request)
    assert queue.peek_request() is requests[0]
    assert queue.skip(requests[0]) and queue.peek_request() is requests[1]
    assert len(queue) == 3 and list(queue) == requests
    queue.remove_request(requests[0])  # aborted while parked
    assert len(queue) == 2 and not queue._parked
    assert queue.skip(requests[1]) and queue.peek_request() is requests[2]
    queue.unpark_all()
    assert queue.peek_request() is requests[1] and len(queue) == 2


def test_the_cached_working_set_ranks_after_the_batchs_group():
    # feather's ChtSelector with retain_cached (tests/policies/cht_selector_test.cc, the same
    # case in blocks): A runs, B finished and is cached; waiting are a long A request (20 blocks
    # missing from the batch), a B request (13 missing, 3 of them uncached) and a short unrelated
    # C (5 and 5). The paper's best, C, shares nothing with the batch: the cache's best, B, is
    # proposed; with B skipped, C; the cache's loss of B makes C the proposal again.
    a, b = list(range(1, 161)), list(range(10001, 10161))
    def request(i, tokens):
        return conformance.make_vllm_request(i, tokens, 4, 16)
    queue = ChtRequestQueue(16, gate=lambda _queue: True, retain_cached=True)
    running = [request(0, a + list(range(201, 233))), request(1, b + list(range(301, 333)))]
    for r in running:
        queue.add_request(r)
    assert {queue.pop_request().request_id for _ in running} == {"0", "1"}
    queue.forget(running[1])  # B finished, its KV cached
    assert queue.cached.is_retained(1) and not queue.tree.is_active(1)
    long_a = request(2, a + list(range(401, 721)))
    cached_b = request(3, b + list(range(501, 549)))
    short_c = request(4, list(range(90001, 90081)))
    for r in (long_a, cached_b, short_c):
        queue.add_request(r)
    assert queue.tree.find_best().request == queue._ids["4"]  # the paper's ranking: C
    request_, signal = queue.best()
    assert request_ is cached_b and signal.tip_after_chunks == 0 and signal.peers == 3
    assert queue.skip(cached_b) and queue.peek_request() is short_c
    queue.unpark_all()
    queue.cache_lost("1")
    assert queue.forgotten == 1 and queue.cached.num_retained() == 0
    assert queue.peek_request() is short_c
    queue.cache_lost("1")  # a second report changes nothing
    assert queue.forgotten == 1


def test_plugin_with_the_cached_working_set_decides_as_feathers_simulator():
    # Both sides keep the cached working set (scheduler.cht_retain_cached): the paper's default
    # at 50 req/s in a 3,000-block pool that evicts, where the cached tree's proposals change
    # the run (the plugin with its rule switched off differs from step 402 on). The plugin's
    # owner accounting (vLLM's block pool and KV manager, wrapped) forgets retained requests as
    # feather's KvCache reports them. Prompts are not block-aligned: the plugin keys trailing
    # partial blocks as feather does (partial_block).
    result = plugin_check.replay_plugin(
        str(HERE.parents[1] / "scenarios" / "default.yaml"),
        ["workload.requests=1500", "workload.arrival.rate=50", "serving.kv_cache_blocks=3000",
         "scheduler.cht_retain_cached=true"], max_steps=1000, partial_block=True)
    assert result.first_difference is None, f"step {result.first_difference}: {result.detail}"
    assert len(result.vllm) == 1000
    queue = result.scheduler.waiting
    assert queue.cached is not None and queue.forgotten > 0
    assert sum(len(s.preempted) for s in result.feather) > 0


def test_fcfs_selector_under_a_policy_decides_as_feathers_simulator():
    # vLLM's own order, gated by the bandit (no prefix signal: its state is b and the waiting
    # count). The policy must be asked once per proposal, not again by peek_request.
    result = plugin_check.replay_plugin(str(WORKLOADS / "radix-bandit.yaml"),
                                        ["scheduler.selector=fcfs"], max_steps=600)
    assert result.first_difference is None, f"step {result.first_difference}: {result.detail}"
    assert len(result.vllm) == 600 and result.scheduler.stats.stops > 0


def test_plain_vllm_scheduler_is_told_apart():
    # The comparison can fail: vLLM's own FCFS scheduler on the same workload differs early.
    from vllm.v1.core.sched.scheduler import Scheduler

    result = conformance.replay(str(WORKLOADS / "prefix-groups-heuristic.yaml"),
                                ["scheduler.chunk_tokens=16"], max_steps=2000,
                                scheduler_cls=Scheduler, vllm_policy=False)
    assert result.first_difference is not None


def test_trailing_partial_blocks_are_the_cause_of_difference_on_unaligned_prompts():
    # feather's simulator chunks a prompt's trailing partial block, vLLM hashes full blocks
    # only. With the plugin's diagnostic key for the partial block, the steps agree again.
    scenario = str(GOLDEN / "prefix-groups.yaml")  # prompts of 2,000 + 20..300 tokens
    overrides = ["scheduler.selector=cht", "scheduler.stop=heuristic"]
    assert plugin_check.unaligned_prompts(scenario, overrides)[0] > 0
    plain = plugin_check.replay_plugin(scenario, overrides, max_steps=300)
    assert plain.first_difference is not None
    keyed = plugin_check.replay_plugin(scenario, overrides, max_steps=300, partial_block=True)
    assert keyed.first_difference is None, keyed.detail
    assert len(keyed.vllm) == 300


def test_preempted_requests_are_requeued_as_feather_does():
    # A KV pool of 700 blocks preempts; every step agrees, resumed requests' hits on their own
    # cached output included (feather's vLLM model covers it: tests/golden/vllm/README.md).
    scenario = str(WORKLOADS / "radix-bandit.yaml")
    result = plugin_check.replay_plugin(scenario, ["serving.kv_cache_blocks=700"], max_steps=400)
    assert result.first_difference is None, result.detail
    assert len(result.feather) == 400
    assert sum(len(s.preempted) for s in result.feather) >= 10


def test_config_from_file_and_environment(tmp_path):
    path = tmp_path / "feather.yaml"
    path.write_text("selector: cht\npolicy: bandit\npolicy_options: {exploration: 50.0}\n"
                    "seed: 3\n")
    config = PluginConfig.from_environment({"FEATHER_VLLM_CONFIG": str(path)})
    assert (config.selector, config.policy, config.seed) == ("cht", "bandit", 3)
    assert config.make_policy().name() == "bandit"
    config = PluginConfig.from_environment({"FEATHER_VLLM_CONFIG": str(path),
                                            "FEATHER_POLICY": "heuristic",
                                            "FEATHER_SELECTOR": "fcfs"})
    assert (config.selector, config.policy) == ("fcfs", "heuristic")
    assert PluginConfig.from_environment({}).policy == "heuristic"
    path.write_text("state_bins: fine\n")
    with pytest.raises(ValueError, match="state_bins 'fine'"):
        PluginConfig.from_environment({"FEATHER_VLLM_CONFIG": str(path)})
    path.write_text("selector: lpm\n")
    with pytest.raises(ValueError, match="selector 'lpm'"):
        PluginConfig.from_environment({"FEATHER_VLLM_CONFIG": str(path)})
    path.write_text("policy: heuristic\nstop: always\n")
    with pytest.raises(ValueError, match="unknown feather plugin settings"):
        PluginConfig.from_environment({"FEATHER_VLLM_CONFIG": str(path)})


def _tiny_scheduler(config: PluginConfig):
    serving = {"block_tokens": 16, "max_num_seqs": 8, "max_num_batched_tokens": 512,
               "chunked_prefill": True, "prefix_caching": True, "kv_cache_blocks": 256}
    return conformance.vllm_scheduler(serving, max_model_len=1024,
                                      scheduler_cls=FeatherScheduler.configured(config))


def test_reward_uses_the_measured_step_time():
    scheduler = _tiny_scheduler(PluginConfig(policy="bandit"))
    prompt = list(range(1, 65))
    scheduler.add_request(conformance.make_vllm_request(0, prompt, 4, 16))
    output = scheduler.schedule()
    time.sleep(0.02)  # the "device" runs the step
    scheduler.update_from_output(output, conformance.model_runner_output(scheduler, output))
    feedback = scheduler.last_feedback
    assert 20_000_000 <= feedback.step_ns < 2_000_000_000
    assert feedback.batch_size == 1 and feedback.decode_tokens == 1


def test_async_scheduling_keeps_one_round_per_executed_step():
    # vLLM's batch queue (step_with_batch_queue): schedule N, schedule N+1 before N's output,
    # then N's output. The overlapped call admits nothing and asks nothing.
    scheduler = _tiny_scheduler(PluginConfig(policy="always"))
    for i in range(3):
        scheduler.add_request(conformance.make_vllm_request(i, list(range(1 + i, 65 + i)), 4, 16))
    first = scheduler.schedule()
    assert len(first.num_scheduled_tokens) == 3
    scheduler.add_request(conformance.make_vllm_request(3, list(range(100, 164)), 4, 16))
    decisions = scheduler.stats.decisions
    overlapped = scheduler.schedule()
    assert overlapped.total_num_scheduled_tokens == 0
    assert scheduler.stats.decisions == decisions and scheduler.stats.overlapped_steps == 1
    scheduler.update_from_output(first, conformance.model_runner_output(scheduler, first))
    scheduler.update_from_output(overlapped,
                                 conformance.model_runner_output(scheduler, overlapped))
    assert scheduler.stats.rewarded_steps == 1
    second = scheduler.schedule()
    assert "3" in second.num_scheduled_tokens and scheduler.stats.decisions > decisions


def test_queue_keys_are_vllms_block_hashes():
    scheduler = _tiny_scheduler(PluginConfig(policy="always"))
    shared = list(range(1, 33))
    a = conformance.make_vllm_request(0, shared + [100] * 20, 4, 16)
    b = conformance.make_vllm_request(1, shared + [200] * 20, 4, 16)
    queue = scheduler.waiting
    assert queue.keys_of(a) == [int.from_bytes(h[:8], "little") for h in a.block_hashes]
    assert queue.keys_of(a)[:2] == queue.keys_of(b)[:2] and len(queue.keys_of(a)) == 3
    assert block_key(a.block_hashes[0]) == queue.keys_of(a)[0]


def _deferred_abort(scheduler, rid: int):
    """A request aborted while the step that scheduled it is in flight, with vLLM deferring
    frees (as it does beside an async KV connector): its blocks return to the pool only when that
    step's output arrives. Returns the request's block ids that stay cached."""
    from vllm.v1.request import RequestStatus

    scheduler.defer_block_free = True
    scheduler.add_request(conformance.make_vllm_request(rid, list(range(1, 65)), 4, 16))
    step = scheduler.schedule()
    assert str(rid) in step.num_scheduled_tokens
    blocks = scheduler.kv_cache_manager.coordinator.single_type_managers[0].req_to_blocks[str(rid)]
    cached = [b.block_id for b in blocks if b.block_hash is not None]
    scheduler.finish_requests(str(rid), RequestStatus.FINISHED_ABORTED)
    assert scheduler.deferred_frees, "vLLM did not defer the free"
    return step, cached


def test_a_deferred_free_is_accounted_when_the_blocks_return():
    # The owner accounting sees vLLM's deferred frees too: the aborted request owns its cached
    # blocks once they return to the pool, stays retained meanwhile, and is forgotten when one of
    # them is evicted.
    scheduler = _tiny_scheduler(PluginConfig(policy="always", retain_cached=True))
    step, cached = _deferred_abort(scheduler, 0)
    assert len(cached) == 4  # 64 prompt tokens in four full 16-token blocks
    assert scheduler._owned.get("0", 0) == 0  # not yet returned
    from vllm.v1.outputs import ModelRunnerOutput

    # The step's output: the model ran the aborted request (vLLM drops its token).
    scheduler.update_from_output(step, ModelRunnerOutput(
        req_ids=["0"], req_id_to_index={"0": 0}, sampled_token_ids=[[conformance.SAMPLED_TOKEN]]))
    assert not scheduler.deferred_frees
    assert scheduler._owned.get("0") == 4
    assert all(scheduler._owner_of[b] == "0" for b in cached)
    queue = scheduler.waiting
    assert "0" in queue._retained and queue.forgotten == 0
    pool = scheduler.kv_cache_manager.block_pool
    assert pool._maybe_evict_cached_block(pool.blocks[cached[-1]])
    assert "0" not in queue._retained and queue.forgotten == 1
