// simulator.h: the discrete-event serving loop. Replays a Workload through a candidate selector,
// a stop policy, a paged KV cache with prefix caching and an Engine, the way vLLM v1's scheduler
// runs a step, and records what happened (sim/serving/run_records.h).
//
// One iteration = one engine step:
//   1. requests that arrived by `now` enter the waiting queue (selector.OnArrival);
//   2. running requests are scheduled first, oldest admission first: a decode token each, or the
//      next chunk of an unfinished prefill, within the token budget. When the KV pool cannot
//      grow a request's table, the most recently admitted running request is preempted by
//      recompute (its blocks freed, back to the front of the waiting queue), as vLLM v1 does;
//   3. if nothing was preempted, waiting requests are admitted the paper's BuildBatch way: the
//      selector proposes, the stop policy answers Add or Stop, hard limits (max_num_seqs, token
//      budget, KV blocks) stop admission regardless; an empty batch takes its first candidate
//      even if the policy says Stop (the policy is still asked, so its counters see it);
//   4. the scheduler's CPU time is charged (measured | zero | fixed), the engine prices or runs
//      the step, tokens are produced, finished requests leave, and the stop policy gets the
//      step's decode throughput as its reward: tokens sampled by the step over the step time
//      (the authors' choice), or, with reward_decode_only, over the time the step's decode
//      requests alone would take (Engine::PriceDecodeOnly), so that the prefill of a newly
//      admitted prompt does not read as a slow step.
// Time only advances by scheduler time and step time, or jumps to the next arrival when idle.
// A closed-loop workload (Workload::predecessor, from `workload.trace.closed_loop`) holds a
// request whose trace time has come until its predecessor finishes (or is refused); it arrives
// then, and its RequestRecord::arrival_ns says when, so TTFT counts from the moment its user
// could have sent it.
//
// With `serving.engine: sglang` steps 2 and 3 follow SGLang instead (sglang_batcher.h): a step is
// a prefill batch formed by SGLang's PrefillAdder from the selector's order, or, when none forms,
// a decode step of the whole running batch, with retraction when its tokens do not fit. Steps 1
// and 4 and every record are the same.
//
// A request that can never be served is rejected, never left waiting (vLLM refuses such a
// request when it is added, or V0's scheduler marks it FINISHED_IGNORED when it comes up), and
// the others are still served: an empty prompt, a prompt whose prompt + output tokens need more
// KV blocks than the whole cache holds, or, with chunked prefill off, a prompt longer than the
// token budget are rejected on arrival (they never reach the selector); with chunked prefill off,
// a preempted request whose recompute (prompt + tokens generated so far) is longer than the
// token budget is rejected when it next comes up for admission. Each is listed in
// SimResult::unservable and counted in RunSummary::requests_unservable.
//
// Cost per step: O(running requests + admissions + finished requests), plus the selector's and
// policy's own costs. Per-request state lives in flat arrays indexed by request id.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/flat_hash_map.h"
#include "policies/batch_shape.h"
#include "policies/selector.h"
#include "policies/stop_policy.h"
#include "sim/engine/engine.h"
#include "sim/kv/kv_cache.h"
#include "sim/serving/run_records.h"
#include "sim/serving/serving_config.h"
#include "sim/serving/sglang_batcher.h"
#include "sim/workload/workload.h"

namespace feather {

struct SimProgress {
  int64_t now_ns = 0;
  uint64_t steps = 0;
  uint64_t finished = 0;
  uint64_t total = 0;
};

// Why a request can never be served (see the step structure above).
enum class UnservableReason : uint8_t {
  kEmptyPrompt,          // no prompt tokens
  kExceedsKvCache,       // prompt + output tokens need more KV blocks than the cache holds
  kPromptOverBudget,     // prompt longer than max_num_batched_tokens, chunked prefill off
  kRecomputeOverBudget,  // after a preemption: prompt + generated tokens over the budget, ditto
};
inline constexpr size_t kNumUnservableReasons = 4;

struct UnservableRequest {
  RequestId id = kNoRequest;
  UnservableReason reason = UnservableReason::kEmptyPrompt;
  uint64_t needed = 0;  // KV blocks (kExceedsKvCache) or tokens (the budget reasons)
  uint64_t limit = 0;   // the cache's blocks, or max_num_batched_tokens
};

// One step as the scheduler formed it (steps 1-3 above), before an engine runs it: the seam
// between scheduling and running. `batch`'s spans point into the simulator and stay valid until
// Complete() returns.
struct SchedulePlan {
  BatchPlan batch;
  int64_t scheduler_ns = 0;  // scheduler time charged before the step (already added to now)
  uint32_t admitted = 0;     // requests admitted while forming this batch
  // Requests preempted while forming this step, in preemption order (a conformance harness
  // compares them with vLLM's preempted_req_ids). Includes preemptions of scheduling rounds that
  // ended with an empty batch and were retried at the same time without a step.
  std::span<const RequestId> preempted;
};

struct SimResult {
  RunRecords records;
  RunSummary summary;
  std::vector<UnservableRequest> unservable;  // by request id
  // Every request finished or was rejected as unservable (false when a time or step limit hit).
  bool complete = false;
};

// One line for a user: how many requests can never be served, why (per reason, the largest need
// and the limit) and the first five ids, e.g. "2 of 5 requests can never be served and were
// rejected: 2 need more KV blocks for prompt + output than the whole cache holds (up to 251
// blocks; the cache has 4); requests 0, 3". Empty when `unservable` is. O(unservable).
[[nodiscard]] std::string DescribeUnservable(std::span<const UnservableRequest> unservable,
                                             uint64_t total_requests);

class Simulator {
 public:
  // The simulator borrows everything; `workload` must outlive Run(). kv_cache_blocks in
  // `config` must be resolved (non-zero).
  Simulator(const ServingConfig& config, const Workload& workload, CandidateSelector& selector,
            StopPolicy& policy, Engine& engine);

  // Runs until every request finished or a limit is hit. `progress`, when set, is called after
  // every `progress_every_steps`-th step (default: every step, so that a CLI polling SIGINT in
  // it reacts within one step even where a step costs a second of scheduler CPU; it must be
  // cheap: an atomic load, a clock read).
  [[nodiscard]] SimResult Run(const std::function<void(const SimProgress&)>& progress = {},
                              uint64_t progress_every_steps = 1);

  // The same loop one step at a time, for a caller that runs the step itself (another engine, a
  // conformance harness that feeds the step to vLLM's scheduler too): Run() is
  //   while (auto plan = Schedule()) Complete(*plan, engine.Execute(plan->batch));
  //   return TakeResult();
  // Schedule() advances time to the step (arrivals, idle gaps, scheduler time) and returns its
  // plan, or nullopt when every request finished or was rejected, or a limit was hit. Complete()
  // takes the plan with the step's timing (steps 4: tokens, finishes, the policy's reward); the
  // two alternate. TakeResult() ends the run (the simulator is spent).
  [[nodiscard]] std::optional<SchedulePlan> Schedule();
  void Complete(const SchedulePlan& plan, const StepTiming& timing);
  [[nodiscard]] SimResult TakeResult();
  // Simulated time now: after Schedule(), the moment the step it returned starts.
  [[nodiscard]] int64_t NowNs() const { return now_ns_; }
  // What the last completed step reported to the stop policy.
  [[nodiscard]] const StepFeedback& last_feedback() const { return last_feedback_; }
  // serving.engine sglang: SGLang's new_token_ratio now (its initial value under vllm).
  [[nodiscard]] double SglangNewTokenRatio() const { return sglang_.new_token_ratio(); }
  [[nodiscard]] double SglangMinNewTokenRatio() const { return sglang_.min_new_token_ratio(); }

 private:
  enum class Phase : uint8_t { kNotArrived, kWaiting, kRunning, kFinished, kRejected };
  static constexpr uint32_t kNoChain = 0xffffffffu;
  // The token an output position holds when a chain is extended over it. feather's outputs carry
  // no content; one constant token makes equal sequences continue equally, as greedy decoding
  // does (and as the conformance harness, which samples one fixed token, does in vLLM).
  static constexpr Token kOutputToken = 0;

  struct RequestState {
    uint32_t prompt_tokens = 0;
    uint32_t output_target = 0;
    uint32_t generated = 0;        // output tokens produced so far
    uint32_t computed_tokens = 0;  // tokens whose KV is in the cache (hits included)
    uint32_t new_tokens = 0;       // scheduled this step
    uint32_t cached_blocks = 0;    // prefix-cache hit of the current admission, in blocks
    int64_t last_token_ns = -1;
    Phase phase = Phase::kNotArrived;
    // Index into resume_chains_ once the request was preempted past its prompt, else kNoChain.
    uint32_t resume_chain = kNoChain;
    [[nodiscard]] uint32_t SequenceTokens() const { return prompt_tokens + generated; }
    // This step's work is one decode token (else a prefill chunk, which may end in a token).
    [[nodiscard]] bool DecodesThisStep() const {
      return new_tokens == 1 && computed_tokens + 1 == SequenceTokens();
    }
  };

  // serving.warm_prefix_cache: caches every prompt's shared head (its full blocks) before time 0.
  void WarmPrefixCache();
  void DeliverArrivals();
  // One request enters the waiting queue now (or is refused, as vLLM's add_request does).
  void Deliver(RequestId id);
  // Closed-loop replay (Workload::predecessor): the requests held for `id` arrive now, as it
  // finished or was refused.
  void ReleaseSuccessors(RequestId id);
  // Passes the KV cache's eviction log to a selector that asked for it (WantsCacheEvictions).
  void DeliverEvictions();
  // Step 2; returns true when a preemption happened.
  bool ScheduleRunning(uint32_t& budget_tokens);
  void AdmitWaiting(uint32_t& budget_tokens);
  // The StopContext fields every engine's admission fills (batch, queue, KV occupancy, the
  // candidate's blocks); the batch shape is AdmitWaiting's addition.
  [[nodiscard]] StopContext BaseStopContext(const Candidate& candidate, uint32_t sequence) const;
  // serving.engine sglang (simulator_sglang.cc): forms the step, a prefill batch or else a decode
  // step; returns true when requests were retracted. `ranked`: the selector ranked its queue.
  bool ScheduleSglang(bool& ranked);
  // SGLang's get_new_batch_prefill: the chunked request first, then waiting requests through
  // PrefillAdder; returns the requests with prefill work this step.
  uint32_t AdmitSglang(size_t decoding);
  // SGLang's update_running_batch: check_decode_mem, retract_decode, one token each.
  bool DecodeSglang();
  // Blocks a decode token of `id` needs beyond its table (0 or 1).
  [[nodiscard]] uint32_t DecodeBlocksNeeded(RequestId id) const;
  // The KV cache's side of the batch shape (policies/batch_shape.h): the requests' chains and
  // the leading blocks of a request's table that enough requests hold (reference counts).
  class ShapeSource final : public BatchShape::Source {
   public:
    explicit ShapeSource(const Simulator& sim) : sim_(sim) {}
    [[nodiscard]] ChainView ChainOf(RequestId id) const override { return sim_.ChainOf(id); }
    [[nodiscard]] uint32_t HeldPrefixBlocks(RequestId id, uint32_t holders) const override;

   private:
    const Simulator& sim_;
  };
  // `id` starts (+1: arrival, preemption) or stops (-1: admission, cancellation) waiting, as the
  // selector is told: the batch shape's per-group waiting counts, for a policy that reads them.
  void CountWaiting(RequestId id, int delta) {
    if (policy_.WantsBatchShape()) batch_shape_.Waiting(ChainOf(id), delta);
  }
  void Preempt(RequestId victim);
  // Caches the blocks a request's scheduled tokens fill (vLLM v1 caches them when it allocates
  // them, not after the step), so a request scheduled later in the same step hits them.
  void RegisterScheduledBlocks(RequestId id, uint32_t new_tokens);
  // The reason a request arriving now can never be served, if any (arrival-time checks).
  [[nodiscard]] std::optional<UnservableRequest> UnservableOnArrival(RequestId id) const;
  // Marks `id` rejected (it is not waiting in the selector, or has just been cancelled there).
  void Reject(const UnservableRequest& rejected);
  [[nodiscard]] BatchPlan BuildPlan();
  // Step 4 for the step `plan` described, after the engine ran it (the plan's spans still
  // point at the scheduling state: nothing may change it before this returns).
  void CompleteStep(const BatchPlan& plan, const StepTiming& timing, int64_t scheduler_ns,
                    int64_t reward_ns, int64_t decode_ns);
  // Engine time of the step's decode requests alone (Engine::PriceDecodeOnly): the whole step
  // when it holds no prefill, 0 when it holds no decode, -1 when the engine cannot price it.
  [[nodiscard]] int64_t DecodeStepNs(const BatchPlan& plan, const StepTiming& timing);
  // The step's time for the stop policy's reward (see the step structure above).
  [[nodiscard]] int64_t RewardStepNs(const BatchPlan& plan, const StepTiming& timing,
                                     int64_t decode_ns) const;
  void FinishRequest(RequestId id);
  // The request's block-hash chain: its prompt's, or after a preemption past the prompt, its
  // resume chain (the prompt's, continued over the output blocks it had computed).
  [[nodiscard]] ChainView ChainOf(RequestId id) const {
    const uint32_t r = state_[id].resume_chain;
    return r == kNoChain ? chains_.ChainOf(id) : ChainView(resume_chains_[r]);
  }
  // Before a preemption frees the victim's blocks: extends its chain over the full blocks of
  // output it computed and registers them, as vLLM v1 caches generated-token blocks, so the
  // resumed request hits its own output while those blocks survive in the free queue.
  void CacheOutputBlocks(RequestId id);
  void ReleaseResumeChain(RequestId id);
  [[nodiscard]] RunSummary Summarize() const;

  // Timed calls into the selector and policy (charged under kMeasured).
  template <typename Fn>
  decltype(auto) Timed(Fn&& fn) {
    if (config_.scheduler_time != SchedulerTimeMode::kMeasured) return fn();
    struct Charge {
      int64_t& sink;
      std::chrono::steady_clock::time_point start;
      ~Charge() {
        sink += std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now() - start)
                    .count();
      }
    } charge{pending_scheduler_ns_, std::chrono::steady_clock::now()};
    return fn();
  }
  // `scheduler_time: engine`: the round's cost in the real engine (engine_cost.h), from the
  // inputs counted when the round began and what AdmitWaiting admitted.
  [[nodiscard]] int64_t EngineSchedulerNs(EngineRound round, bool ranked) const;

  ServingConfig config_;
  const Workload& workload_;
  CandidateSelector& selector_;
  StopPolicy& policy_;
  Engine& engine_;
  KvCache kv_;
  // serving.engine sglang only: SGLang's scheduler state, DecodeSglang's scratch.
  SglangBatcher sglang_;
  std::vector<SglangRetractCandidate> retract_scratch_;
  // The batch shape for a stop policy that reads it (rebuilt each round in AdmitWaiting).
  ShapeSource shape_source_{*this};
  BatchShape batch_shape_;

  std::vector<RequestState> state_;
  PromptChains chains_;  // every prompt's block-hash chain, shared heads' hashes stored once
  // Resume chains of preempted requests (prompt chain + output blocks), recycled through a free
  // list when their request finishes; only preemption past the prompt allocates here.
  std::vector<std::vector<PrefixHash>> resume_chains_;
  std::vector<uint32_t> free_resume_chains_;
  std::vector<Token> output_tokens_scratch_;
  std::vector<RequestId> running_;       // admission order (victim = back)
  std::vector<RequestId> scratch_ids_;
  std::vector<RequestId> preempted_this_step_;  // SchedulePlan::preempted
  std::vector<StepRequest> plan_requests_;
  std::vector<StepRequest> decode_requests_;  // RewardStepNs scratch
  // Inter-token gaps, for TBT statistics: their sum (in the order they occur) and how often each
  // distinct value occurs (key: the float's bits). A run has far fewer distinct gaps (step
  // durations) than gaps (one per generated token: 4 M at 20K requests), so this gives the exact
  // mean and p99 in O(distinct gaps) memory instead of a vector of every gap.
  double token_gap_sum_ms_ = 0;
  uint64_t token_gaps_ = 0;
  // Counts in token_gap_counts_ lag by the current run of equal gaps (FlushGapRun adds it);
  // mutable so that Summarize() const can flush.
  mutable FlatHashMap<uint32_t, uint64_t> token_gap_counts_;
  mutable uint32_t gap_run_bits_ = 0;
  mutable uint64_t gap_run_length_ = 0;
  void FlushGapRun(uint32_t next_bits) const;
  RunRecords records_;
  StepFeedback last_feedback_;
  std::vector<UnservableRequest> unservable_;

  int64_t now_ns_ = 0;
  int64_t pending_scheduler_ns_ = 0;  // measured selector/policy time not yet charged
  size_t next_arrival_ = 0;
  // Closed-loop replay: requests whose trace time has come while their predecessor had not
  // finished wait on it in a FIFO list threaded through held_next_ (per predecessor: its first
  // and last held request), then join released_ when it finishes, to be delivered (arriving at
  // that moment) by the next DeliverArrivals. Empty vectors in open-loop runs.
  std::vector<RequestId> held_first_;
  std::vector<RequestId> held_last_;
  std::vector<RequestId> held_next_;
  std::vector<RequestId> released_;
  size_t held_ = 0;  // requests held or released but not yet delivered
  uint64_t finished_ = 0;
  uint64_t preemptions_ = 0;
  uint64_t rejected_ = 0;
  uint64_t admitted_prompt_tokens_ = 0;  // Σ prompt tokens of requests admitted at least once
  // Requests waiting for admission after the first step at or after the last arrival; set by
  // that step (last_arrived_ says the last request has arrived, waiting_recorded_ that it is set).
  uint64_t waiting_at_last_arrival_ = 0;
  bool last_arrived_ = false;
  bool waiting_recorded_ = false;
  bool awaiting_completion_ = false;  // Schedule() returned a plan Complete() has not taken
  uint32_t admitted_this_step_ = 0;
  uint32_t prefill_requests_this_step_ = 0;
};

}  // namespace feather
