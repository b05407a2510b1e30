// stop_policy_test.cc: the stop policies' decisions and learning — per-step decision tables for
// the heuristic, UCB convergence on synthetic arms, a hand-computed Q update, the ε schedule,
// Dynamic Batching's memory and latency caps, frozen policies, discretization and the factory.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "policies/always_add_policy.h"
#include "policies/bandit_policy.h"
#include "policies/dynamic_batching_policy.h"
#include "policies/heuristic_policy.h"
#include "policies/policy_state.h"
#include "policies/converge_policy.h"
#include "policies/qlearning_policy.h"
#include "policies/stop_policy_factory.h"
#include "tests/policies/stop_policy_test_support.h"

namespace feather {
namespace {

constexpr StopDecision kAdd = StopDecision::kAdd;
constexpr StopDecision kStop = StopDecision::kStop;
constexpr StopDecision kSkip = StopDecision::kSkip;
constexpr const char* kBanditAuthorsTrace =
    "60 40 5 5 5 1 11 3 4 5 1 2 7 8 8 1 4 4 4 5 4 3 8 11 5 12 2 9 9 5 3 5 4 12 8 7 5 5 5 10 ";

using test::Reward;
using test::Signal;

StopContext Context(uint32_t batch_size, std::optional<PrefixSignal> signal, uint32_t waiting = 1) {
  StopContext c;
  c.batch_size = batch_size;
  c.signal = signal;
  c.waiting = waiting;
  return c;
}

// ---------------------------------------------------------------- discretization

TEST(PolicyState, AuthorsBinsFollowTheAuthorsFormula) {
  struct Row {
    uint32_t b;
    int64_t delta;
    uint32_t w;
    StateKey expected;
  };
  const std::vector<Row> rows = {
      {0, 0, 0, {0, 5, 0}},      {3, 1, 3, {0, 6, 0}},        {4, -1, 4, {1, 4, 1}},
      {43, 5, 40, {10, 10, 10}}, {44, 9, 1000, {10, 10, 10}}, {7, -7, 39, {1, 0, 9}},
  };
  for (const Row& row : rows) {
    Observation o;
    o.batch_size = row.b;
    o.tip_loss_chunks = row.delta;
    o.peers = row.w;
    EXPECT_EQ(Discretize(o, StateBins::kAuthors), row.expected)
        << "b=" << row.b << " delta=" << row.delta << " w=" << row.w;
  }
}

TEST(PolicyState, ExponentialBinsUseBitWidthAndCoarseDelta) {
  struct Row {
    uint32_t x;
    uint8_t bin;
  };
  for (const Row& row : std::vector<Row>{{0, 0},
                                         {1, 1},
                                         {2, 2},
                                         {3, 2},
                                         {4, 3},
                                         {7, 3},
                                         {8, 4},
                                         {511, 9},
                                         {512, 10},
                                         {100000, 10}}) {
    Observation o;
    o.batch_size = row.x;
    o.peers = row.x;
    const StateKey key = Discretize(o, StateBins::kExponential);
    EXPECT_EQ(key.b_bin, row.bin) << row.x;
    EXPECT_EQ(key.w_bin, row.bin) << row.x;
  }
  struct DeltaRow {
    int64_t delta;
    uint8_t bin;
  };
  for (const DeltaRow& row :
       std::vector<DeltaRow>{{-3, 0}, {0, 0}, {1, 1}, {2, 1}, {3, 2}, {5, 2}, {6, 3}, {100, 3}}) {
    Observation o;
    o.tip_loss_chunks = row.delta;
    EXPECT_EQ(Discretize(o, StateBins::kExponential).delta_bin, row.bin) << row.delta;
  }
}

TEST(PolicyState, ObservationWithoutSignalUsesWaitingAndZeroLoss) {
  const Observation o = Observe(Context(12, std::nullopt, /*waiting=*/33));
  EXPECT_EQ(o.batch_size, 12u);
  EXPECT_EQ(o.tip_loss_chunks, 0);
  EXPECT_EQ(o.peers, 33u);
  EXPECT_FALSE(o.has_tip);
  const Observation s = Observe(Context(1, Signal(3, 7, 2)));
  EXPECT_EQ(s.tip_loss_chunks, -4);  // signed: the tip may grow when the batch is empty
  EXPECT_EQ(s.peers, 2u);
  EXPECT_TRUE(s.has_tip);
}

TEST(PolicyState, StateIndexRoundTripsAndCoversTheTable) {
  for (uint32_t i = 0; i < kNumStates; ++i) EXPECT_EQ(StateIndex(StateKeyAt(i)), i);
  EXPECT_EQ(StateIndex(StateKey{10, 10, 10}), kNumStates - 1);
}

TEST(PolicyState, RewardIsDecodeTokensPerSecond) {
  StepFeedback f;
  f.decode_tokens = 64;
  f.step_ns = 20'000'000;  // 20 ms
  ASSERT_TRUE(StepRewardTokensPerS(f).has_value());
  EXPECT_DOUBLE_EQ(*StepRewardTokensPerS(f), 3200.0);
  f.step_ns = 0;
  EXPECT_FALSE(StepRewardTokensPerS(f).has_value());
}

// ---------------------------------------------------------------- always

TEST(AlwaysAddPolicy, AddsEverything) {
  AlwaysAddPolicy policy;
  policy.BeginRound();
  EXPECT_EQ(policy.Decide(Context(0, std::nullopt)), kAdd);
  EXPECT_EQ(policy.Decide(Context(500, Signal(100, 0, 0))), kAdd);
  policy.OnStepExecuted(Reward(10));
}

// ---------------------------------------------------------------- heuristic

TEST(HeuristicPolicy, PerStepDecisionTableCoversEveryRule) {
  HeuristicPolicy policy;  // 5 / 7 with >= 10 peers / floor up to 10
  struct Row {
    const char* rule;
    uint32_t b;
    std::optional<PrefixSignal> signal;
    StopDecision expected;
    uint32_t floor_after;
  };
  const std::vector<Row> rows = {
      {"empty batch admits any loss", 0, Signal(40, 0, 1), kAdd, 2},
      {"loss 5 within max", 5, Signal(20, 15, 1), kAdd, 3},
      {"loss 6, 10 peers: relaxed", 5, Signal(20, 14, 10), kAdd, 4},
      {"loss 6, 9 peers, b >= floor: stop", 5, Signal(20, 14, 9), kStop, 4},
      {"loss 8 beyond relaxed even with peers", 5, Signal(20, 12, 100), kStop, 4},
      {"loss 8 but b < floor", 3, Signal(20, 12, 0), kAdd, 5},
      {"loss 7, 10 peers: relaxed bound inclusive", 9, Signal(20, 13, 10), kAdd, 6},
      {"negative loss (tip grows) is free", 30, Signal(2, 5, 0), kAdd, 7},
      {"no signal: loss 0, admits", 40, std::nullopt, kAdd, 8},
      {"loss 0 with a tip: free addition", 40, Signal(9, 9, 0), kAdd, 9},
      {"floor reaches cap", 40, Signal(9, 9, 0), kAdd, 10},
      {"floor stays at cap", 40, Signal(9, 9, 0), kAdd, 10},
      {"b = 9 < floor 10 tolerates any loss", 9, Signal(100, 0, 0), kAdd, 10},
      {"b = 10 = floor: large loss stops", 10, Signal(100, 0, 0), kStop, 10},
  };
  for (const Row& row : rows) {
    policy.BeginRound();  // the floor persists across rounds
    EXPECT_EQ(policy.Decide(Context(row.b, row.signal)), row.expected) << row.rule;
    EXPECT_EQ(policy.floor(), row.floor_after) << row.rule;
  }
}

TEST(HeuristicPolicy, ConstantsAreConfigurable) {
  HeuristicConfig config;
  config.max_loss_chunks = 1;
  config.relaxed_loss_chunks = 2;
  config.relaxed_min_peers = 3;
  config.floor_cap = 1;
  HeuristicPolicy policy(config);
  EXPECT_EQ(policy.Decide(Context(4, Signal(10, 9, 0))), kAdd);
  EXPECT_EQ(policy.Decide(Context(4, Signal(10, 8, 3))), kAdd);
  EXPECT_EQ(policy.Decide(Context(4, Signal(10, 8, 2))), kStop);
  EXPECT_EQ(policy.floor(), 1u);
}

// ---------------------------------------------------------------- bandit

// One round in a fixed non-forced state (b = 8, Δ = 2): returns the decision and rewards it.
StopDecision BanditRound(BanditPolicy& policy, uint32_t add_reward, uint32_t stop_reward) {
  policy.BeginRound();
  const StopDecision d = policy.Decide(Context(8, Signal(10, 8, 4)));
  policy.OnStepExecuted(Reward(d == kAdd ? add_reward : stop_reward));
  return d;
}

TEST(BanditPolicy, ConvergesToTheBetterArm) {
  constexpr int kRounds = 4000;
  for (const bool add_better : {true, false}) {
    BanditPolicy policy;  // c = 200
    int adds = 0;
    for (int i = 0; i < kRounds; ++i) {
      adds += BanditRound(policy, add_better ? 100 : 50, add_better ? 50 : 100) == kAdd ? 1 : 0;
    }
    const double better_share =
        static_cast<double>(add_better ? adds : kRounds - adds) / static_cast<double>(kRounds);
    EXPECT_GE(better_share, 0.9) << (add_better ? "add" : "stop") << " is better";
    EXPECT_EQ(policy.tables().total_decisions, static_cast<uint64_t>(kRounds));
  }
}

TEST(BanditPolicy, UcbScoreMatchesTheFormula) {
  BanditPolicy policy;
  const uint32_t state = StateIndex(StateKey{2, 7, 1});
  auto tables = std::make_unique<BanditTables>();
  tables->count[CellIndex(state, kAdd)] = 4;
  tables->reward_sum[CellIndex(state, kAdd)] = 400.0;
  tables->total_decisions = 9;
  tables->count[CellIndex(0, kStop)] = 5;
  policy.Restore(policy.config(), *tables);
  EXPECT_DOUBLE_EQ(policy.Ucb(state, kAdd), 100.0 + 200.0 * std::sqrt(std::log(10.0) / 4.0));
  EXPECT_TRUE(std::isinf(policy.Ucb(state, kStop)));
}

TEST(BanditPolicy, UnseenPairsTieToAddAndAnUnseenStopIsExplored) {
  BanditPolicy policy;
  EXPECT_EQ(BanditRound(policy, 100, 50), kAdd);   // both unseen: tie → Add
  EXPECT_EQ(BanditRound(policy, 100, 50), kStop);  // Stop unseen: +∞
  EXPECT_EQ(policy.tables().total_decisions, 2u);
}

TEST(BanditPolicy, ForcedDecisionsAreNotRecorded) {
  BanditPolicy policy;
  policy.BeginRound();
  EXPECT_EQ(policy.Decide(Context(0, Signal(0, 30, 1))), kAdd);   // empty batch
  EXPECT_EQ(policy.Decide(Context(5, Signal(12, 12, 1))), kAdd);  // Δ = 0 with a tip
  policy.OnStepExecuted(Reward(100));
  EXPECT_EQ(policy.tables().total_decisions, 0u);
}

TEST(BanditPolicy, WithoutSignalTheTableStateUsesWaiting) {
  BanditPolicy policy;
  policy.BeginRound();
  EXPECT_EQ(policy.Decide(Context(5, std::nullopt, /*waiting=*/20)), kAdd);  // not forced
  policy.OnStepExecuted(Reward(70));
  const uint32_t state = StateIndex(StateKey{1, 5, 5});
  EXPECT_EQ(policy.tables().count[CellIndex(state, kAdd)], 1u);
  EXPECT_DOUBLE_EQ(policy.tables().reward_sum[CellIndex(state, kAdd)], 70.0);
}

TEST(BanditPolicy, RewardIsCreditedToEveryDecisionOfTheRound) {
  BanditPolicy policy;
  policy.BeginRound();
  EXPECT_EQ(policy.Decide(Context(4, Signal(10, 9, 0))), kAdd);
  EXPECT_EQ(policy.Decide(Context(5, Signal(9, 8, 0))), kAdd);  // same state, still unseen
  EXPECT_EQ(policy.Decide(Context(12, Signal(8, 1, 0))), kAdd);
  policy.OnStepExecuted(Reward(300));
  const BanditTables& t = policy.tables();
  EXPECT_EQ(t.total_decisions, 3u);
  EXPECT_EQ(t.count[CellIndex(StateIndex(StateKey{1, 6, 0}), kAdd)], 2u);
  EXPECT_DOUBLE_EQ(t.reward_sum[CellIndex(StateIndex(StateKey{1, 6, 0}), kAdd)], 600.0);
  EXPECT_EQ(t.count[CellIndex(StateIndex(StateKey{3, 10, 0}), kAdd)], 1u);
  // A second feedback without a new round credits nothing; a round without a step drops.
  policy.OnStepExecuted(Reward(300));
  policy.BeginRound();
  (void)policy.Decide(Context(4, Signal(10, 9, 0)));
  policy.BeginRound();
  policy.OnStepExecuted(Reward(300));
  EXPECT_EQ(policy.tables().total_decisions, 3u);
}

TEST(BanditPolicy, FrozenIsGreedyOnMeansAndNeverChanges) {
  BanditPolicy policy;
  for (int i = 0; i < 50; ++i) (void)BanditRound(policy, 50, 100);  // Stop better
  policy.set_learning(false);
  const auto before = std::make_unique<BanditTables>(policy.tables());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(BanditRound(policy, 50, 100), kStop);
  EXPECT_EQ(policy.tables().count, before->count);
  EXPECT_EQ(policy.tables().reward_sum, before->reward_sum);
  EXPECT_EQ(policy.tables().total_decisions, before->total_decisions);
  // A state never seen: Add.
  policy.BeginRound();
  EXPECT_EQ(policy.Decide(Context(30, Signal(10, 1, 30))), kAdd);
}

// ---------------------------------------------------------------- bandit-delayed

BanditPolicy DelayedBandit(uint32_t credit_steps) {
  BanditConfig config;
  config.reward = BanditReward::kDelayed;
  config.credit_steps = credit_steps;
  return BanditPolicy(config);
}

// A step of `decode_ms` decode time holding `decode` decoding requests, plus `prefill_ms` of
// prefill.
StepFeedback DelayedStep(uint32_t decode, double decode_ms, double prefill_ms) {
  StepFeedback f;
  f.batch_size = decode;
  f.decode_tokens = decode;
  f.decode_requests = decode;
  f.decode_ns = static_cast<int64_t>(decode_ms * 1e6);
  f.whole_step_ns = static_cast<int64_t>((decode_ms + prefill_ms) * 1e6);
  f.step_ns = f.whole_step_ns;
  return f;
}

TEST(BanditDelayedPolicy, EachDecisionGetsTheNextKStepsDecodeThroughputAndAnAddItsPrefill) {
  BanditPolicy policy = DelayedBandit(2);
  EXPECT_EQ(policy.Name(), "bandit-delayed");
  const uint32_t s_add = StateIndex(StateKey{2, 6, 0});   // b = 8, Δ = 1
  const uint32_t s_stop = StateIndex(StateKey{3, 7, 0});  // b = 12, Δ = 2
  const BanditTables& t = policy.tables();

  // Round 0: a forced Add (empty batch), a table Add in s_add (both actions unseen: Add), then
  // Stop in s_add (its Add is in flight, uncredited: −∞; Stop unseen: +∞). Step 0: 10 ms of
  // decode, 30 ms of prefill.
  policy.BeginRound();
  EXPECT_EQ(policy.Decide(Context(0, Signal(0, 30, 1))), kAdd);  // forced
  EXPECT_EQ(policy.Decide(Context(8, Signal(10, 9, 0))), kAdd);  // s_add, unseen
  EXPECT_EQ(policy.Decide(Context(9, Signal(9, 8, 0))), kStop);  // s_add: Add in flight → −∞
  policy.OnStepExecuted(DelayedStep(8, 10, 30));
  EXPECT_EQ(t.total_decisions, 0u);  // nothing credited before K steps

  // Round 1: one table Add in another state; step 1: 10 decode requests in 20 ms, no prefill.
  policy.BeginRound();
  EXPECT_EQ(policy.Decide(Context(12, Signal(10, 8, 0))), kAdd);  // s_stop, unseen: Add
  policy.OnStepExecuted(DelayedStep(10, 20, 0));
  EXPECT_EQ(t.total_decisions, 0u);

  // Step 2 closes round 0's window (steps 1, 2): 10 + 12 tokens over 20 + 40 ms of decode.
  policy.BeginRound();
  policy.OnStepExecuted(DelayedStep(12, 40, 50));  // its prefill is nobody's charge
  EXPECT_EQ(t.total_decisions, 2u);
  // Add: the round's prefill (30 ms) split over its two admissions (forced one included).
  EXPECT_EQ(t.count[CellIndex(s_add, kAdd)], 1u);
  EXPECT_DOUBLE_EQ(t.reward_sum[CellIndex(s_add, kAdd)], 22.0 / (0.060 + 0.015));
  // Stop: the same window's decode throughput, no charge.
  EXPECT_EQ(t.count[CellIndex(s_add, kStop)], 1u);
  EXPECT_DOUBLE_EQ(t.reward_sum[CellIndex(s_add, kStop)], 22.0 / 0.060);

  // Step 3 closes round 1 (steps 2, 3): 12 + 6 tokens over 40 + 20 ms; its Add (the round's
  // only admission) carries round 1's prefill, 0 ms.
  policy.BeginRound();
  policy.OnStepExecuted(DelayedStep(6, 20, 0));
  EXPECT_EQ(t.total_decisions, 3u);
  EXPECT_EQ(t.count[CellIndex(s_stop, kAdd)], 1u);
  EXPECT_DOUBLE_EQ(t.reward_sum[CellIndex(s_stop, kAdd)], 18.0 / 0.060);
  EXPECT_EQ(t.count[CellIndex(s_stop, kStop)], 0u);

  // Credited: the in-flight rule is gone, so both cells of s_add score by UCB again, and the
  // unseen Stop of s_stop is +∞.
  EXPECT_FALSE(std::isinf(policy.Ucb(s_add, kStop)));
  EXPECT_TRUE(std::isinf(policy.Ucb(s_stop, kStop)) && policy.Ucb(s_stop, kStop) > 0);
}

TEST(BanditDelayedPolicy, UnpricedStepsCountWholeAsDecodeAndRestoreDropsInFlight) {
  BanditPolicy policy = DelayedBandit(1);
  policy.BeginRound();
  EXPECT_EQ(policy.Decide(Context(8, Signal(10, 9, 0))), kAdd);
  policy.OnStepExecuted(Reward(100));  // decode_ns = -1: no prefill charge
  policy.BeginRound();
  policy.OnStepExecuted(Reward(40));  // window = this step: 40 tokens in 1 s
  const uint32_t cell = CellIndex(StateIndex(StateKey{2, 6, 0}), kAdd);
  EXPECT_EQ(policy.tables().count[cell], 1u);
  EXPECT_DOUBLE_EQ(policy.tables().reward_sum[cell], 40.0);

  policy.BeginRound();
  EXPECT_EQ(policy.Decide(Context(8, Signal(10, 9, 0))), kStop);  // Stop unseen: +∞
  policy.OnStepExecuted(Reward(100));
  policy.Restore(policy.config(), policy.tables());  // drops the Stop in flight
  EXPECT_EQ(policy.Name(), "bandit-delayed");
  policy.BeginRound();
  policy.OnStepExecuted(Reward(40));
  EXPECT_EQ(policy.tables().total_decisions, 1u);
}

std::string DelayedTrace(uint64_t seed) {
  BanditPolicy policy = DelayedBandit(8);
  SplitMix64 rng(seed);
  std::string trace;
  for (int step = 0; step < 600; ++step) {
    policy.BeginRound();
    uint32_t b = static_cast<uint32_t>(rng.Next() % 40);
    uint32_t adds = 0;
    while (adds < 6) {
      const uint32_t before = static_cast<uint32_t>(rng.Next() % 12);
      const uint32_t after = static_cast<uint32_t>(rng.Next() % (before + 1));
      const bool add = policy.Decide(Context(b, Signal(before, after, b % 20))) == kAdd;
      trace += add ? 'A' : 'S';
      if (!add) break;
      ++b;
      ++adds;
    }
    const double prefill = adds * 25.0;
    policy.OnStepExecuted(DelayedStep(b, 10.0 + 0.5 * b, prefill));
  }
  return trace;
}

TEST(BanditDelayedPolicy, SameSeedSameDecisions) {
  const std::string a = DelayedTrace(7);
  EXPECT_EQ(a, DelayedTrace(7));
  EXPECT_NE(a, DelayedTrace(8));
  EXPECT_NE(a.find('S'), std::string::npos);  // it learns to stop somewhere
}

// ---------------------------------------------------------------- Q-learning

QLearningConfig GreedyConfig() {
  QLearningConfig config;
  config.learning_rate = 0.5;
  config.discount = 0.9;
  config.epsilon_start = 0.0;
  config.epsilon_min = 0.0;
  return config;
}

TEST(QLearningPolicy, TransitionsMatchHandComputation) {
  QLearningPolicy policy(GreedyConfig(), 7);
  // s0: b = 4, Δ = 1, w = 0 → (1, 6, 0); s1: b = 8, Δ = 1, w = 0 → (2, 6, 0).
  const uint32_t s0 = StateIndex(StateKey{1, 6, 0});
  const uint32_t s1 = StateIndex(StateKey{2, 6, 0});
  auto tables = std::make_unique<QTables>();
  tables->q[CellIndex(s0, kAdd)] = 10.0;
  tables->q[CellIndex(s0, kStop)] = 0.0;
  tables->q[CellIndex(s1, kAdd)] = 20.0;
  tables->q[CellIndex(s1, kStop)] = 30.0;
  policy.Restore(policy.config(), *tables, 7);

  policy.BeginRound();
  EXPECT_EQ(policy.Decide(Context(4, Signal(10, 9, 0))), kAdd);  // greedy: 10 > 0
  EXPECT_EQ(policy.Decide(Context(8, Signal(9, 8, 0))), kStop);  // greedy: 30 > 20
  // Within the round: Q(s0, add) = 10 + 0.5 · (max(20, 30) − 10) = 20 (no reward, no discount).
  EXPECT_DOUBLE_EQ(policy.Q(s0, kAdd), 20.0);
  policy.OnStepExecuted(Reward(100));
  policy.BeginRound();  // a round without a table decision: its step adds to the return
  policy.OnStepExecuted(Reward(50));
  EXPECT_DOUBLE_EQ(policy.Q(s1, kStop), 30.0);  // still waiting for the next decision's state
  policy.BeginRound();
  EXPECT_EQ(policy.Decide(Context(4, Signal(10, 9, 0))), kAdd);  // greedy: 20 > 0
  // Q(s1, stop) = 30 + 0.5 · (100 + 0.9 · 50 + 0.81 · max(20, 0) − 30) = 95.6
  EXPECT_DOUBLE_EQ(policy.Q(s1, kStop), 95.6);
  EXPECT_DOUBLE_EQ(policy.Q(s0, kStop), 0.0);
  EXPECT_DOUBLE_EQ(policy.Q(s1, kAdd), 20.0);
  EXPECT_EQ(policy.tables().visits[CellIndex(s0, kAdd)], 1u);
  EXPECT_EQ(policy.tables().visits[CellIndex(s1, kStop)], 1u);
  EXPECT_EQ(policy.tables().decisions, 3u);
}

TEST(QLearningPolicy, StepsWithoutDecodeEarnNothingAndAreNotDiscounted) {
  QLearningPolicy policy(GreedyConfig(), 1);
  const uint32_t s = StateIndex(StateKey{1, 6, 0});
  policy.BeginRound();
  EXPECT_EQ(policy.Decide(Context(4, Signal(10, 9, 0))), kAdd);
  StepFeedback prefill_only = Reward(10);
  prefill_only.decode_ns = 0;  // priced apart: no decode part
  policy.OnStepExecuted(prefill_only);
  policy.OnStepExecuted(Reward(10));
  policy.BeginRound();
  (void)policy.Decide(Context(4, Signal(10, 9, 0)));
  EXPECT_DOUBLE_EQ(policy.Q(s, kAdd), 5.0);  // 0 + 0.5 · (10 + 0.9 · 0 − 0)
}

TEST(QLearningPolicy, FreeAdditionsAreForcedAndNotRecorded) {
  QLearningPolicy policy(GreedyConfig(), 1);
  policy.BeginRound();
  EXPECT_EQ(policy.Decide(Context(0, Signal(0, 0, 3))), kAdd);   // empty batch
  EXPECT_EQ(policy.Decide(Context(9, Signal(10, 10, 3))), kAdd);  // Δ = 0 under a tip
  EXPECT_EQ(policy.tables().decisions, 0u);
}

TEST(QLearningPolicy, CascadeBinsReadTheBatchShape) {
  QLearningConfig config = GreedyConfig();
  config.state_bins = StateBins::kCascade;
  QLearningPolicy policy(config, 1);
  EXPECT_TRUE(policy.WantsBatchShape());
  StopContext c = Context(6, std::nullopt, 5);
  c.kv_used_blocks = 60;
  c.kv_total_blocks = 100;
  c.batch_common_prefix_tokens = 5000;
  c.candidate_common_prefix_tokens = 5000;  // keeps the cascade prefix: free
  policy.BeginRound();
  EXPECT_EQ(policy.Decide(c), kAdd);
  EXPECT_EQ(policy.tables().decisions, 0u);
  c.candidate_common_prefix_tokens = 0;  // would end it: a table decision
  EXPECT_EQ(policy.Decide(c), kAdd);
  EXPECT_EQ(policy.tables().decisions, 1u);
  policy.OnStepExecuted(Reward(10));
  policy.BeginRound();
  (void)policy.Decide(c);
  // b = 6 → bit_width 3; cascade ended → Δ̂ 0; occupancy 60 % (1), 5 waiting (< 16: 0) → 3.
  EXPECT_EQ(policy.tables().visits[CellIndex(StateIndex(StateKey{3, 0, 3}), kAdd)], 1u);
  // A mixed batch: the candidate in its largest group, which holds 4 of its 6 requests (≥ 1/2,
  // < 7/8) → Δ̂ = 1 + 3 + 1 = 5; 300 waiting, occupancy 95 % → 3 · 2 + 2 = 8.
  c.batch_common_prefix_tokens = 0;
  c.largest_groups[0] = {4, 512, true};
  c.waiting = 300;
  c.kv_used_blocks = 95;
  policy.OnStepExecuted(Reward(10));
  policy.BeginRound();
  (void)policy.Decide(c);
  policy.OnStepExecuted(Reward(10));
  policy.BeginRound();
  (void)policy.Decide(c);
  EXPECT_EQ(policy.tables().visits[CellIndex(StateIndex(StateKey{3, 5, 8}), kAdd)], 1u);
}

// A mixed batch of 40 (no common prefix), its largest group of `group` requests (and
// `group_waiting` waiting peers), the candidate in it or not; 300 waiting, KV 95 % full.
StopContext MixedContext(uint32_t group, bool candidate_in, uint32_t group_waiting = 0) {
  StopContext c = Context(40, std::nullopt, 300);
  c.kv_used_blocks = 95;
  c.kv_total_blocks = 100;
  c.largest_groups[0] = {group, 512, candidate_in, group_waiting};
  return c;
}

TEST(QLearningPolicy, AHoldStopsOthersAndAddsTheGroupUntilTheBatchConvergesThenCreditsItAll) {
  QLearningConfig config = GreedyConfig();
  config.state_bins = StateBins::kCascade;
  config.hold = true;
  for (const bool learning : {true, false}) {
    SCOPED_TRACE(learning ? "learning" : "frozen");
    QLearningPolicy policy(config, 1);
    const StopContext other = MixedContext(kCascadeMinRequests, false);
    const uint32_t mixed = StateIndex(Discretize(Observe(other), StateBins::kCascade));
    auto tables = std::make_unique<QTables>();
    tables->q[CellIndex(mixed, kStop)] = 10.0;  // greedy: Stop
    policy.Restore(config, *tables, 1);
    policy.set_learning(learning);

    policy.BeginRound();
    EXPECT_EQ(policy.Decide(other), kStop);  // the table's Stop starts the hold
    policy.OnStepExecuted(Reward(100));
    policy.BeginRound();  // held: others stopped, the group added, no table decision
    EXPECT_EQ(policy.Decide(other), kStop);
    EXPECT_EQ(policy.Decide(MixedContext(kCascadeMinRequests, true)), kAdd);
    EXPECT_EQ(policy.tables().decisions, learning ? 1u : 0u);
    policy.OnStepExecuted(Reward(50));
    // Converged: the batch shares a 5K-token prefix that this candidate would end. The hold is
    // over; this is a table decision (Q 0 both ways: Add), which closes the Stop's transition
    // over both steps: 10 + 0.5 · (100 + 0.9 · 50 + 0.81 · 0 − 10) = 77.5.
    StopContext converged = MixedContext(kCascadeMinRequests, false);
    converged.batch_common_prefix_tokens = 5000;
    policy.BeginRound();
    EXPECT_EQ(policy.Decide(converged), kAdd);
    EXPECT_EQ(policy.tables().decisions, learning ? 2u : 0u);
    EXPECT_DOUBLE_EQ(policy.Q(mixed, kStop), learning ? 77.5 : 10.0);
    // The hold ended: a mixed batch again meets the table (greedy Stop), a new hold.
    policy.OnStepExecuted(Reward(10));
    policy.BeginRound();
    EXPECT_EQ(policy.Decide(other), kStop);
    EXPECT_EQ(policy.tables().decisions, learning ? 3u : 0u);
  }
}

// Gives `policy` (cascade bins) a table whose greedy action in `other`'s state is Stop, takes
// that Stop (which may start a hold), runs one step and begins the next round.
void StopInAMixedBatchThenBeginARound(QLearningPolicy& policy, const QLearningConfig& config,
                                      const StopContext& other) {
  const uint32_t mixed = StateIndex(Discretize(Observe(other), StateBins::kCascade));
  auto tables = std::make_unique<QTables>();
  tables->q[CellIndex(mixed, kStop)] = 10.0;
  policy.Restore(config, *tables, 1);
  policy.BeginRound();
  EXPECT_EQ(policy.Decide(other), kStop);
  policy.OnStepExecuted(Reward(100));
  policy.BeginRound();
}

TEST(QLearningPolicy, NoHoldWithoutTheFlagOrForAGroupTooSmallToCascade) {
  for (const bool small_group : {false, true}) {
    QLearningConfig config = GreedyConfig();
    config.state_bins = StateBins::kCascade;
    config.hold = small_group;  // the flag on only where the group is too small
    const uint32_t group = small_group ? kCascadeMinRequests - 1 : kCascadeMinRequests;
    QLearningPolicy policy(config, 1);
    const StopContext other = MixedContext(group, false);
    StopInAMixedBatchThenBeginARound(policy, config, other);
    EXPECT_EQ(policy.Decide(other), kStop);
    EXPECT_EQ(policy.tables().decisions, 2u);  // the table again, not a hold
  }
}

// The bound counts the group's waiting peers: 3 in the batch and 5 waiting can reach the 8
// cascade needs (a hold), 3 and 4 cannot (the table decides again).
TEST(QLearningPolicy, AHoldCountsTheGroupsWaitingPeers) {
  for (const uint32_t waiting : {kCascadeMinRequests - 3, kCascadeMinRequests - 4}) {
    SCOPED_TRACE(waiting);
    QLearningConfig config = GreedyConfig();
    config.state_bins = StateBins::kCascade;
    config.hold = true;
    QLearningPolicy policy(config, 1);
    const StopContext other = MixedContext(3, false, waiting);
    StopInAMixedBatchThenBeginARound(policy, config, other);
    EXPECT_EQ(policy.Decide(other), kStop);
    EXPECT_EQ(policy.Decide(MixedContext(3, true, waiting)), kAdd);
    const bool holds = 3 + waiting >= kCascadeMinRequests;
    EXPECT_EQ(policy.tables().decisions, holds ? 1u : 3u);
  }
}

TEST(QLearningPolicy, EpsilonDecaysLinearlyToTheMinimum) {
  QLearningConfig config;
  config.epsilon_start = 1.0;
  config.epsilon_min = 0.05;
  config.epsilon_decay_decisions = 100;
  EXPECT_DOUBLE_EQ(QLearningPolicy::EpsilonAt(config, 0), 1.0);
  EXPECT_DOUBLE_EQ(QLearningPolicy::EpsilonAt(config, 50), 0.525);
  EXPECT_DOUBLE_EQ(QLearningPolicy::EpsilonAt(config, 100), 0.05);
  EXPECT_DOUBLE_EQ(QLearningPolicy::EpsilonAt(config, 100000), 0.05);
  config.epsilon_decay_decisions = 0;
  EXPECT_DOUBLE_EQ(QLearningPolicy::EpsilonAt(config, 0), 0.05);

  config.epsilon_decay_decisions = 100;
  QLearningPolicy policy(config, 3);
  for (int i = 0; i < 30; ++i) {
    policy.BeginRound();
    (void)policy.Decide(Context(8, Signal(10, 8, 4)));
    (void)policy.Decide(Context(0, Signal(10, 8, 4)));  // forced: not counted
    policy.OnStepExecuted(Reward(10));
  }
  EXPECT_EQ(policy.tables().decisions, 30u);
  EXPECT_DOUBLE_EQ(policy.epsilon(), QLearningPolicy::EpsilonAt(config, 30));
  policy.set_learning(false);
  (void)policy.Decide(Context(8, Signal(10, 8, 4)));
  EXPECT_EQ(policy.tables().decisions, 30u);  // frozen decisions do not advance ε
}

TEST(QLearningPolicy, FullExplorationPicksBothActionsRoughlyEvenly) {
  QLearningConfig config;
  config.epsilon_start = 1.0;
  config.epsilon_min = 1.0;
  QLearningPolicy policy(config, 11);
  int adds = 0;
  for (int i = 0; i < 2000; ++i) {
    policy.BeginRound();
    adds += policy.Decide(Context(8, Signal(10, 8, 4))) == kAdd ? 1 : 0;
  }
  EXPECT_GT(adds, 900);
  EXPECT_LT(adds, 1100);
}

std::vector<StopDecision> QTrace(uint64_t seed) {
  QLearningConfig config;
  config.epsilon_decay_decisions = 200;
  QLearningPolicy policy(config, seed);
  std::vector<StopDecision> trace;
  for (uint32_t round = 0; round < 300; ++round) {
    policy.BeginRound();
    for (uint32_t b = 1; b < 40; ++b) {
      const StopDecision d = policy.Decide(Context(b, Signal(20, 20 - b % 7, b % 13)));
      trace.push_back(d);
      if (d == kStop) break;
    }
    policy.OnStepExecuted(Reward(100 + round % 17));
  }
  return trace;
}

TEST(QLearningPolicy, SameSeedSameDecisions) {
  EXPECT_EQ(QTrace(5), QTrace(5));
  EXPECT_NE(QTrace(5), QTrace(6));
}

TEST(QLearningPolicy, LearnsToPreferTheBetterActionInAFixedState) {
  QLearningConfig config;
  config.epsilon_decay_decisions = 500;
  for (const bool add_better : {true, false}) {
    QLearningPolicy policy(config, 2);
    for (int i = 0; i < 2000; ++i) {
      policy.BeginRound();
      const StopDecision d = policy.Decide(Context(8, Signal(10, 8, 4)));
      policy.OnStepExecuted(Reward((d == kAdd) == add_better ? 100 : 50));
    }
    policy.set_learning(false);
    policy.BeginRound();
    EXPECT_EQ(policy.Decide(Context(8, Signal(10, 8, 4))), add_better ? kAdd : kStop);
  }
}

TEST(QLearningPolicy, FrozenIsGreedyAndNeverChanges) {
  QLearningPolicy policy(QLearningConfig{}, 9);
  for (int i = 0; i < 100; ++i) {
    policy.BeginRound();
    const StopDecision d = policy.Decide(Context(8, Signal(10, 8, 4)));
    policy.OnStepExecuted(Reward(d == kAdd ? 10 : 90));
  }
  policy.set_learning(false);
  const auto before = std::make_unique<QTables>(policy.tables());
  const uint64_t rng_before = policy.rng_state();
  const uint32_t s =
      StateIndex(Discretize(Observe(Context(8, Signal(10, 8, 4))), StateBins::kAuthors));
  const StopDecision greedy = policy.Q(s, kAdd) >= policy.Q(s, kStop) ? kAdd : kStop;
  for (int i = 0; i < 50; ++i) {
    policy.BeginRound();
    EXPECT_EQ(policy.Decide(Context(8, Signal(10, 8, 4))), greedy);
    policy.OnStepExecuted(Reward(1000));
  }
  EXPECT_EQ(policy.tables().q, before->q);
  EXPECT_EQ(policy.tables().visits, before->visits);
  EXPECT_EQ(policy.tables().decisions, before->decisions);
  EXPECT_EQ(policy.rng_state(), rng_before);
}

TEST(QLearningPolicy, ExponentialBinsAreSelectable) {
  QLearningConfig config = GreedyConfig();
  config.state_bins = StateBins::kExponential;
  QLearningPolicy policy(config, 1);
  policy.BeginRound();
  EXPECT_EQ(policy.Decide(Context(5, Signal(10, 6, 3))), kAdd);
  policy.OnStepExecuted(Reward(10));
  policy.BeginRound();
  (void)policy.Decide(Context(5, Signal(10, 6, 3)));  // the transition ends in this state
  // b = 5 → bit_width 3; Δ = 4 → bin 2; w = 3 → bit_width 2.
  EXPECT_EQ(policy.tables().visits[CellIndex(StateIndex(StateKey{3, 2, 2}), kAdd)], 1u);
}

// ---------------------------------------------------------------- converge

StopContext ShapeContext(uint32_t b, uint32_t waiting, uint32_t batch_prefix,
                         uint32_t candidate_prefix, StopContext::PrefixGroup largest) {
  StopContext c = Context(b, std::nullopt, waiting);
  c.batch_common_prefix_tokens = batch_prefix;
  c.candidate_common_prefix_tokens = candidate_prefix;
  c.largest_groups[0] = largest;
  return c;
}

TEST(ConvergePolicy, GuardsACascadeBatchUnderBacklog) {
  // Before the fit decides, the gate is shut: both variants stop by the shape rules alone.
  for (const bool gated : {true, false}) {
  ConvergePolicy policy(gated);
  EXPECT_TRUE(policy.WantsBatchShape());
  const uint32_t w = ConvergePolicy::kMinBacklogRequests;
  // A batch of one 5K-token group: a peer keeps the prefix, another group's request ends it.
  EXPECT_EQ(policy.Decide(ShapeContext(40, w, 5000, 5000, {40, 5000, true})), kAdd);
  EXPECT_EQ(policy.Decide(ShapeContext(40, w, 5000, 0, {40, 5000, false})), kStop);
  EXPECT_EQ(policy.Decide(ShapeContext(1, w, 5000, 0, {1, 5000, false})), kStop);
  // Without a backlog the server keeps up: never hold back.
  EXPECT_EQ(policy.Decide(ShapeContext(40, w - 1, 5000, 0, {40, 5000, false})), kAdd);
  // A common prefix below the cascade threshold is no cascade to keep.
  EXPECT_EQ(policy.Decide(ShapeContext(40, w, kCascadeMinPrefixTokens - 16, 0, {3, 256, false})),
            kAdd);
  // Empty batch.
  EXPECT_EQ(policy.Decide(ShapeContext(0, w, 0, 0, {})), kAdd);
  }
}

TEST(ConvergePolicy, AMixedBatchConvergesToItsLargestGroup) {
  // Before the fit decides, the gate is shut: a request outside the largest group is skipped
  // (the round goes on to the selector's next proposal, which may be one of the group's peers);
  // converge-shape the same.
  for (const bool gated : {true, false}) {
    ConvergePolicy policy(gated);
    const uint32_t w = ConvergePolicy::kMinBacklogRequests;
    const uint32_t m = kCascadeMinRequests;
    EXPECT_EQ(policy.Decide(ShapeContext(100, w, 0, 0, {m, 1000, false})), kSkip);
    EXPECT_EQ(policy.Decide(ShapeContext(100, w, 0, 0, {m, 1000, true})), kAdd);
    // A largest group too small to cascade, or no backlog: admit.
    EXPECT_EQ(policy.Decide(ShapeContext(100, w, 0, 0, {m - 1, 1000, false})), kAdd);
    EXPECT_EQ(policy.Decide(ShapeContext(100, w - 1, 0, 0, {m, 1000, false})), kAdd);
    // Nothing learned: frozen decides the same.
    policy.set_learning(false);
    EXPECT_EQ(policy.Decide(ShapeContext(100, w, 0, 0, {m, 1000, false})), kSkip);
  }
}

TEST(ConvergePolicy, KeepsToTheDeepestGroupThatHasPeersWaiting) {
  // Rule 1b: a batch of one 2,000-token branch whose largest leaf (4,000 tokens, depth 2048)
  // has peers waiting passes over a candidate of the sibling leaf; it admits one of the leaf,
  // or the sibling once no peer of the leaf waits. Gated or not, before any fit.
  for (const bool gated : {true, false}) {
    ConvergePolicy policy(gated);
    const uint32_t w = ConvergePolicy::kMinBacklogRequests;
    const uint32_t m = kCascadeMinRequests;
    auto context = [&](uint32_t batch_prefix, bool in_leaf, bool nested, uint32_t leaf_waiting,
                       uint32_t leaf_requests) {
      StopContext c = ShapeContext(100, w, batch_prefix, 2000, {100, 2000, true, 300, true});
      c.largest_groups[3] = {leaf_requests, 4000, in_leaf, leaf_waiting, nested};
      return c;
    };
    EXPECT_EQ(policy.Decide(context(2000, false, true, 40, m)), kSkip);
    EXPECT_EQ(policy.Decide(context(2000, true, true, 40, m)), kAdd);
    EXPECT_EQ(policy.Decide(context(2000, false, true, 0, m)), kAdd);       // no peer waits
    EXPECT_EQ(policy.Decide(context(2000, false, false, 40, m)), kAdd);     // not within G
    EXPECT_EQ(policy.Decide(context(2000, false, true, 40, m - 1)), kAdd);  // too small
    // The same in a mixed batch whose largest group G (the branch) holds the candidate.
    EXPECT_EQ(policy.Decide(context(0, false, true, 40, m)), kSkip);
    EXPECT_EQ(policy.Decide(context(0, true, true, 40, m)), kAdd);
    // The deepest qualifying group decides: a deeper one that holds the candidate admits it.
    StopContext deeper = context(2000, false, true, 40, m);
    deeper.largest_groups[4] = {m, 5000, true, 5, true};
    EXPECT_EQ(policy.Decide(deeper), kAdd);
    // No backlog: admit.
    StopContext idle = context(2000, false, true, 40, m);
    idle.waiting = w - 1;
    EXPECT_EQ(policy.Decide(idle), kAdd);
  }
}

// The gate, on a fit trained on an exact law with one price per KV read, t = 10 + 0.1·n + 1e-5·T
// ms (T the tokens read): a homogeneous batch of n = 40 requests of 5,250 tokens over a
// 5,000-token prefix.
class GatedConverge : public ::testing::Test {
 protected:
  static constexpr double kPrefix = 5000, kLength = 5250;
  static double LawMs(double n, double reads, double unique, double repeat_cost,
                      double distinct_cost) {
    return 10 + 0.1 * n + distinct_cost * unique + repeat_cost * (reads - unique);
  }
  void SetUp() override { Train(policy_, 64); }
  // `steps` steps of varied shape, every `cascade_every`-th with cascade (none when 0), priced
  // by the law; fed to a ConvergePolicy or an MpcPolicy alike.
  template <class Policy>
  static void Train(Policy& policy, uint32_t steps, double repeat_cost = 1e-5,
                    uint32_t cascade_every = 3, double distinct_cost = 1e-5) {
    for (uint32_t i = 0; i < steps; ++i) {
      StepFeedback f;
      f.decode_requests = 20 + 7 * (i % 60);
      const double groups = 1 + i % 5;
      f.decode_kv_tokens = static_cast<uint64_t>(f.decode_requests * (kLength + 10 * (i % 7)));
      f.decode_kv_unique_tokens =
          static_cast<uint64_t>(groups * kPrefix + f.decode_requests * (kLength - kPrefix));
      f.cascade_used = cascade_every > 0 && i % cascade_every == 0;
      f.common_prefix_tokens = f.cascade_used ? static_cast<uint32_t>(kPrefix) : 0;
      double reads = static_cast<double>(f.decode_kv_tokens);
      if (f.cascade_used) reads -= (f.decode_requests - 1) * kPrefix;
      f.decode_ns = static_cast<int64_t>(
          LawMs(f.decode_requests, reads,
                std::min<double>(reads, static_cast<double>(f.decode_kv_unique_tokens)),
                repeat_cost, distinct_cost) *
          1e6);
      f.batch_size = f.decode_requests;
      policy.OnStepExecuted(f);
    }
  }
  // The candidate from another group would end the batch's cascade; `peers` of the batch's
  // group wait, `waiting` in all.
  static StopContext Homogeneous(uint32_t n, uint32_t peers, uint32_t waiting) {
    StopContext c = ShapeContext(n, waiting, 5000, 0, {n, 5000, false, peers});
    c.batch_kv_tokens = static_cast<uint64_t>(n * kLength);
    c.batch_unique_kv_tokens = static_cast<uint64_t>(kPrefix + n * (kLength - kPrefix));
    c.candidate_tokens = static_cast<uint32_t>(kLength);
    c.candidate_cached_tokens = static_cast<uint32_t>(kPrefix);
    c.max_batch_requests = 500;
    return c;
  }
  ConvergePolicy policy_;
};

TEST_F(GatedConverge, OpensForASmallGroupAndHoldsAGroupThatCanFillTheBatch) {
  // 40 requests with cascade: 40 / (10 + 4 + 1e-5·15,000) ≈ 2.8 per ms; the mixed batch of 500
  // without cascade: 500 / (10 + 50 + 1e-5·500·5,250) ≈ 5.8 per ms.
  EXPECT_EQ(policy_.Decide(Homogeneous(40, 0, 1000)), kAdd);
  // With 460 of the group's peers waiting, the kept batch refills to 500 with cascade:
  // 500 / (10 + 50 + 1e-5·130,000) ≈ 8.2 per ms, faster.
  EXPECT_EQ(policy_.Decide(Homogeneous(40, 460, 1000)), kStop);
  // The shape-only variant stops in both, and so does the gate without a backlog bar passed.
  ConvergePolicy shape(/*gated=*/false);
  EXPECT_EQ(shape.Decide(Homogeneous(40, 0, 1000)), kStop);
  EXPECT_EQ(policy_.Decide(Homogeneous(40, 0, ConvergePolicy::kMinBacklogRequests - 1)), kAdd);
}

TEST_F(GatedConverge, OpensOnceTheFitHasItsStepsOfAnyKind) {
  // mpc's min_steps (16) steps, none with cascade: the tied prices need no cascade step.
  ConvergePolicy early;
  Train(early, 15, 1e-5, /*cascade_every=*/0);
  EXPECT_EQ(early.Decide(Homogeneous(40, 0, 1000)), kStop);
  Train(early, 1, 1e-5, /*cascade_every=*/0);
  EXPECT_EQ(early.Decide(Homogeneous(40, 0, 1000)), kAdd);
}

TEST_F(GatedConverge, OpensWhereFreeRepeatedReadsMakeTheMixedBatchFaster) {
  // A law whose repeated reads are free (the GPU's L2 at its best) and distinct ones cost 1e-4:
  // kept, 200 requests with cascade: 200 / (10 + 20 + 1e-4·55,000) ≈ 5.6 per ms; mixed, 500
  // without cascade, its repeats free: 500 / (10 + 50 + 1e-4·~130,000) ≈ 6.8 per ms. A four-term
  // fit of this law sets c3 = 0, which the gate's first version read as "cannot price cascade"
  // and stayed shut for good (groups-100, seed 3: 0.47x the oracle); the tied price opens it.
  ConvergePolicy policy;
  Train(policy, 64, /*repeat_cost=*/0, /*cascade_every=*/3, /*distinct_cost=*/1e-4);
  EXPECT_EQ(policy.Decide(Homogeneous(40, 160, 1000)), kAdd);
  // With 460 peers waiting the kept batch refills to 500 with cascade: 500 / (60 + 13) ≈ 6.8
  // per ms against a mixed batch the tied price makes slower: it keeps.
  EXPECT_EQ(policy.Decide(Homogeneous(40, 460, 1000)), kStop);
}

TEST_F(GatedConverge, PricesEachBatchByTheStepsOfItsKind) {
  // Steps without cascade follow t = 30 + 0.05·n + 2e-5·T ms, steps with cascade
  // t = 5 + 0.2·n + 2e-5·T (each kind linear: its tied fit is exact). Kept, 40 requests with 260
  // peers waiting, 300 with cascade: 300 / (5 + 60 + 2e-5·80,000) ≈ 4.50 per ms; mixed, 500
  // without: 500 / (30 + 25 + 2e-5·2.625M) ≈ 4.65 per ms: admit. One fit of both kinds blends
  // the fixed and per-request costs, prices the kept batch at ~4.6 and the mixed at ~4.2, and
  // would keep.
  ConvergePolicy policy;
  MpcPolicy pooled(MpcConfig{.forgetting = 1.0});
  for (uint32_t i = 0; i < 96; ++i) {
    StepFeedback f;
    f.decode_requests = f.batch_size = 20 + 7 * (i % 60);
    f.cascade_used = i % 2 == 0;
    f.decode_kv_tokens = static_cast<uint64_t>(f.decode_requests * (kLength + 10 * (i % 7)));
    f.common_prefix_tokens = f.cascade_used ? static_cast<uint32_t>(kPrefix) : 0;
    double reads = static_cast<double>(f.decode_kv_tokens);
    if (f.cascade_used) reads -= (f.decode_requests - 1) * kPrefix;
    f.decode_kv_unique_tokens = static_cast<uint64_t>(reads);
    const double ms = f.cascade_used ? 5 + 0.2 * f.decode_requests + 2e-5 * reads
                                     : 30 + 0.05 * f.decode_requests + 2e-5 * reads;
    f.decode_ns = static_cast<int64_t>(ms * 1e6);
    policy.OnStepExecuted(f);
    pooled.OnStepExecuted(f);
  }
  const auto one = pooled.TiedReadCoefficients();
  ASSERT_TRUE(one.has_value());
  const double kept_ms = pooled.PredictDecodeMsWith(*one, 300, 300 * 5250, 80000, 5000);
  const double mixed_ms = pooled.PredictDecodeMsWith(*one, 500, 500 * 5250, 0, 0);
  ASSERT_LT(500 / mixed_ms, 300 / kept_ms) << "one pooled fit must keep, or the test shows nothing";
  EXPECT_EQ(policy.Decide(Homogeneous(40, 260, 1000)), kAdd);
  // With fewer peers the kept batch is smaller and slower: 200 / (5 + 40 + 1.1) ≈ 4.3 per ms.
  EXPECT_EQ(policy.Decide(Homogeneous(40, 160, 1000)), kAdd);
}

TEST_F(GatedConverge, TheMixedBatchIsBoundedByTheLimitAndTheFreeKv) {
  StopContext c = Homogeneous(40, 0, 1000);
  EXPECT_EQ(ConvergePolicy::MixedBatchRequests(c), 500u);  // max_batch_requests
  c.max_batch_requests = 0;
  EXPECT_EQ(ConvergePolicy::MixedBatchRequests(c), 1040u);  // the batch plus the waiting
  // 40 × 16-token blocks free hold 640 tokens; a request like the batch's takes
  // unique/n = (5,000 + 40·250) / 40 = 375 tokens plus a block.
  c.kv_block_tokens = 16;
  c.kv_total_blocks = 1000;
  c.kv_used_blocks = 960;
  EXPECT_EQ(ConvergePolicy::MixedBatchRequests(c), 41u);
  // With no room at all, the candidate still counts.
  c.kv_used_blocks = 1000;
  EXPECT_EQ(ConvergePolicy::MixedBatchRequests(c), 41u);
  // A 41-request mixed batch loses to the cascade batch of 40: the gate stays shut.
  EXPECT_EQ(policy_.Decide(c), kStop);
}

TEST(MpcPolicy, IgnoresStepsWhoseShapeIsNotReported) {
  MpcPolicy policy;
  StepFeedback f;
  f.decode_requests = 10;
  f.decode_ns = 20'000'000;  // decode_kv_tokens left 0: the caller did not report the shape
  for (int i = 0; i < 100; ++i) policy.OnStepExecuted(f);
  EXPECT_EQ(policy.fit().observed, 0u);
  EXPECT_FALSE(policy.Coefficients().has_value());
}

// ---------------------------------------------------------------- Dynamic Batching

StopContext MemoryContext(uint32_t b, uint64_t used, uint64_t total, uint32_t candidate) {
  StopContext c = Context(b, std::nullopt);
  c.kv_used_blocks = used;
  c.kv_total_blocks = total;
  c.candidate_blocks = candidate;
  return c;
}

StepFeedback Step(uint32_t batch_size, double step_ms) {
  StepFeedback f;
  f.batch_size = batch_size;
  f.decode_tokens = batch_size;
  f.step_ns = static_cast<int64_t>(step_ms * 1e6);
  return f;
}

TEST(DynamicBatchingPolicy, MemoryCapStopsAboveTheFraction) {
  DynamicBatchingPolicy policy;                                   // 95 % of the pool
  EXPECT_EQ(policy.Decide(MemoryContext(3, 90, 100, 5)), kAdd);   // 95 = 95: not above
  EXPECT_EQ(policy.Decide(MemoryContext(3, 90, 100, 6)), kStop);  // 96 > 95
  EXPECT_EQ(policy.Decide(MemoryContext(0, 90, 100, 60)), kAdd);  // empty batch: progress
  EXPECT_EQ(policy.Decide(MemoryContext(3, 90, 0, 60)), kAdd);    // no memory reported
  // Prefix signals are ignored.
  StopContext c = MemoryContext(3, 10, 100, 1);
  c.signal = Signal(100, 0, 0);
  EXPECT_EQ(policy.Decide(c), kAdd);
}

TEST(DynamicBatchingPolicy, LatencyCapUsesTheFittedLine) {
  DynamicBatchingPolicy policy;  // 50 ms target
  for (int i = 0; i < 5; ++i) policy.OnStepExecuted(Step(10, 20.0));
  EXPECT_FALSE(policy.PredictStepMs(40).has_value());  // one batch size: no fit yet
  EXPECT_EQ(policy.Decide(Context(1000, std::nullopt)), kAdd);
  policy.OnStepExecuted(Step(20, 30.0));  // t = 10 + n ms
  ASSERT_TRUE(policy.PredictStepMs(40).has_value());
  EXPECT_NEAR(*policy.PredictStepMs(40), 50.0, 1e-9);
  EXPECT_EQ(policy.Decide(Context(38, std::nullopt)), kAdd);   // predicts 49 ms at 39
  EXPECT_EQ(policy.Decide(Context(40, std::nullopt)), kStop);  // predicts 51 ms at 41
  EXPECT_EQ(policy.Decide(Context(0, std::nullopt)), kAdd);
}

TEST(DynamicBatchingPolicy, PlainLeastSquaresFitsNoisyPoints) {
  DynamicBatchingConfig config;
  config.forgetting = 1.0;
  DynamicBatchingPolicy policy(config);
  // t = 5 + 2n with ±1 ms alternating noise, symmetric per batch size.
  for (uint32_t n = 1; n <= 20; ++n) {
    policy.OnStepExecuted(Step(n, 5.0 + 2.0 * n + 1.0));
    policy.OnStepExecuted(Step(n, 5.0 + 2.0 * n - 1.0));
  }
  EXPECT_NEAR(*policy.PredictStepMs(0), 5.0, 1e-6);
  EXPECT_NEAR(*policy.PredictStepMs(30), 65.0, 1e-6);
}

TEST(DynamicBatchingPolicy, FrozenKeepsItsFit) {
  DynamicBatchingPolicy policy;
  policy.OnStepExecuted(Step(10, 20.0));
  policy.OnStepExecuted(Step(20, 30.0));
  policy.set_learning(false);
  policy.OnStepExecuted(Step(30, 100.0));
  EXPECT_EQ(policy.fit().max_batch_seen, 20u);
  EXPECT_NEAR(*policy.PredictStepMs(40), 50.0, 1e-9);
}

// ---------------------------------------------------------------- bandit-authors

// The authors' bandit is pinned: c = 200, the authors' bins, reward = batch size / whole step
// time, whatever the scenario's bandit knobs, state_bins or reward_time say.
TEST(BanditAuthors, IsPinnedWhateverTheOptionsSay) {
  StopPolicyOptions options;
  options.bandit.exploration = 7.0;
  options.state_bins = StateBins::kExponential;
  const auto policy = MakeStopPolicy("bandit-authors", options);
  const auto& bandit = dynamic_cast<BanditPolicy&>(*policy);
  EXPECT_EQ(bandit.Name(), "bandit-authors");
  EXPECT_EQ(bandit.config().exploration, 200.0);
  EXPECT_EQ(bandit.config().state_bins, StateBins::kAuthors);
  EXPECT_EQ(bandit.config().reward, BanditReward::kAuthors);
  EXPECT_EQ(MakeStopPolicy("bandit")->Name(), "bandit");
}

TEST(BanditAuthors, RewardIsBatchSizeOverTheWholeStep) {
  // 10 requests in the step, 4 of them sampled a token (6 were prefill chunks); the whole step
  // took 2 s, its decode requests alone would have taken 1 s (reward_time: decode-only).
  StepFeedback f;
  f.batch_size = 10;
  f.decode_tokens = 4;
  f.step_ns = 1'000'000'000;
  f.whole_step_ns = 2'000'000'000;
  const uint32_t state = StateIndex(StateKey{2, 7, 1});  // b = 8, Δ = 2, w = 4
  for (const char* name : {"bandit-authors", "bandit"}) {
    SCOPED_TRACE(name);
    const auto policy = MakeStopPolicy(name);
    auto& bandit = dynamic_cast<BanditPolicy&>(*policy);
    bandit.BeginRound();
    ASSERT_EQ(bandit.Decide(Context(8, Signal(10, 8, 4))), kAdd);  // both unseen: Add
    bandit.OnStepExecuted(f);
    const double expected = std::string_view(name) == "bandit-authors" ? 5.0 : 4.0;
    EXPECT_DOUBLE_EQ(bandit.tables().reward_sum[CellIndex(state, kAdd)], expected);
  }
  // A caller that does not separate the two times (whole_step_ns = 0) prices on step_ns.
  f.whole_step_ns = 0;
  EXPECT_DOUBLE_EQ(*StepRewardBatchPerS(f), 10.0);
  f.step_ns = 0;
  EXPECT_FALSE(StepRewardBatchPerS(f).has_value());
}

// A fixed sequence of rounds in the simulator's pattern; the decisions pin the authors' bandit's
// behaviour (UCB with c = 200 on batch size per second) so that a change of `bandit`'s defaults,
// or of its reward, cannot move it.
TEST(BanditAuthors, DecisionSequenceIsPinned) {
  const auto policy = MakeStopPolicy("bandit-authors");
  std::string trace;
  for (uint32_t round = 0; round < 40; ++round) {
    policy->BeginRound();
    uint32_t b = 1 + round % 5;
    for (; b < 60; ++b) {
      const uint32_t x = (round * 7 + b * 3) % 11;
      const StopDecision d = policy->Decide(Context(b, Signal(20, 20 - x % 4, x)));
      if (d == kStop) break;
    }
    trace += std::to_string(b) + ' ';
    StepFeedback f;
    f.batch_size = b;
    f.decode_tokens = b / 2;  // what `bandit` would reward; the authors' reward ignores it
    f.step_ns = 1'000'000;
    f.whole_step_ns = 10'000'000 + 1'500'000ll * b;  // a bigger batch: a slower step
    policy->OnStepExecuted(f);
  }
  EXPECT_EQ(trace, kBanditAuthorsTrace);
}

// ---------------------------------------------------------------- factory

TEST(StopPolicyFactory, BuildsEveryNamedPolicy) {
  const std::vector<std::string_view> expected = {
      "always",           "heuristic",      "bandit",        "qlearning",
      "dynamic-batching", "bandit-authors", "bandit-delayed", "mpc",
      "converge",         "converge-shape"};
  ASSERT_EQ(StopPolicyNames().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(StopPolicyNames()[i], expected[i]);
    const std::unique_ptr<StopPolicy> policy = MakeStopPolicy(expected[i]);
    ASSERT_NE(policy, nullptr);
    EXPECT_EQ(policy->Name(), expected[i]);
    EXPECT_TRUE(policy->learning());
  }
}

TEST(StopPolicyFactory, PassesOptionsThrough) {
  StopPolicyOptions options;
  options.heuristic.floor_cap = 3;
  options.bandit.exploration = 7.0;
  options.qlearning.discount = 0.5;
  options.state_bins = StateBins::kExponential;
  options.dynamic_batching.latency_target_ms = 12.0;
  const auto heuristic = MakeStopPolicy("heuristic", options);
  EXPECT_EQ(dynamic_cast<HeuristicPolicy&>(*heuristic).config().floor_cap, 3u);
  const auto bandit = MakeStopPolicy("bandit", options);
  EXPECT_EQ(dynamic_cast<BanditPolicy&>(*bandit).config().exploration, 7.0);
  EXPECT_EQ(dynamic_cast<BanditPolicy&>(*bandit).config().state_bins, StateBins::kExponential);
  const auto q = MakeStopPolicy("qlearning", options);
  EXPECT_EQ(dynamic_cast<QLearningPolicy&>(*q).config().discount, 0.5);
  const auto dynamic = MakeStopPolicy("dynamic-batching", options);
  EXPECT_EQ(dynamic_cast<DynamicBatchingPolicy&>(*dynamic).config().latency_target_ms, 12.0);
}

TEST(StopPolicyFactory, UnknownNameListsTheValidNames) {
  try {
    (void)MakeStopPolicy("greedy");
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'greedy'"), std::string::npos) << message;
    for (std::string_view name : StopPolicyNames()) {
      EXPECT_NE(message.find(std::string(name)), std::string::npos) << message;
    }
  }
}

TEST(StopPolicyFactory, OutOfRangeOptionsAreAllReported) {
  StopPolicyOptions options;
  options.qlearning.learning_rate = 0.0;
  options.qlearning.epsilon_min = 2.0;
  try {
    (void)MakeStopPolicy("qlearning", options);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("learning_rate = 0: must be in (0, 1]"), std::string::npos) << message;
    EXPECT_NE(message.find("epsilon_min = 2: must be in [0, 1]"), std::string::npos) << message;
  }
  options = {};
  options.dynamic_batching.memory_fraction = 1.5;
  EXPECT_THROW((void)MakeStopPolicy("dynamic-batching", options), std::invalid_argument);
  EXPECT_NO_THROW((void)MakeStopPolicy("bandit", options));  // only the named policy's fields
  // A cross-field rule, once every knob is in range.
  options = {};
  options.qlearning.epsilon_start = 0.1;
  options.qlearning.epsilon_min = 0.5;
  try {
    (void)MakeStopPolicy("qlearning", options);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("epsilon_min (0.5) must be <= epsilon_start (0.1)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace feather
