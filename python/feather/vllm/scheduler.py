"""Feather as a vLLM scheduler: ``vllm serve MODEL --scheduler-cls feather.vllm.FeatherScheduler``.

``FeatherScheduler`` is vLLM 0.32's own ``vllm.v1.core.sched.scheduler.Scheduler`` with two things
changed, both without patching vLLM:

1. **The waiting queue is a Chunked Hash Tree.** ``self.waiting`` is a ``ChtRequestQueue`` (a
   ``vllm.v1.core.sched.request_queue.RequestQueue``): ``peek_request`` / ``pop_request`` return
   ``feather.ChunkedHashTree.find_best``'s proposal (the waiting request missing the fewest chunks
   from the running batch's working set; ties: the earliest inserted) instead of the oldest. A
   request enters the tree from ``request.block_hashes``, vLLM's own chained hashes of its full
   16-token blocks (the engine computes them when prefix caching is on, the default): nothing is
   re-hashed; each ``BlockHash`` (bytes) becomes a 64-bit key by its first 8 bytes read
   little-endian (``block_key``), and ``ChunkedHashTree.insert_blocks`` folds the keys into
   cumulative 64-bit chunk hashes. One chunk = one vLLM block (``chunk_tokens`` = the block size).
   A prompt's trailing partial block has no vLLM hash and is not in the tree (feather's
   simulator does chunk it; ``PluginConfig.partial_block`` keys it too, as a diagnostic).
2. **Admission is gated by a feather stop policy, through the queue.** vLLM has no admission hook.
   Its admission loop (``Scheduler.schedule``, "Next, schedule the WAITING requests") asks
   ``if not request_queue`` (the queue's ``__bool__``) once per iteration, right after its token
   budget check and before its ``max_num_seqs`` check, then ``peek_request``, the prefix-cache
   lookup, ``allocate_slots`` and ``pop_request``. While a ``schedule()`` call runs, the queue's
   ``__bool__`` asks the policy about the proposal (``StopPolicy.decide`` with the same
   ``StopContext`` feather's simulator builds: b = running requests, admitted this round, the
   CHT's prefix signal, waiting count, KV blocks used / total, the candidate's blocks) and answers
   False ("nothing waits") once the policy says Stop, for the rest of that step. So vLLM's loop
   ends exactly where feather's BuildBatch does, and nothing in vLLM changes. As in feather's
   simulator: the policy is not asked when the batch is at ``max_num_seqs`` (``__bool__`` answers
   True and vLLM's own check stops), an empty batch takes its first candidate whatever the policy
   says, and a Stop latches until the next step. A Skip (``converge``'s rule 3) parks the
   proposal in the tree (``ChunkedHashTree.park``: out of ``find_best``'s reach, still counted
   in ``len``) and the gate asks about the next proposal, up to ``MAX_SKIPS_PER_ROUND`` a round,
   as feather's BuildBatch does; the parked requests wait again once ``schedule()`` returns.
   With selector ``fcfs`` a Skip is a Stop (the simulator's FCFS selector cannot skip either).
   The round starts (``StopPolicy.begin_round``) at
   the first question of a step, so a step whose admission loop vLLM skips (a preemption happened)
   has no round, as in feather.

3. **The batch shape.** A policy whose ``wants_batch_shape()`` is True (``mpc``, ``converge``)
   reads ``StopContext``'s batch fields (sequence tokens, KV in use, common prefix, the
   candidate's effect, the largest prefix groups). The scheduler keeps a
   ``feather.BatchShapeTracker`` (policies/batch_shape.h, the code feather's simulator fills them
   with): a request enters with its chain (``block_key`` of each of its ``block_hashes``) when it
   runs and leaves when it finishes or is preempted (the round's first question reconciles the
   tracker with ``self.running``, in order); the round starts from vLLM's own common prefix (the
   ``num_common_prefix_blocks`` rule on its block reference counts), requests vLLM admitted during
   the round are added at the next question, and each candidate's cache hit is vLLM's prefix-cache
   lookup (``find_longest_cache_hit``, which changes nothing). Where it can differ from the
   simulator (logical vs physical sharing inside a prefix group; full blocks only): the header.
   ``StepFeedback``'s step shape (what mpc's and converge's step-time fit reads) is computed
   when a step is scheduled, as the simulator's ``BuildPlan`` does (``_step_shape``: decode
   reads, the distinct KV behind them, the common prefix; cascade by vLLM's thresholds when its
   cascade attention is on), and the waiting requests of each first-depth prefix group are
   counted from the queue's own add/pop/prepend/remove (``BatchShapeTracker.waiting``).

Finished requests leave the tree in ``_free_request`` (natural finishes and aborts), waiting
requests that are aborted through ``remove_requests``. A preempted request comes back through
``prepend_request`` (vLLM's ``_preempt_request``) and is requeued in the tree
(``ChunkedHashTree.requeue``: active -> waiting, keeping its insertion order for ties), as feather's
simulator does (``Simulator::Preempt`` -> ``CandidateSelector::OnPreempt`` -> ``Requeue``); it
keeps the chunks it was inserted with (its prompt), not the blocks of its generated tokens.

The policy's reward (``StopPolicy.on_step_executed``) comes after every non-empty step, in
``update_from_output``, from a measured step time: the time from the moment the step could start
on the device (the later of: ``schedule()`` for it returned, the previous step's output arrived) to
the moment ``update_from_output`` receives its output. That is the engine's time for the step with
vLLM's own scheduling time left out, which is what feather's reward prices (``StepFeedback.step_ns``
excludes scheduler time); the interval between consecutive ``schedule()`` calls would add the
scheduler's own CPU time and output processing. ``step_time_source`` replaces the measurement
(tests inject feather's modelled step times so decisions are reproducible). The decode-only time
of a mixed step is not measurable here (``decode_ns`` = -1, "not priced"; ``bandit-delayed`` then
counts the whole step), so ``scheduler.reward_time: decode-only`` has no effect in the plugin.

Configuration (``PluginConfig``): the file named by ``FEATHER_VLLM_CONFIG`` (YAML or JSON), then
the variables ``FEATHER_SELECTOR`` and ``FEATHER_POLICY`` on top. Keys: ``selector`` (``cht``, the
default, or ``fcfs``: vLLM's order, still gated by the policy), ``policy`` (a name of
``feather.stop_policy_names()``, default ``heuristic``), ``policy_options`` (its knobs, as
``feather.make_stop_policy``), ``seed``, ``state_bins``, ``load`` (a saved policy), ``learning``,
``save`` (written at shutdown), ``retain_cached`` (the CHT's cached working set, feather's
``scheduler.cht_retain_cached``: finished requests stay in a second tree until vLLM's block pool
evicts a block they released last, whether vLLM returns a request's blocks at once or defers the
return past a step in flight; on by default, as in feather's scenarios), or ``scenario``
(+ ``overrides``): the stop policy a feather scenario configures
(``feather.stop_policy_from_scenario``; ``selector`` is still this file's).

One round per executed step, also under async scheduling. With a batch queue (vLLM's async
scheduling, on by default in 0.32, also for a plain ``Scheduler`` subclass) the engine calls
``schedule()`` again before the previous step's output arrives. A plain ``Scheduler`` has nothing
to give its running requests then (they wait for their sampled token), so such a call could only
admit waiting requests; the plugin admits none in it (the queue reports empty, the policy is
not asked), so that no round begins before the previous one is rewarded (a new round would drop
the learning policies' pending decisions uncredited). The waiting requests are admitted by the
next call, one (empty) round trip later. ``kv_holding_waiting`` (requests that already hold KV
blocks: KV-connector loads, streaming-input sessions) keeps vLLM's FCFS order and is not gated.
A request skipped by vLLM's loop (LoRA limits, pending loads) is popped and prepended again:
it counts in the CHT's working set for the rest of that step.
"""

from __future__ import annotations

import array
import dataclasses
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import feather
from feather.vllm.conformance import common_prefix_blocks
from vllm.v1.core.sched.request_queue import FCFSRequestQueue, RequestQueue
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request

logger = logging.getLogger("feather.vllm")

CONFIG_ENV = "FEATHER_VLLM_CONFIG"
SELECTOR_ENV = "FEATHER_SELECTOR"
POLICY_ENV = "FEATHER_POLICY"
SELECTORS = ("cht", "fcfs")


def block_key(block_hash: bytes) -> int:
    """A vLLM BlockHash (bytes of a chained hash) as the tree's 64-bit key: its first 8 bytes."""
    return int.from_bytes(bytes(block_hash[:8]), "little")


@dataclasses.dataclass
class PluginConfig:
    """What FeatherScheduler runs: a selector and a stop policy (see the module comment)."""

    selector: str = "cht"
    policy: str = "heuristic"
    policy_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    seed: int = 1
    state_bins: str = "authors"
    load: str | None = None
    learning: bool = True
    save: str | None = None
    scenario: str | None = None
    overrides: list[str] = dataclasses.field(default_factory=list)
    # A diagnostic, off by default: also key a prompt's trailing partial block (from its
    # tokens), as feather's simulator chunks prompts; see ChtRequestQueue.keys_of.
    partial_block: bool = False
    # The CHT's cached working set (feather's `scheduler.cht_retain_cached`): a finished request
    # stays in a second tree until vLLM's prefix cache evicts a block it released last; the
    # paper's tree ranks first (ChtRequestQueue.best).
    retain_cached: bool = True
    # Not from files: a ready policy object (tests), and a step-time source replacing the
    # measurement: called with the SchedulerOutput of the step, returns nanoseconds, or a dict
    # as feather.Simulation.last_feedback() gives (whole_step_ns, and the decode_ns and
    # cascade_used the model priced, which a measurement cannot tell).
    policy_object: Any = None
    step_time_source: Callable[[Any], Any] | None = None

    @classmethod
    def from_environment(cls, environ: dict[str, str] | None = None) -> "PluginConfig":
        environ = dict(os.environ if environ is None else environ)
        values: dict[str, Any] = {}
        path = environ.get(CONFIG_ENV)
        if path:
            with open(path) as f:
                text = f.read()
            if path.endswith(".json"):
                values = json.loads(text)
            else:
                import yaml

                values = yaml.safe_load(text) or {}
            if not isinstance(values, dict):
                raise ValueError(f"{path}: expected a mapping of feather plugin settings")
        if environ.get(SELECTOR_ENV):
            values["selector"] = environ[SELECTOR_ENV]
        if environ.get(POLICY_ENV):
            values["policy"] = environ[POLICY_ENV]
        known = {f.name for f in dataclasses.fields(cls)} - {"policy_object", "step_time_source"}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{path or 'environment'}: unknown feather plugin settings {unknown} "
                             f"(known: {sorted(known)})")
        config = cls(**values)
        config.validate()
        return config

    def validate(self) -> None:
        if self.state_bins not in ("authors", "exponential"):
            raise ValueError(f"feather plugin: state_bins '{self.state_bins}' is not authors or "
                             f"exponential")
        if self.selector not in SELECTORS:
            raise ValueError(f"feather plugin: selector '{self.selector}' is not one of "
                             f"{list(SELECTORS)} (the plugin drives vLLM's queue; feather's other "
                             f"selectors have no Python binding)")

    def make_policy(self) -> feather.StopPolicy:
        if self.policy_object is not None:
            return self.policy_object
        if self.scenario:
            policy = feather.stop_policy_from_scenario(self.scenario, self.overrides)
        else:
            policy = feather.make_stop_policy(self.policy, seed=self.seed,
                                              state_bins=getattr(feather.StateBins,
                                                                 self.state_bins),
                                              **self.policy_options)
            if self.load:
                policy.load(self.load)
            policy.learning = self.learning
        return policy


class ChtRequestQueue(RequestQueue):
    """vLLM's waiting queue as a Chunked Hash Tree; ``__bool__`` is the stop policy's gate.

    Requests get small tree ids (recycled when they leave). ``__iter__`` lists the waiting
    requests in insertion order (vLLM only iterates for statistics); ``peek_request`` and
    ``pop_request`` follow ``find_best``. Every operation is the tree's (see ChunkedHashTree).
    """

    def __init__(self, chunk_tokens: int, gate: Callable[["ChtRequestQueue"], bool],
                 partial_block: bool = False,
                 on_waiting: Callable[[Request, int], None] | None = None,
                 retain_cached: bool = False):
        self.tree = feather.ChunkedHashTree(chunk_tokens=chunk_tokens)
        # retain_cached: the second tree of feather's CHT selector (policies/cht_selector.h),
        # whose working set also holds finished requests until `cache_lost` names them.
        self.cached = feather.ChunkedHashTree(chunk_tokens=chunk_tokens) if retain_cached else None
        self._retained: dict[str, int] = {}  # vLLM request id -> tree id, while retained
        self.forgotten = 0  # retained requests the cache reports made the cached tree forget
        self._gate = gate
        self._on_waiting = on_waiting or (lambda _request, _delta: None)
        self._partial_block = partial_block
        self._ids: dict[str, int] = {}  # vLLM request id -> tree id (waiting or active)
        self._requests: dict[int, Request] = {}  # tree id -> request
        self._free_ids: list[int] = []
        self._next_id = 0
        self._parked: list[int] = []  # tree ids passed over this round (StopDecision.skip)

    # The proposal and its prefix signal.
    def best(self) -> tuple[Request, feather.PrefixSignal] | None:
        candidate = self.tree.find_best()
        if candidate is None:
            return None
        # feather's ChtSelector::Next: a proposal sharing with the batch no more than every
        # request shares gives way to the request the cache serves best.
        if (self.cached is not None and
                self.tree.num_chunks_of(candidate.request) - candidate.missing
                <= self.tree.level_shared_by_all()):
            candidate = self.cached.find_best()
        signal = feather.PrefixSignal(tip_before_chunks=candidate.tip_before,
                                      tip_after_chunks=candidate.tip_after,
                                      peers=candidate.peers,
                                      chunk_tokens=self.tree.chunk_tokens)
        return self._requests[candidate.request], signal

    def _insert(self, request: Request) -> None:
        tree_id = self._free_ids.pop() if self._free_ids else self._next_id
        if tree_id == self._next_id:
            self._next_id += 1
        keys = self.keys_of(request)
        for tree in self._trees():
            tree.insert_blocks(tree_id, keys)
        self._ids[request.request_id] = tree_id
        self._requests[tree_id] = request

    def keys_of(self, request: Request) -> list[int]:
        """The request's chunk keys: its prompt's full blocks, by vLLM's hashes; with
        `partial_block`, one more key for a trailing partial block, equal for two requests
        exactly when their prompts are equal (what feather's simulator does)."""
        block = self.tree.chunk_tokens
        full = request.num_prompt_tokens // block
        hashes = request.block_hashes[:full]
        keys = [block_key(h) for h in hashes]
        if self._partial_block and request.num_prompt_tokens % block:
            tail = request.prompt_token_ids[full * block:request.num_prompt_tokens]
            digest = hashlib.blake2b(bytes(hashes[-1]) if hashes else b"", digest_size=8)
            digest.update(array.array("q", tail).tobytes())
            keys.append(int.from_bytes(digest.digest(), "little"))
        return keys

    def skip(self, request: Request) -> bool:
        """Passes over the proposal for the rest of this schedule() call: the tree parks it, so
        ``best`` names the next one; it still counts in ``len``. ``unpark_all`` ends the round."""
        tree_id = self._ids[request.request_id]
        for tree in self._trees():
            tree.park(tree_id)
        self._parked.append(tree_id)
        return True

    def unpark_all(self) -> None:
        for tree_id in self._parked:
            for tree in self._trees():
                tree.unpark(tree_id)
        self._parked.clear()

    def _drop_parked(self, tree_id: int) -> None:
        if self.tree.is_parked(tree_id):
            self._parked.remove(tree_id)

    def _trees(self) -> tuple[feather.ChunkedHashTree, ...]:
        """The paper's tree and, with retain_cached, the cached one: every request operation
        but retain / forget goes to both, so that they wait and batch the same ids."""
        return (self.tree,) if self.cached is None else (self.tree, self.cached)

    def _release(self, request_id: str, reuse: bool = True) -> int:
        """Drops the request's entries; its tree id is free again unless `reuse` is False (the
        cached tree still retains it)."""
        tree_id = self._ids.pop(request_id)
        del self._requests[tree_id]
        if reuse:
            self._free_ids.append(tree_id)
        return tree_id

    def add_request(self, request: Request) -> None:
        self._insert(request)
        self._on_waiting(request, +1)

    def peek_request(self) -> Request:
        best = self.best()
        if best is None:
            raise IndexError("peek from an empty queue")
        return best[0]

    def pop_request(self) -> Request:
        best = self.best()
        if best is None:
            raise IndexError("pop from an empty queue")
        request = best[0]
        tree_id = self._ids[request.request_id]
        for tree in self._trees():
            tree.add_to_batch(tree_id)
        self._on_waiting(request, -1)
        return request

    def prepend_request(self, request: Request) -> None:
        """A preempted request (or one vLLM's loop skipped) back to waiting."""
        tree_id = self._ids.get(request.request_id)
        if tree_id is None:
            self._insert(request)
            self._on_waiting(request, +1)
        elif self.tree.is_active(tree_id):
            for tree in self._trees():
                tree.requeue(tree_id)
            self._on_waiting(request, +1)

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        for request in requests:
            self.prepend_request(request)

    def remove_request(self, request: Request) -> None:
        tree_id = self._ids.get(request.request_id)
        if tree_id is not None and (self.tree.is_waiting(tree_id) or
                                    self.tree.is_parked(tree_id)):
            self._drop_parked(tree_id)
            for tree in self._trees():
                tree.remove(tree_id)
            self._release(request.request_id)
            self._on_waiting(request, -1)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        for request in requests:
            self.remove_request(request)

    def forget(self, request: Request) -> None:
        """The request finished or was aborted: out of the tree, whatever its state."""
        tree_id = self._ids.get(request.request_id)
        if tree_id is None:
            return
        if self.tree.is_active(tree_id):
            self.tree.finish(tree_id)
            # With the cached tree the id stays taken while it retains the request.
            self._release(request.request_id, reuse=self.cached is None)
            if self.cached is not None:
                self.cached.retain(tree_id)
                self._retained[request.request_id] = tree_id
        else:
            self.remove_request(request)  # waiting or parked

    def cache_lost(self, request_id: str) -> None:
        """vLLM's prefix cache evicted a block that request `request_id` released last, or it
        owns none any more (FeatherScheduler's owner accounting): the cached tree forgets it."""
        tree_id = self._retained.pop(request_id, None)
        if tree_id is not None:
            self.cached.forget(tree_id)
            self._free_ids.append(tree_id)
            self.forgotten += 1

    def has_waiting(self) -> bool:
        """Whether the tree has a proposal (parked requests wait, but not this round)."""
        return self.tree.num_waiting() > 0

    def __bool__(self) -> bool:
        return self._gate(self)

    def __len__(self) -> int:
        return self.tree.num_waiting() + len(self._parked)

    def __iter__(self) -> Iterator[Request]:
        return iter([self._requests[i] for i in sorted(self._requests)
                     if self.tree.is_waiting(i) or self.tree.is_parked(i)])


class GatedFcfsRequestQueue(FCFSRequestQueue):
    """vLLM's FCFS order, with the stop policy's gate in ``__bool__`` (selector ``fcfs``)."""

    def __init__(self, gate: Callable[["GatedFcfsRequestQueue"], bool]):
        super().__init__()
        self._gate = gate

    def best(self) -> tuple[Request, None] | None:
        return (self[0], None) if super().__len__() > 0 else None

    def has_waiting(self) -> bool:
        return super().__len__() > 0

    def peek_request(self) -> Request:
        # FCFSRequestQueue's asks `if not self`, which would ask the policy a second time.
        if not self.has_waiting():
            raise IndexError("peek from an empty queue")
        return self[0]

    def forget(self, request: Request) -> None:
        pass  # FCFS keeps nothing about running requests

    def skip(self, request: Request) -> bool:
        return False  # FCFS order cannot pass over its head: skip is stop, as in feather

    def unpark_all(self) -> None:
        pass

    def __bool__(self) -> bool:
        return self._gate(self)


@dataclasses.dataclass
class PluginStats:
    rounds: int = 0
    decisions: int = 0
    stops: int = 0  # a Stop that ended admission (not those overruled by an empty batch)
    skips: int = 0  # proposals passed over (StopDecision.skip, up to MAX_SKIPS_PER_ROUND a round)
    rewarded_steps: int = 0
    overlapped_steps: int = 0  # schedule() calls while a step was in flight (no admission)


class FeatherScheduler(Scheduler):
    """vLLM's Scheduler with a CHT waiting queue and a feather stop policy (module comment)."""

    # Set by configured(); None reads the environment (FEATHER_VLLM_CONFIG, ...).
    feather_config: PluginConfig | None = None

    @classmethod
    def configured(cls, config: PluginConfig) -> type["FeatherScheduler"]:
        """A subclass that runs `config` instead of reading the environment."""
        config.validate()
        return type(cls.__name__, (cls,), {"feather_config": config})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        config = self.feather_config or PluginConfig.from_environment()
        self.plugin_config = config
        self.policy = config.make_policy()
        self.step_time_source = config.step_time_source
        self.stats = PluginStats()
        self.last_feedback: feather.StepFeedback | None = None  # the latest reward's input
        hash_block = kwargs.get("hash_block_size") or self.block_size
        if config.selector == "cht" and not self.cache_config.enable_prefix_caching:
            logger.warning("feather scheduler: prefix caching is off, so vLLM computes no block "
                           "hashes and the CHT sees no shared prefix (its order is FCFS)")
        if config.selector == "cht":
            self.waiting = ChtRequestQueue(hash_block, self._admission_gate,
                                           partial_block=config.partial_block,
                                           on_waiting=self._shape_waiting,
                                           retain_cached=config.retain_cached)
        else:
            self.waiting = GatedFcfsRequestQueue(self._admission_gate)
        self._forming = False
        self._round_begun = False
        self._stopped = False
        self._skips = 0  # skips taken this round
        self._running_at_round_start = 0
        self._pool = self.kv_cache_manager.block_pool
        # The cached working set's eviction reports (PluginConfig.retain_cached), as feather's
        # KvCache::ReportEvictedOwners: a cached block's owner is the request that released it
        # last; the owner is reported when the pool evicts one of its blocks, and a request when
        # it owns none (others took its blocks over, or it released none of its own).
        self._owner_of: dict[int, str] = {}  # block id -> request id
        self._owned: dict[str, int] = {}  # request id -> cached blocks it owns
        if config.selector == "cht" and config.retain_cached:
            self._watch_cache()
        # The batch shape, for a policy that reads it (mpc, converge): module comment, point 3.
        self._shape: feather.BatchShapeTracker | None = None
        if self.policy.wants_batch_shape():
            self._shape = feather.BatchShapeTracker(self.block_size)
        self._shape_ids: dict[str, int] = {}  # vLLM request id -> tracker id
        self._shape_free_ids: list[int] = []
        self._shape_seen = 0  # running requests the tracker has taken this round
        # The step shape of each step in flight (module comment, point 3), by id(output).
        self._step_shapes: dict[int, dict[str, Any]] = {}
        self._cached_blocks: dict[str, int] = {}  # request id -> blocks cached at admission
        self._cascade_enabled = not getattr(self.vllm_config.model_config,
                                            "disable_cascade_attn", True)
        self._kv_total_blocks = self._pool.num_gpu_blocks - 1  # block 0 is vLLM's null block
        # Step timing: schedule() end times of steps in flight, oldest first, and the last output.
        self._in_flight: list[tuple[int, int]] = []  # (id(scheduler_output), end ns)
        self._last_output_ns = 0
        logger.info("feather scheduler: selector %s, policy %s", config.selector,
                    self.policy.name())

    # The gate (module comment, point 2).
    def _admission_gate(self, queue: Any) -> bool:
        if not queue.has_waiting():
            return False
        if not self._forming:
            return True
        if self._stopped:
            return False
        if len(self.running) + self.num_waiting_for_streaming_input >= self.max_num_active_reqs:
            return True  # vLLM's own max_num_seqs check ends the loop; the policy is not asked
        if not self._round_begun:
            self.policy.begin_round()
            self._round_begun = True
            self._skips = 0
            self._running_at_round_start = len(self.running)
            self.stats.rounds += 1
            if self._shape is not None:
                self._shape_begin_round()
        used_blocks = self._kv_total_blocks - self._pool.get_num_free_blocks()
        while True:
            best = queue.best()
            if best is None:
                return False  # every waiting request was passed over: nothing to propose
            request, signal = best
            context = feather.StopContext(
                batch_size=len(self.running),
                admitted_this_round=len(self.running) - self._running_at_round_start,
                signal=signal,
                waiting=len(queue),
                kv_used_blocks=used_blocks,
                kv_total_blocks=self._kv_total_blocks,
                candidate_blocks=-(-request.num_tokens // self.block_size),
                max_batch_requests=self.max_num_active_reqs)
            if self._shape is not None:
                self._shape_fill(context, request, used_blocks)
            self.stats.decisions += 1
            decision = self.policy.decide(context)
            if decision == feather.StopDecision.add or not self.running:
                return True
            # Skip: the queue parks the proposal and the policy is asked about the next one, as
            # feather's BuildBatch does; past the cap (or with FCFS order) a skip is a stop.
            if (decision == feather.StopDecision.skip and
                    self._skips < feather.MAX_SKIPS_PER_ROUND and queue.skip(request)):
                self._skips += 1
                self.stats.skips += 1
                continue
            self._stopped = True
            self.stats.stops += 1
            return False

    # The batch shape (module comment, point 3).
    def _shape_id(self, request: Request) -> int:
        sid = self._shape_ids.get(request.request_id)
        if sid is None:
            sid = self._shape_free_ids.pop() if self._shape_free_ids else len(self._shape_ids)
            self._shape_ids[request.request_id] = sid
        return sid

    @staticmethod
    def _chain(request: Request) -> list[int]:
        return [block_key(h) for h in request.block_hashes]

    def _shape_begin_round(self) -> None:
        """The tracker follows vLLM's running list: finished and preempted requests leave,
        requests admitted outside the gate's view enter; then the round starts."""
        shape = self._shape
        running = [self._shape_id(r) for r in self.running]
        if shape.members() != running:
            keep = set(running)
            for sid in shape.members():
                if sid not in keep:
                    shape.leave(sid)
            if shape.members() != running[:len(shape)]:  # order differs: start over
                for sid in shape.members():
                    shape.leave(sid)
            for sid, request in zip(running, self.running):
                if sid not in shape:
                    shape.enter(sid, self._chain(request))
        common = common_prefix_blocks(self) * self.block_size
        shape.begin_round([r.num_tokens for r in self.running], common)
        self._shape_seen = len(self.running)

    def _shape_waiting(self, request: Request, delta: int) -> None:
        if self._shape is not None:
            self._shape.waiting(self._chain(request), delta)

    def _shape_fill(self, context: feather.StopContext, request: Request,
                    used_blocks: int) -> None:
        shape = self._shape
        # Requests vLLM admitted since the last question of this round join the shape.
        for admitted in self.running[self._shape_seen:]:
            shape.admit(self._shape_id(admitted), self._chain(admitted), admitted.num_tokens)
        self._shape_seen = len(self.running)
        cached = 0
        if self.cache_config.enable_prefix_caching:
            _, cached, _ = self.kv_cache_manager.coordinator.find_longest_cache_hit(
                request.block_hashes, request.num_tokens - 1)
        shape.fill(context, self._shape_id(request), self._chain(request), request.num_tokens,
                   cached, used_blocks)

    def schedule(self, *args: Any, **kwargs: Any):
        # A step in flight (async scheduling): no admission in this call (module comment).
        overlapped = bool(self._in_flight)
        if overlapped:
            self.stats.overlapped_steps += 1
            if self.stats.overlapped_steps == 1:
                logger.info("feather scheduler: async scheduling; waiting requests are admitted "
                            "only by schedule() calls with no step in flight, one round per "
                            "executed step")
        self._forming, self._round_begun, self._stopped = True, False, overlapped
        try:
            output = super().schedule(*args, **kwargs)
        finally:
            self._forming = False
            self.waiting.unpark_all()  # the round's skips end with it
        if output.total_num_scheduled_tokens > 0:
            self._in_flight.append((id(output), time.monotonic_ns()))
            if self._shape is not None:
                self._step_shapes[id(output)] = self._step_shape(output)
        return output

    def _step_shape(self, output) -> dict[str, Any]:
        """StepFeedback's step shape of a step just scheduled, as feather's simulator computes
        it (Simulator::BuildPlan): decode reads, the distinct KV behind them (blocks in use less
        the prefill requests' uncached blocks), the common prefix, and whether the step
        qualifies for cascade (vLLM's thresholds, when vLLM's cascade attention is on)."""
        block = self.block_size
        blocks_of = self.kv_cache_manager.coordinator.single_type_managers[0].req_to_blocks
        # Blocks each request found cached when it was admitted (the simulator's cached_blocks):
        # new requests and those resumed from preemption are admitted in this step.
        for new in output.scheduled_new_reqs:
            self._cached_blocks[new.req_id] = new.num_computed_tokens // block
        cached = output.scheduled_cached_reqs
        for rid, computed in zip(cached.req_ids, cached.num_computed_tokens):
            if rid in cached.resumed_req_ids:
                self._cached_blocks[rid] = computed // block
        decode_kv = prefill_tokens = private = 0
        for rid, n in output.num_scheduled_tokens.items():
            request = self.requests[rid]
            # num_computed_tokens already counts this step's tokens (vLLM advanced it).
            if n == 1 and request.num_computed_tokens == request.num_tokens:
                decode_kv += request.num_computed_tokens  # context + 1
            else:
                prefill_tokens += n
                table = len(blocks_of.get(rid, ()))
                private += table - min(table, self._cached_blocks.get(rid, 0))
        used = self._kv_total_blocks - self._pool.get_num_free_blocks()
        common = common_prefix_blocks(self) * block
        return {"prefill_tokens": prefill_tokens, "decode_kv_tokens": decode_kv,
                "decode_kv_unique_tokens": min(decode_kv, (used - min(used, private)) * block),
                "common_prefix_tokens": common,
                "cascade_used": (self._cascade_enabled
                                 and common >= feather.CASCADE_MIN_PREFIX_TOKENS
                                 and len(output.num_scheduled_tokens)
                                 >= feather.CASCADE_MIN_REQUESTS)}

    def update_from_output(self, scheduler_output, model_runner_output):
        arrived_ns = time.monotonic_ns()
        scheduled = scheduler_output.num_scheduled_tokens
        feedback = None
        if scheduler_output.total_num_scheduled_tokens > 0:
            # Before vLLM appends the sampled tokens: a decode is one new token that reaches
            # the end of the sequence (feather's DecodesThisStep).
            decode_requests = 0
            for rid, n in scheduled.items():
                request = self.requests.get(rid)
                if request is not None and n == 1 and request.num_computed_tokens == \
                        request.num_tokens:
                    decode_requests += 1
            index = {rid: i for i, rid in enumerate(model_runner_output.req_ids)}
            sampled = model_runner_output.sampled_token_ids
            produced = sum(len(sampled[index[rid]]) for rid in scheduled if rid in index
                           and index[rid] < len(sampled))
            step_ns, priced = self._step_ns(scheduler_output, arrived_ns)
            prefill = decode_requests < len(scheduled)
            feedback = feather.StepFeedback(
                batch_size=len(scheduled), decode_tokens=produced, step_ns=step_ns,
                whole_step_ns=step_ns, decode_requests=decode_requests,
                decode_ns=(0 if decode_requests == 0 else step_ns if not prefill else -1))
            shape = self._step_shapes.pop(id(scheduler_output), None)
            if shape is not None:
                for key, value in shape.items():
                    setattr(feedback, key, value)
            if priced is not None:  # a step-time source that prices the step (plugin_check)
                feedback.decode_ns = int(priced["decode_ns"])
                feedback.cascade_used = bool(priced["cascade_used"])
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        if feedback is not None:
            self.policy.on_step_executed(feedback)
            self.last_feedback = feedback
            self.stats.rewarded_steps += 1
        return outputs

    def _step_ns(self, scheduler_output, arrived_ns: int) -> tuple[int, dict[str, Any] | None]:
        """The step's time in ns, and what a step-time source priced besides (a dict with
        decode_ns and cascade_used, or None)."""
        scheduled_ns = arrived_ns
        for i, (key, end_ns) in enumerate(self._in_flight):
            if key == id(scheduler_output):
                scheduled_ns = end_ns
                del self._in_flight[i]
                break
        measured = arrived_ns - max(scheduled_ns, self._last_output_ns)
        self._last_output_ns = arrived_ns
        if self.step_time_source is not None:
            source = self.step_time_source(scheduler_output)
            if isinstance(source, dict):
                return int(source["whole_step_ns"]), source
            return int(source), None
        return measured, None

    def _watch_cache(self) -> None:
        """Wraps the block pool's eviction and frees and the KV manager's free and deferred-free
        pop (all called through the instance) with the owner accounting of the cached working
        set. A request's blocks return to the pool either at once (``KVCacheManager.free``) or,
        where vLLM defers frees while a step that may write them is in flight (an async KV
        connector, ``Scheduler._free_request_blocks``), when that step's output arrives
        (``pop_blocks_for_free`` now, ``BlockPool.free_blocks`` of the popped blocks later): the
        release is accounted when it happens, in both cases."""
        pool, manager = self._pool, self.kv_cache_manager
        evict, free = pool._maybe_evict_cached_block, manager.free
        pop_for_free, free_blocks = manager.pop_blocks_for_free, pool.free_blocks
        blocks_of = manager.coordinator.single_type_managers[0].req_to_blocks
        deferred: dict[int, str] = {}  # block id -> the request whose deferred free returns it

        def evict_and_report(block, *args: Any, **kwargs: Any) -> bool:
            evicted = evict(block, *args, **kwargs)
            owner = self._owner_of.pop(block.block_id, None) if evicted else None
            if owner is not None:
                self.waiting.cache_lost(owner)
                self._disown(owner)
            return evicted

        def free_and_account(request: Request) -> None:
            rid = request.request_id
            # Blocks this free returns to the pool that stay cached: their last release.
            released = [b.block_id for b in blocks_of.get(rid, ())
                        if not b.is_null and b.ref_cnt == 1 and b.block_hash is not None]
            free(request)
            for block_id in released:
                self._own(block_id, rid)
            self._lose_if_owning_none(rid)

        def pop_and_defer(request: Request) -> list:
            blocks = pop_for_free(request)
            for block in blocks:
                if not block.is_null:
                    deferred[block.block_id] = request.request_id
            if not blocks:
                self.waiting.cache_lost(request.request_id)  # it owns nothing, as free says
            return blocks

        def free_and_account_deferred(ordered_blocks: Any) -> None:
            if not deferred:  # every free but a deferred one's: nothing to account here
                free_blocks(ordered_blocks)
                return
            blocks = list(ordered_blocks)
            free_blocks(blocks)
            releasers: list[str] = []
            for block in blocks:
                rid = deferred.get(block.block_id)
                if rid is None:
                    continue
                if rid not in releasers:
                    releasers.append(rid)
                if block.ref_cnt > 0:
                    continue  # another request still holds it: its release comes later
                del deferred[block.block_id]
                if block.block_hash is not None:
                    self._own(block.block_id, rid)
            for rid in releasers:
                self._lose_if_owning_none(rid)

        pool._maybe_evict_cached_block = evict_and_report
        manager.free = free_and_account
        manager.pop_blocks_for_free = pop_and_defer
        pool.free_blocks = free_and_account_deferred

    def _own(self, block_id: int, rid: str) -> None:
        """Request `rid` released cached block `block_id` last: it owns it now."""
        previous = self._owner_of.get(block_id)
        if previous == rid:
            return
        if previous is not None:
            self._disown(previous)
        self._owner_of[block_id] = rid
        self._owned[rid] = self._owned.get(rid, 0) + 1

    def _lose_if_owning_none(self, rid: str) -> None:
        """After `rid` released its blocks: owning no cached block, the cached tree forgets it."""
        if self._owned.get(rid, 0) == 0:
            self.waiting.cache_lost(rid)

    def _disown(self, owner: str) -> None:
        left = self._owned[owner] - 1
        if left > 0:
            self._owned[owner] = left
            return
        del self._owned[owner]
        self.waiting.cache_lost(owner)

    def _free_request(self, request: Request, *args: Any, **kwargs: Any):
        self.waiting.forget(request)
        self._cached_blocks.pop(request.request_id, None)
        sid = self._shape_ids.pop(request.request_id, None)
        if sid is not None:
            self._shape.leave(sid)
            self._shape_free_ids.append(sid)
        return super()._free_request(request, *args, **kwargs)

    def shutdown(self) -> None:
        if self.plugin_config.save:
            self.policy.save(self.plugin_config.save)
        logger.info("feather scheduler: %s", self.stats)
        super().shutdown()
