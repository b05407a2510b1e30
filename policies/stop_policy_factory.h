// stop_policy_factory.h: builds a StopPolicy from its scenario name and one flat options struct.
//
// Names: always | heuristic | bandit | qlearning | dynamic-batching. An unknown name, or an
// option out of range, throws std::invalid_argument (the message lists the valid names, or every
// bad option with its value and constraint); the scenario loader adds file:line.
// Complexity: O(1) apart from the tables' zero-initialization (≈ 42 KiB for bandit/qlearning).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "policies/policy_state.h"
#include "policies/stop_policy.h"

namespace feather {

struct StopPolicyOptions {
  uint64_t seed = 1;
  // heuristic (authors' constants)
  uint32_t heuristic_max_loss_chunks = 5;
  uint32_t heuristic_relaxed_loss_chunks = 7;
  uint32_t heuristic_relaxed_min_peers = 10;
  uint32_t heuristic_floor_cap = 10;
  // UCB bandit
  double bandit_exploration = 200.0;  // c
  // Q-learning
  double q_learning_rate = 0.1;  // alpha
  double q_discount = 0.9;       // gamma
  double q_epsilon_start = 1.0;
  double q_epsilon_min = 0.05;
  uint64_t q_epsilon_decay_decisions = 20000;  // linear decay over this many decisions
  // Dynamic Batching
  double dynamic_latency_target_ms = 50.0;  // step-time (TBT) target
  double dynamic_memory_fraction = 0.95;    // KV-use ceiling
  // Added beyond the lead's list:
  StateBins state_bins = StateBins::kAuthors;  // bandit and qlearning discretization
  double dynamic_forgetting = 0.99;            // fit's per-step decay, (0, 1]; 1 = plain LSQ
};

[[nodiscard]] std::span<const std::string_view> StopPolicyNames();

// Every out-of-range option as "field = value: constraint" (empty when all are valid). Only the
// fields of the named policy are checked; an unknown name yields no errors here.
[[nodiscard]] std::vector<std::string> StopPolicyOptionErrors(std::string_view name,
                                                              const StopPolicyOptions& options);

[[nodiscard]] std::unique_ptr<StopPolicy> MakeStopPolicy(std::string_view name,
                                                         const StopPolicyOptions& options = {});

}  // namespace feather
