// bandit_policy.cc: see bandit_policy.h for the rules and the tie/forced-decision conventions.
#include "policies/bandit_policy.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace feather {

std::span<const ConfigField<BanditConfig>> BanditConfig::Fields() {
  using C = BanditConfig;
  static constexpr std::array<ConfigField<C>, 2> kFields = {{
      {"exploration", &C::exploration, ConfigField<C>::Real(0, 1e12)},
      {"credit_steps", &C::credit_steps, ConfigField<C>::Integer(1, 1 << 20)},
  }};
  return kFields;
}

std::vector<ConfigRuleProblem> BanditConfig::RuleProblems() const { return {}; }

namespace {

constexpr size_t kPendingReserve = 4096;

}  // namespace

BanditPolicy::BanditPolicy(const BanditConfig& config) : config_(config) {
  pending_cells_.reserve(kPendingReserve);
  ResetDelayed();
}

void BanditPolicy::ResetDelayed() {
  steps_ = 0;
  in_flight_.clear();
  in_flight_head_ = 0;
  in_flight_count_.fill(0);
  cum_tokens_.clear();
  cum_ns_.clear();
  if (config_.reward != BanditReward::kDelayed) return;
  const size_t ring = size_t{config_.credit_steps} + 1;
  cum_tokens_.assign(ring, 0.0);
  cum_ns_.assign(ring, 0.0);
  in_flight_.reserve(kPendingReserve);
}

void BanditPolicy::BeginRound() {
  // bandit-delayed: decisions of a round without an executed step are dropped, so no longer in
  // flight.
  if (config_.reward == BanditReward::kDelayed) {
    for (const uint32_t cell : pending_cells_) --in_flight_count_[cell];
  }
  pending_cells_.clear();
  adds_this_round_ = 0;
}

double BanditPolicy::Ucb(uint32_t state_index, StopDecision action) const {
  const uint32_t cell = CellIndex(state_index, action);
  const uint64_t n = tables_.count[cell];
  if (n == 0) {
    return in_flight_count_[cell] > 0 ? -std::numeric_limits<double>::infinity()
                                      : std::numeric_limits<double>::infinity();
  }
  const auto count = static_cast<double>(n);
  const double mean = tables_.reward_sum[cell] / count;
  const double log_s = std::log(static_cast<double>(tables_.total_decisions) + 1.0);
  return mean + config_.exploration * std::sqrt(log_s / count);
}

StopDecision BanditPolicy::Decide(const StopContext& context) {
  const Observation o = Observe(context);
  if (o.batch_size == 0 || (o.tip_loss_chunks == 0 && o.has_tip)) {
    ++adds_this_round_;
    return StopDecision::kAdd;
  }
  const uint32_t state = StateIndex(Discretize(o, config_.state_bins));

  if (!learning()) {
    const uint32_t add_cell = CellIndex(state, StopDecision::kAdd);
    const uint32_t stop_cell = CellIndex(state, StopDecision::kStop);
    const uint64_t n_add = tables_.count[add_cell];
    const uint64_t n_stop = tables_.count[stop_cell];
    if (n_stop == 0) return StopDecision::kAdd;
    if (n_add == 0) return StopDecision::kStop;
    const double mean_add = tables_.reward_sum[add_cell] / static_cast<double>(n_add);
    const double mean_stop = tables_.reward_sum[stop_cell] / static_cast<double>(n_stop);
    return mean_add >= mean_stop ? StopDecision::kAdd : StopDecision::kStop;
  }

  // +∞ >= +∞ holds, so two unseen actions give Add.
  const StopDecision action = Ucb(state, StopDecision::kAdd) >= Ucb(state, StopDecision::kStop)
                                  ? StopDecision::kAdd
                                  : StopDecision::kStop;
  pending_cells_.push_back(CellIndex(state, action));
  if (config_.reward == BanditReward::kDelayed) ++in_flight_count_[pending_cells_.back()];
  if (action == StopDecision::kAdd) ++adds_this_round_;
  return action;
}

void BanditPolicy::OnStepExecuted(const StepFeedback& feedback) {
  if (config_.reward == BanditReward::kDelayed) {
    CreditDelayed(feedback);
    return;
  }
  const std::optional<double> reward = config_.reward == BanditReward::kAuthors
                                           ? StepRewardBatchPerS(feedback)
                                           : StepRewardTokensPerS(feedback);
  if (learning() && reward) {
    for (const uint32_t cell : pending_cells_) {
      ++tables_.count[cell];
      tables_.reward_sum[cell] += *reward;
      ++tables_.total_decisions;
    }
  }
  pending_cells_.clear();
}

void BanditPolicy::CreditDelayed(const StepFeedback& feedback) {
  // This step's decode part and prefill part. Unpriced (decode_ns < 0): the whole step is decode
  // and every sampled token a decode token.
  const int64_t whole_ns = feedback.whole_step_ns > 0 ? feedback.whole_step_ns : feedback.step_ns;
  const bool priced = feedback.decode_ns >= 0;
  const double decode_ns = static_cast<double>(priced ? feedback.decode_ns : whole_ns);
  const double decode_tokens = priced ? feedback.decode_requests : feedback.decode_tokens;
  const double prefill_ns = priced ? std::max(0.0, static_cast<double>(whole_ns) - decode_ns) : 0.0;

  const uint64_t step = steps_++;
  const size_t ring = cum_tokens_.size();
  const size_t at = step % ring;
  const size_t before = (step + ring - 1) % ring;
  cum_tokens_[at] = (step == 0 ? 0.0 : cum_tokens_[before]) + decode_tokens;
  cum_ns_[at] = (step == 0 ? 0.0 : cum_ns_[before]) + decode_ns;

  if (!learning()) {
    for (const uint32_t cell : pending_cells_) --in_flight_count_[cell];
  } else {
    // This round's decisions go in flight; an Add carries its share of the round's prefill.
    const double charge = prefill_ns / std::max<uint32_t>(adds_this_round_, 1);
    for (const uint32_t cell : pending_cells_) {
      const bool add = cell % kNumActions == static_cast<uint32_t>(StopDecision::kAdd);
      in_flight_.push_back({step, cell, add ? charge : 0.0});
    }
    // Rounds whose K-step window (their steps + 1 .. + K) ends with this step are credited:
    // reward = decode tokens of the window / (its decode time + the admission's prefill).
    const uint64_t k = config_.credit_steps;
    while (in_flight_head_ < in_flight_.size() && in_flight_[in_flight_head_].step + k <= step) {
      const InFlight& d = in_flight_[in_flight_head_++];
      --in_flight_count_[d.cell];
      const size_t from = d.step % ring;
      const double tokens = cum_tokens_[at] - cum_tokens_[from];
      const double ns = cum_ns_[at] - cum_ns_[from] + d.charge_ns;
      if (ns <= 0.0) continue;  // no time to price a rate on: dropped uncredited
      ++tables_.count[d.cell];
      tables_.reward_sum[d.cell] += tokens / (ns * 1e-9);
      ++tables_.total_decisions;
    }
    // Compact the FIFO once its consumed head dominates (amortized O(1), no reallocation).
    if (in_flight_head_ == in_flight_.size()) {
      in_flight_.clear();
      in_flight_head_ = 0;
    } else if (in_flight_head_ > kPendingReserve && in_flight_head_ * 2 > in_flight_.size()) {
      in_flight_.erase(in_flight_.begin(),
                       in_flight_.begin() + static_cast<ptrdiff_t>(in_flight_head_));
      in_flight_head_ = 0;
    }
  }
  pending_cells_.clear();
}

void BanditPolicy::Restore(const BanditConfig& config, const BanditTables& tables) {
  const BanditReward reward = config_.reward;
  config_ = config;
  config_.reward = reward;
  tables_ = tables;
  pending_cells_.clear();
  adds_this_round_ = 0;
  ResetDelayed();
}

}  // namespace feather
