// policy_state.h: the plain data the learning stop policies share — the discretized state
// (b, Δ, w) of paper §4.2, the flat (state, action) tables of the UCB bandit and of Q-learning,
// the step reward, and a tiny seeded generator. No I/O: policies/stop_policy_io.h serializes
// these structs.
//
// Discretization lives here and only here. Three schemes, each mapping to at most 11 bins per
// dimension so that all share one 11×11×11×2 table layout:
//   kAuthors      (default; the authors' public code): b̂ = min(b/4, 10), Δ̂ = clamp(Δ, −5, 5)
//                 stored as Δ + 5, ŵ = min(w/4, 10).
//   kExponential  (the paper's wording): b̂ and ŵ in exponential bins 0, 1, 2–3, 4–7, ...,
//                 i.e. bit_width(x) capped at 10 (x ≥ 512 shares the last bin); Δ̂ in coarse
//                 thresholds {≤0, 1–2, 3–5, ≥6} → 0..3.
//   kCascade      (issue 15 item 2: what the decision needs) b̂ as kExponential;
//                 Δ̂ = the batch's cascade status: 0 = it shares a cascade-worthy prefix (at
//                 least kCascadeMinPrefixTokens leading tokens common to all its requests) that
//                 the candidate would end; otherwise (mixed) 1 + 3·in + share, in = whether the
//                 candidate belongs to the batch's largest group sharing its first
//                 kCascadeMinPrefixTokens tokens, share = that group's part of the batch
//                 (< 1/2, < 7/8, else): how close the batch is to qualifying → 1..6;
//                 ŵ = 3 · KV occupancy (blocks in use / pool: < 1/2, < 9/10, else) + the prefill
//                 backlog (requests waiting: < 16, < 256, else) → 0..8. It reads the batch shape
//                 (StopContext's batch fields): a policy using it WantsBatchShape(). A candidate
//                 that keeps the batch's cascade prefix is a free addition (never a table state).
// Without a prefix signal (every selector but the CHT) the observation is Δ = 0 and
// w = the number of waiting requests.
//
// Complexity: Observe, Discretize, StateIndex, CellIndex and the step rewards are O(1) and allocation-free; the tables are fixed-size arrays (2,662 cells each).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <optional>
#include <string_view>

#include "base/cascade_rule.h"  // kCascadeMinPrefixTokens
#include "base/splitmix64.h"  // the policies' generator (SplitMix64), re-exported here
#include "policies/stop_policy.h"

namespace feather {

enum class StateBins : uint8_t { kAuthors, kExponential, kCascade };

[[nodiscard]] constexpr std::string_view StateBinsName(StateBins bins) {
  switch (bins) {
    case StateBins::kExponential:
      return "exponential";
    case StateBins::kCascade:
      return "cascade";
    case StateBins::kAuthors:
      break;
  }
  return "authors";
}
// nullopt for an unknown name (valid: "authors", "exponential", "cascade").
[[nodiscard]] constexpr std::optional<StateBins> ParseStateBins(std::string_view name) {
  if (name == "authors") return StateBins::kAuthors;
  if (name == "exponential") return StateBins::kExponential;
  if (name == "cascade") return StateBins::kCascade;
  return std::nullopt;
}
// The largest middle-dimension bin of a scheme (the saved tables' check).
[[nodiscard]] constexpr uint32_t MaxDeltaBin(StateBins bins) {
  return bins == StateBins::kAuthors ? 10 : bins == StateBins::kExponential ? 3 : 6;
}

inline constexpr uint32_t kBinsPerDimension = 11;
inline constexpr uint32_t kNumStates = kBinsPerDimension * kBinsPerDimension * kBinsPerDimension;
inline constexpr uint32_t kNumActions = 2;  // index = static_cast<uint32_t>(StopDecision)
inline constexpr uint32_t kNumCells = kNumStates * kNumActions;

// The raw (undiscretized) observation for one proposal.
struct Observation {
  uint32_t batch_size = 0;      // b
  int64_t tip_loss_chunks = 0;  // Δ = tip before − tip after (signed: an empty batch may report
                                // a tip that grows)
  uint32_t peers = 0;           // w
  bool has_tip = false;         // a signal is present and its tip before is non-zero
  // kCascade only (from the batch shape): 0 no cascade-worthy common prefix, 1 the candidate
  // keeps it, 2 the candidate ends it; for a batch without one, whether the candidate is in its
  // largest group (first kCascadeMinPrefixTokens tokens shared) and that group's share 0..2
  // (< 1/2, < 7/8, else); KV occupancy 0..2 (< 1/2, < 9/10, else); waiting requests.
  uint8_t cascade = 0;
  bool in_largest_group = false;
  uint32_t largest_group_requests = 0;  // that group's requests in the batch
  uint32_t largest_group_waiting = 0;   // and its waiting requests (0 = not told)
  uint8_t group_share = 0;
  uint8_t kv_occupancy = 0;
  uint32_t waiting = 0;
};

[[nodiscard]] inline Observation Observe(const StopContext& context) {
  Observation o;
  o.batch_size = context.batch_size;
  if (context.signal) {
    o.tip_loss_chunks = static_cast<int64_t>(context.signal->tip_before_chunks) -
                        static_cast<int64_t>(context.signal->tip_after_chunks);
    o.peers = context.signal->peers;
    o.has_tip = context.signal->tip_before_chunks > 0;
  } else {
    o.peers = context.waiting;
  }
  o.waiting = context.waiting;
  if (context.batch_common_prefix_tokens >= kCascadeMinPrefixTokens) {
    o.cascade = context.candidate_common_prefix_tokens >= kCascadeMinPrefixTokens ? 1 : 2;
  }
  static_assert(StopContext::kPrefixGroupDepths[0] == kCascadeMinPrefixTokens);
  const StopContext::PrefixGroup& group = context.largest_groups[0];
  o.in_largest_group = group.candidate_in;
  o.largest_group_requests = group.requests;
  o.largest_group_waiting = group.waiting;
  if (context.batch_size > 0) {
    const uint64_t m = group.requests;
    o.group_share = m * 2 < context.batch_size   ? 0
                    : m * 8 < context.batch_size * 7 ? 1
                                                     : 2;
  }
  if (context.kv_total_blocks > 0) {
    const uint64_t used = context.kv_used_blocks;
    o.kv_occupancy = used * 2 < context.kv_total_blocks       ? 0
                     : used * 10 < context.kv_total_blocks * 9 ? 1
                                                               : 2;
  }
  return o;
}

// A discretized state: one bin index per dimension, each below kBinsPerDimension.
struct StateKey {
  uint8_t b_bin = 0;
  uint8_t delta_bin = 0;
  uint8_t w_bin = 0;
  friend bool operator==(const StateKey&, const StateKey&) = default;
};

namespace policy_state_internal {
[[nodiscard]] constexpr uint8_t ExponentialBin(uint32_t x) {
  return static_cast<uint8_t>(
      std::min<uint32_t>(static_cast<uint32_t>(std::bit_width(x)), kBinsPerDimension - 1));
}
[[nodiscard]] constexpr uint8_t LinearBin(uint32_t x) {
  return static_cast<uint8_t>(std::min<uint32_t>(x / 4, kBinsPerDimension - 1));
}
}  // namespace policy_state_internal

[[nodiscard]] constexpr StateKey Discretize(const Observation& o, StateBins bins) {
  using policy_state_internal::ExponentialBin;
  using policy_state_internal::LinearBin;
  StateKey key;
  if (bins == StateBins::kAuthors) {
    key.b_bin = LinearBin(o.batch_size);
    key.delta_bin = static_cast<uint8_t>(std::clamp<int64_t>(o.tip_loss_chunks, -5, 5) + 5);
    key.w_bin = LinearBin(o.peers);
  } else if (bins == StateBins::kCascade) {
    key.b_bin = ExponentialBin(o.batch_size);
    key.delta_bin = o.cascade != 0 ? 0
                                   : static_cast<uint8_t>(1 + 3 * (o.in_largest_group ? 1 : 0) +
                                                          o.group_share);
    const uint8_t backlog = o.waiting < 16 ? 0 : o.waiting < 256 ? 1 : 2;
    key.w_bin = static_cast<uint8_t>(3 * o.kv_occupancy + backlog);
  } else {
    key.b_bin = ExponentialBin(o.batch_size);
    const int64_t d = o.tip_loss_chunks;
    key.delta_bin = d <= 0 ? 0 : d <= 2 ? 1 : d <= 5 ? 2 : 3;
    key.w_bin = ExponentialBin(o.peers);
  }
  return key;
}

[[nodiscard]] constexpr uint32_t StateIndex(const StateKey& key) {
  return (uint32_t{key.b_bin} * kBinsPerDimension + key.delta_bin) * kBinsPerDimension + key.w_bin;
}
[[nodiscard]] constexpr StateKey StateKeyAt(uint32_t state_index) {
  StateKey key;
  key.w_bin = static_cast<uint8_t>(state_index % kBinsPerDimension);
  key.delta_bin = static_cast<uint8_t>((state_index / kBinsPerDimension) % kBinsPerDimension);
  key.b_bin = static_cast<uint8_t>(state_index / (kBinsPerDimension * kBinsPerDimension));
  return key;
}
[[nodiscard]] constexpr uint32_t CellIndex(uint32_t state_index, StopDecision action) {
  return state_index * kNumActions + static_cast<uint32_t>(action);
}

// Reward of an executed step: decode throughput in tokens/s; nullopt when the step has no
// duration (no reward can be computed; the pending decisions are dropped).
[[nodiscard]] inline std::optional<double> StepRewardTokensPerS(const StepFeedback& feedback) {
  if (feedback.step_ns <= 0) return std::nullopt;
  return static_cast<double>(feedback.decode_tokens) /
         (static_cast<double>(feedback.step_ns) * 1e-9);
}

// Decode throughput of an executed step in requests/s (one token per decoding request): its
// decode requests over its decode part's time (StepFeedback::decode_ns); a step the engine did
// not split counts whole, with the tokens it sampled. nullopt for a step that decoded nothing
// (prefill only) or has no duration.
[[nodiscard]] inline std::optional<double> StepDecodeRate(const StepFeedback& feedback) {
  if (feedback.decode_ns >= 0) {
    if (feedback.decode_ns == 0 || feedback.decode_requests == 0) return std::nullopt;
    return static_cast<double>(feedback.decode_requests) /
           (static_cast<double>(feedback.decode_ns) * 1e-9);
  }
  const int64_t ns = feedback.whole_step_ns > 0 ? feedback.whole_step_ns : feedback.step_ns;
  if (ns <= 0 || feedback.decode_tokens == 0) return std::nullopt;
  return static_cast<double>(feedback.decode_tokens) / (static_cast<double>(ns) * 1e-9);
}

// The authors' reward (their public code): final batch size over the batch's whole execution
// time, in requests/s; nullopt when the step has no duration.
[[nodiscard]] inline std::optional<double> StepRewardBatchPerS(const StepFeedback& feedback) {
  const int64_t ns = feedback.whole_step_ns > 0 ? feedback.whole_step_ns : feedback.step_ns;
  if (ns <= 0) return std::nullopt;
  return static_cast<double>(feedback.batch_size) / (static_cast<double>(ns) * 1e-9);
}

// UCB bandit statistics. Invariant: total_decisions == Σ count (S of the UCB formula counts the
// decisions whose reward has been credited).
struct BanditTables {
  std::array<uint64_t, kNumCells> count{};
  std::array<double, kNumCells> reward_sum{};
  uint64_t total_decisions = 0;
};

// Q-learning table. Q starts at 0; visits counts updates per cell (for reports and for the
// sparse save format); decisions counts learning decisions and drives the ε schedule.
struct QTables {
  std::array<double, kNumCells> q{};
  std::array<uint64_t, kNumCells> visits{};
  uint64_t decisions = 0;
};

}  // namespace feather
