// stop_policy_factory.cc: name -> stop policy (see stop_policy_factory.h).
#include "policies/stop_policy_factory.h"

#include <array>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "policies/always_add_policy.h"
#include "policies/bandit_policy.h"
#include "policies/dynamic_batching_policy.h"
#include "policies/heuristic_policy.h"
#include "policies/qlearning_policy.h"

namespace feather {
namespace {

constexpr std::array<std::string_view, 5> kNames = {"always", "heuristic", "bandit", "qlearning",
                                                    "dynamic-batching"};

// Appends "field = value: constraint" when !ok.
void Require(bool ok, std::string_view field, double value, std::string_view constraint,
             std::vector<std::string>& errors) {
  if (ok) return;
  std::ostringstream out;
  out << field << " = " << value << ": " << constraint;
  errors.push_back(out.str());
}

}  // namespace

std::span<const std::string_view> StopPolicyNames() { return kNames; }

std::vector<std::string> StopPolicyOptionErrors(std::string_view name, const StopPolicyOptions& o) {
  std::vector<std::string> errors;
  if (name == "heuristic") {
    Require(o.heuristic_relaxed_loss_chunks >= o.heuristic_max_loss_chunks,
            "heuristic_relaxed_loss_chunks", o.heuristic_relaxed_loss_chunks,
            "must be >= heuristic_max_loss_chunks", errors);
  } else if (name == "bandit") {
    Require(std::isfinite(o.bandit_exploration) && o.bandit_exploration >= 0, "bandit_exploration",
            o.bandit_exploration, "must be finite and >= 0", errors);
  } else if (name == "qlearning") {
    Require(o.q_learning_rate > 0 && o.q_learning_rate <= 1, "q_learning_rate", o.q_learning_rate,
            "must be in (0, 1]", errors);
    Require(o.q_discount >= 0 && o.q_discount <= 1, "q_discount", o.q_discount, "must be in [0, 1]",
            errors);
    Require(o.q_epsilon_start >= 0 && o.q_epsilon_start <= 1, "q_epsilon_start", o.q_epsilon_start,
            "must be in [0, 1]", errors);
    Require(o.q_epsilon_min >= 0 && o.q_epsilon_min <= o.q_epsilon_start, "q_epsilon_min",
            o.q_epsilon_min, "must be in [0, q_epsilon_start]", errors);
  } else if (name == "dynamic-batching") {
    Require(std::isfinite(o.dynamic_latency_target_ms) && o.dynamic_latency_target_ms > 0,
            "dynamic_latency_target_ms", o.dynamic_latency_target_ms, "must be finite and > 0",
            errors);
    Require(o.dynamic_memory_fraction > 0 && o.dynamic_memory_fraction <= 1,
            "dynamic_memory_fraction", o.dynamic_memory_fraction, "must be in (0, 1]", errors);
    Require(o.dynamic_forgetting > 0 && o.dynamic_forgetting <= 1, "dynamic_forgetting",
            o.dynamic_forgetting, "must be in (0, 1]", errors);
  }
  return errors;
}

std::unique_ptr<StopPolicy> MakeStopPolicy(std::string_view name,
                                           const StopPolicyOptions& options) {
  const std::vector<std::string> errors = StopPolicyOptionErrors(name, options);
  if (!errors.empty()) {
    std::string message = "invalid options for stop policy '" + std::string(name) + "':";
    for (const std::string& e : errors) message += "\n  " + e;
    throw std::invalid_argument(message);
  }
  if (name == "always") return std::make_unique<AlwaysAddPolicy>();
  if (name == "heuristic") {
    HeuristicConfig config;
    config.max_loss_chunks = options.heuristic_max_loss_chunks;
    config.relaxed_loss_chunks = options.heuristic_relaxed_loss_chunks;
    config.relaxed_min_peers = options.heuristic_relaxed_min_peers;
    config.floor_cap = options.heuristic_floor_cap;
    return std::make_unique<HeuristicPolicy>(config);
  }
  if (name == "bandit") {
    BanditConfig config;
    config.exploration = options.bandit_exploration;
    config.state_bins = options.state_bins;
    return std::make_unique<BanditPolicy>(config);
  }
  if (name == "qlearning") {
    QLearningConfig config;
    config.learning_rate = options.q_learning_rate;
    config.discount = options.q_discount;
    config.epsilon_start = options.q_epsilon_start;
    config.epsilon_min = options.q_epsilon_min;
    config.epsilon_decay_decisions = options.q_epsilon_decay_decisions;
    config.state_bins = options.state_bins;
    return std::make_unique<QLearningPolicy>(config, options.seed);
  }
  if (name == "dynamic-batching") {
    DynamicBatchingConfig config;
    config.latency_target_ms = options.dynamic_latency_target_ms;
    config.memory_fraction = options.dynamic_memory_fraction;
    config.forgetting = options.dynamic_forgetting;
    return std::make_unique<DynamicBatchingPolicy>(config);
  }
  std::string valid;
  for (std::string_view n : kNames) valid += (valid.empty() ? "" : ", ") + std::string(n);
  throw std::invalid_argument("unknown stop policy '" + std::string(name) + "' (valid: " + valid +
                              ")");
}

}  // namespace feather
