// stop_policy.h: the stop-policy interface (paper §4.2, BuildBatch): while forming a batch, the
// selector proposes the next waiting request and the stop policy answers Add or Stop.
//
// The serving loop drives a policy like this, once per engine step:
//
//   policy.BeginRound(round_context);
//   while (auto c = selector.Next()) {
//     const StopDecision d = policy.Decide(context_for(c));
//     if (d == StopDecision::kSkip && skips++ < kMaxSkipsPerRound && selector.Skip(c->id)) {
//       continue;                          // not this one: the selector proposes its next
//     }
//     if (d != StopDecision::kAdd) break;  // kStop (or a skip the selector or the cap refused)
//     selector.Admit(c->id);
//   }
//   ... the step executes ...
//   policy.OnStepExecuted(feedback);   // reward for every decision taken since BeginRound
//
// Decide() must be cheap (it runs once per proposal); learning happens in OnStepExecuted().
// A policy with learning() == false never changes its tables (a frozen, pretrained policy).
// Policies hold no I/O: their tables are plain structs (policies/policy_state.h) that
// policies/stop_policy_io.h saves to and loads from JSON.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "policies/selector.h"

namespace feather {

// kAdd admits the proposal; kStop closes the batch; kSkip passes over the proposal for the rest
// of this round and asks the selector for its next (CandidateSelector::Skip), so a policy can
// hold one request back without ending the round. A selector that cannot skip, or a round that
// has skipped kMaxSkipsPerRound times already, takes kSkip as kStop. An empty batch takes its
// first candidate whatever the decision (every policy of the paper admits into an empty batch).
enum class StopDecision : uint8_t { kAdd, kStop, kSkip };
// Bounds a round's cost when most proposals are passed over (each skip is one FindBest and one
// park in the CHT, O(D + log q)); an assumed constant, the same for every scenario.
inline constexpr uint32_t kMaxSkipsPerRound = 64;

// What the policy sees for one proposal.
struct StopContext {
  uint32_t batch_size = 0;           // b: requests already in the batch (running + admitted)
  uint32_t admitted_this_round = 0;  // of which admitted since BeginRound
  std::optional<PrefixSignal> signal;  // Δ and w (CHT selector only; absent for the others)
  uint32_t waiting = 0;              // requests waiting, the candidate included
  // KV memory, for Dynamic Batching: blocks in use now, blocks in the pool, and the blocks the
  // candidate's prompt would need (prefix-cache hits not subtracted).
  uint64_t kv_used_blocks = 0;
  uint64_t kv_total_blocks = 0;
  uint32_t candidate_blocks = 0;
  // The serving limit on running requests (vLLM's max_num_seqs); 0 = not told. With the pool's
  // size it bounds the batch a policy can expect to form if it keeps admitting (converge).
  uint32_t max_batch_requests = 0;
  // The batch's decode shape and the candidate's effect on it, for policies that predict step
  // time (mpc; filled only when WantsBatchShape()). The batch = running + admitted this round.
  uint64_t batch_kv_tokens = 0;             // Σ sequence tokens: KV a decode step would read
  uint64_t batch_unique_kv_tokens = 0;      // distinct KV tokens held (blocks in use)
  uint32_t batch_common_prefix_tokens = 0;  // leading tokens every batch request shares
  uint32_t candidate_tokens = 0;            // the candidate's sequence length
  uint32_t candidate_cached_tokens = 0;     // its prefix-cache hit
  uint32_t candidate_common_prefix_tokens = 0;  // what the batch would share with it admitted
  uint32_t kv_block_tokens = 0;                 // tokens per KV block (kv_*_blocks' unit)
  // The batch's largest prefix group at each depth of kPrefixGroupDepths (requests sharing their
  // first 256, 512, ... 16K tokens): how many requests, the leading tokens all of them share, and
  // whether the candidate belongs to it. What the batch would decode like if it kept only that
  // group. requests = 0 where no request of the batch is that long.
  struct PrefixGroup {
    uint32_t requests = 0;
    uint32_t prefix_tokens = 0;
    bool candidate_in = false;
    uint32_t waiting = 0;  // waiting requests with the group's key (0 = none or not told)
    bool nested = false;   // its requests are of the first depth's largest group
  };
  static constexpr std::array<uint32_t, 7> kPrefixGroupDepths = {256,  512,  1024, 2048,
                                                                  4096, 8192, 16384};
  std::array<PrefixGroup, kPrefixGroupDepths.size()> largest_groups{};
};

// What the executed step reports back. Reward = decode throughput = decode_tokens / step time
// (bandit-authors: batch_size / whole_step_ns, the authors' code; bandit-delayed: decode_requests
// / decode_ns summed over the K steps after a decision, bandit_policy.h).
struct StepFeedback {
  uint32_t batch_size = 0;     // requests in the executed step
  uint32_t decode_tokens = 0;  // tokens generated by the step
  // Engine time of the step the reward is priced on (scheduler.reward_time): the whole step, or
  // with decode-only its decode requests alone; scheduler time excluded.
  int64_t step_ns = 0;
  // Engine time of the whole step, whatever reward_time says; 0 = the same as step_ns (callers
  // that do not tell them apart).
  int64_t whole_step_ns = 0;
  // Engine time of the step's decode requests alone (what a step without its prefill chunks
  // would take): the whole step when it holds no prefill, 0 when it holds no decode; -1 = not
  // priced (callers that cannot tell; bandit-delayed then counts the whole step as decode).
  int64_t decode_ns = -1;
  // Requests that decoded in the step (prefill chunks excluded, also those that sampled their
  // first token); used with decode_ns.
  uint32_t decode_requests = 0;
  // The step's shape (BatchPlan, StepTiming), for policies that fit step time (mpc).
  uint64_t prefill_tokens = 0;
  uint64_t decode_kv_tokens = 0;         // Σ decode requests' context (+1)
  uint64_t decode_kv_unique_tokens = 0;  // distinct KV tokens behind those reads
  uint32_t common_prefix_tokens = 0;     // leading tokens all the step's requests share
  bool cascade_used = false;
};

class StopPolicy {
 public:
  virtual ~StopPolicy() = default;
  [[nodiscard]] virtual std::string_view Name() const = 0;

  virtual void BeginRound() = 0;
  [[nodiscard]] virtual StopDecision Decide(const StopContext& context) = 0;
  // Whether Decide reads StopContext's batch shape (the caller may skip computing it).
  [[nodiscard]] virtual bool WantsBatchShape() const { return false; }
  virtual void OnStepExecuted(const StepFeedback& feedback) = 0;

  // Frozen policies act greedily on their tables and never update them.
  [[nodiscard]] bool learning() const { return learning_; }
  void set_learning(bool learning) { learning_ = learning; }

 private:
  bool learning_ = true;
};

}  // namespace feather
