// simulator_test.cc: the serving loop against a constant-cost engine: conservation of tokens,
// the vLLM limits (token budget, max batch, chunked prefill), prefix-cache hits, preemption by
// recompute, rejection of unservable requests, scheduler-time charging, TBT bookkeeping and
// determinism.
#include "sim/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "policies/selector_factory.h"
#include "policies/stop_policy_factory.h"
#include "sim/synthetic_prompts.h"

namespace feather {
namespace {

// Step time = fixed + per_request × requests + per_token × new tokens; remembers the plans.
class ConstantEngine final : public Engine {
 public:
  std::string_view Name() const override { return "constant"; }
  StepTiming Execute(const BatchPlan& plan) override {
    StepTiming t;
    t.term_ns[static_cast<size_t>(StepTerm::kOverhead)] =
        1'000'000 + 10'000 * static_cast<int64_t>(plan.num_requests()) +
        100 * static_cast<int64_t>(plan.total_new_tokens());
    t.total_ns = t.term(StepTerm::kOverhead);
    if (plan.num_requests() >= 2) {  // one request alone shares its whole table with itself
      max_common_prefix = std::max(max_common_prefix, plan.common_prefix_tokens);
    }
    for (const StepRequest& r : plan.requests) {
      EXPECT_GE(r.block_table.size() * plan.block_tokens, r.context_tokens + r.new_tokens);
    }
    return t;
  }
  uint32_t max_common_prefix = 0;
};

Workload MakeWorkload(uint32_t count, uint32_t groups, uint32_t prefix, uint32_t suffix,
                      uint32_t output, int64_t gap_ns, uint64_t seed = 7) {
  Workload w;
  w.prompts = MakeGroupedPrompts(count, groups, prefix, suffix, seed);
  for (uint32_t i = 0; i < count; ++i) {
    w.arrival_ns.push_back(gap_ns * i);
    w.output_tokens.push_back(output + i % 3);
  }
  return w;
}

ServingConfig SmallConfig() {
  ServingConfig c;
  c.kv_cache_blocks = 4096;
  c.scheduler_time = SchedulerTimeMode::kZero;
  return c;
}

SimResult RunWith(const ServingConfig& config, const Workload& w, std::string_view selector_name,
                  std::string_view stop_name, ConstantEngine* engine_out = nullptr) {
  std::unique_ptr<CandidateSelector> selector = MakeSelector(selector_name);
  std::unique_ptr<StopPolicy> policy = MakeStopPolicy(stop_name);
  ConstantEngine local;
  ConstantEngine& engine = engine_out ? *engine_out : local;
  Simulator sim(config, w, *selector, *policy, engine);
  return sim.Run();
}

void ExpectConservation(const SimResult& r, const Workload& w) {
  ASSERT_TRUE(r.complete);
  uint64_t expected_tokens = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const RequestRecord& rec = r.records.requests[i];
    EXPECT_EQ(rec.output_tokens, w.output_tokens[i]) << "request " << i;
    EXPECT_GE(rec.first_token_ns, rec.arrival_ns);
    EXPECT_GE(rec.finish_ns, rec.first_token_ns);
    expected_tokens += w.output_tokens[i];
  }
  EXPECT_EQ(r.summary.output_tokens, expected_tokens);
  EXPECT_EQ(r.summary.requests_finished, w.size());
  uint64_t step_tokens = 0;
  for (const StepRecord& s : r.records.steps) step_tokens += s.decode_tokens;
  // Every output token is sampled by a step; the first one of each admission by a prefill step.
  EXPECT_LE(step_tokens, expected_tokens);
}

TEST(SimulatorTest, EverySelectorAndPolicyFinishesEveryRequest) {
  const Workload w = MakeWorkload(60, 3, 300, 40, 20, 2'000'000);
  for (std::string_view selector : SelectorNames()) {
    for (std::string_view stop : StopPolicyNames()) {
      SCOPED_TRACE(std::string(selector) + " + " + std::string(stop));
      const SimResult r = RunWith(SmallConfig(), w, selector, stop);
      ExpectConservation(r, w);
    }
  }
}

TEST(SimulatorTest, RespectsTokenBudgetAndMaxBatch) {
  ServingConfig c = SmallConfig();
  c.max_num_batched_tokens = 256;
  c.max_num_seqs = 7;
  const Workload w = MakeWorkload(40, 2, 500, 100, 10, 0);
  const SimResult r = RunWith(c, w, "fcfs", "always");
  ExpectConservation(r, w);
  for (const StepRecord& s : r.records.steps) {
    EXPECT_LE(s.batch_size, 7u);
    EXPECT_LE(s.prefill_tokens + s.decode_tokens, 256u);
  }
}

TEST(SimulatorTest, ChunkedPrefillSpreadsALongPromptOverSteps) {
  ServingConfig c = SmallConfig();
  c.max_num_batched_tokens = 256;
  Workload w = MakeWorkload(1, 1, 0, 1000, 5, 0);
  const SimResult r = RunWith(c, w, "fcfs", "always");
  ExpectConservation(r, w);
  // 1000 prompt tokens at 256 per step: 4 prefill steps, the last one samples the first token,
  // then 4 decode steps.
  ASSERT_EQ(r.records.steps.size(), 4u + 4u);
  EXPECT_EQ(r.records.steps[0].prefill_tokens, 256u);
  EXPECT_EQ(r.records.steps[3].prefill_tokens, 1000u - 3 * 256u);
  EXPECT_EQ(r.records.requests[0].first_token_ns,
            r.records.steps[3].start_ns + r.records.steps[3].step_ns);
}

TEST(SimulatorTest, PrefixCacheHitsShortenPrefill) {
  const Workload w = MakeWorkload(20, 1, 800, 50, 4, 50'000'000);  // arrivals far apart
  ServingConfig c = SmallConfig();
  const SimResult cached = RunWith(c, w, "fcfs", "always");
  ExpectConservation(cached, w);
  // Every request after the first finds the 800-token prefix (50 full blocks) cached.
  for (size_t i = 1; i < w.size(); ++i) {
    EXPECT_EQ(cached.records.requests[i].cached_tokens, 800u) << i;
  }
  c.prefix_caching = false;
  const SimResult uncached = RunWith(c, w, "fcfs", "always");
  ExpectConservation(uncached, w);
  EXPECT_EQ(uncached.summary.cached_prompt_tokens, 0u);
  EXPECT_LT(cached.summary.term_s[static_cast<size_t>(StepTerm::kOverhead)],
            uncached.summary.term_s[static_cast<size_t>(StepTerm::kOverhead)]);
}

TEST(SimulatorTest, RequestsScheduledInOneStepShareAPrefixTheStepComputes) {
  // Four requests of one group arrive together with nothing cached. As in vLLM v1 (blocks are
  // cached when allocated), the first computes the 800-token prefix and the three admitted after
  // it in the same step hit it: the first step prefills 800 + 4 × 50 tokens, not 4 × 850.
  const Workload w = MakeWorkload(4, 1, 800, 50, 4, 0);
  ServingConfig c = SmallConfig();
  c.max_num_batched_tokens = 8192;
  const SimResult r = RunWith(c, w, "fcfs", "always");
  ExpectConservation(r, w);
  EXPECT_EQ(r.records.requests[0].cached_tokens, 0u);
  for (size_t i = 1; i < w.size(); ++i) {
    EXPECT_EQ(r.records.requests[i].cached_tokens, 800u) << i;
  }
  ASSERT_FALSE(r.records.steps.empty());
  EXPECT_EQ(r.records.steps[0].batch_size, 4u);
  EXPECT_EQ(r.records.steps[0].prefill_tokens, 800u + 4 * 50u);
  // Chunked: with 496 tokens a step the first request's prompt spans two steps; the others are
  // admitted in the second with the budget its last chunk leaves, and hit the prefix that chunk
  // completes. No prefix token is computed twice.
  c.max_num_batched_tokens = 496;
  const SimResult chunked = RunWith(c, w, "fcfs", "always");
  ExpectConservation(chunked, w);
  uint64_t prefilled = 0;
  for (const StepRecord& s : chunked.records.steps) prefilled += s.prefill_tokens;
  EXPECT_EQ(prefilled, 800u + 4 * 50u);
  EXPECT_EQ(chunked.records.steps[0].batch_size, 1u);
  for (size_t i = 1; i < w.size(); ++i) {
    EXPECT_EQ(chunked.records.requests[i].cached_tokens, 800u) << i;
  }
}

TEST(SimulatorTest, PreemptsByRecomputeWhenBlocksRunOut) {
  ServingConfig c = SmallConfig();
  c.kv_cache_blocks = 60;  // 960 tokens: about three requests of 200 + 100 output
  c.prefix_caching = false;
  Workload w = MakeWorkload(12, 12, 0, 200, 100, 0);
  const SimResult r = RunWith(c, w, "fcfs", "always");
  ExpectConservation(r, w);
  EXPECT_GT(r.summary.preemptions, 0u);
  uint64_t per_request = 0;
  for (const RequestRecord& rec : r.records.requests) per_request += rec.preemptions;
  EXPECT_EQ(per_request, r.summary.preemptions);
}

TEST(SimulatorTest, RejectsARequestLargerThanThePool) {
  ServingConfig c = SmallConfig();
  c.kv_cache_blocks = 20;  // 320 tokens
  Workload w = MakeWorkload(3, 3, 0, 100, 3, 0);
  // Make the middle prompt far longer than the pool.
  Workload big = MakeWorkload(1, 1, 0, 1000, 3, 0, 99);
  Workload mixed;
  mixed.prompts.offsets.push_back(0);
  for (size_t i = 0; i < 3; ++i) {
    const auto p = i == 1 ? big.prompts.Prompt(0) : w.prompts.Prompt(i);
    mixed.prompts.tokens.insert(mixed.prompts.tokens.end(), p.begin(), p.end());
    mixed.prompts.offsets.push_back(mixed.prompts.tokens.size());
    mixed.prompts.group.push_back(static_cast<uint32_t>(i));
    mixed.arrival_ns.push_back(0);
    mixed.output_tokens.push_back(3);
  }
  const SimResult r = RunWith(c, mixed, "fcfs", "always");
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(r.summary.requests_finished, 2u);
  EXPECT_EQ(r.records.requests[1].finish_ns, -1);
}

TEST(SimulatorTest, HomogeneousBatchesExposeTheCommonPrefix) {
  // Arrivals 2 ms apart: each finds the prefix the first one computed. (Requests prefilling the
  // same prefix in the same step get private copies, as in vLLM: no sharing among those.)
  ConstantEngine engine;
  const Workload w = MakeWorkload(30, 1, 1600, 20, 30, 2'000'000);
  const SimResult r = RunWith(SmallConfig(), w, "cht", "always", &engine);
  ExpectConservation(r, w);
  EXPECT_EQ(engine.max_common_prefix, 1600u);  // 100 full blocks shared by all
}

TEST(SimulatorTest, ChargesFixedSchedulerTimePerRound) {
  ServingConfig c = SmallConfig();
  c.scheduler_time = SchedulerTimeMode::kFixed;
  c.scheduler_fixed_ns = 250'000;
  const Workload w = MakeWorkload(10, 2, 100, 20, 5, 0);
  const SimResult r = RunWith(c, w, "fcfs", "always");
  ExpectConservation(r, w);
  for (const StepRecord& s : r.records.steps) EXPECT_EQ(s.scheduler_ns, 250'000);
  EXPECT_DOUBLE_EQ(r.summary.scheduler_cpu_s,
                   static_cast<double>(r.records.steps.size()) * 250e-6);
}

TEST(SimulatorTest, TimeBetweenTokensOfALoneRequestIsTheStepTime) {
  const Workload w = MakeWorkload(1, 1, 0, 32, 11, 0);
  const SimResult r = RunWith(SmallConfig(), w, "fcfs", "always");
  ExpectConservation(r, w);
  // A decode step of one request costs 1 ms + 10 µs + 100 ns.
  EXPECT_NEAR(r.summary.mean_tbt_ms, 1.0101, 1e-6);  // gaps are kept as float
  EXPECT_NEAR(r.summary.p99_tbt_ms, 1.0101, 1e-6);
}

TEST(SimulatorTest, SameSeedSameRecords) {
  const Workload w = MakeWorkload(80, 4, 400, 60, 15, 1'500'000);
  const SimResult a = RunWith(SmallConfig(), w, "cht", "bandit");
  const SimResult b = RunWith(SmallConfig(), w, "cht", "bandit");
  ASSERT_EQ(a.records.steps.size(), b.records.steps.size());
  for (size_t i = 0; i < a.records.steps.size(); ++i) {
    EXPECT_EQ(a.records.steps[i].start_ns, b.records.steps[i].start_ns);
    EXPECT_EQ(a.records.steps[i].batch_size, b.records.steps[i].batch_size);
  }
  EXPECT_EQ(a.summary.throughput_tok_s, b.summary.throughput_tok_s);
}

TEST(SimulatorTest, StepLimitStopsEarly) {
  ServingConfig c = SmallConfig();
  c.max_steps = 5;
  const Workload w = MakeWorkload(10, 2, 100, 20, 50, 0);
  const SimResult r = RunWith(c, w, "fcfs", "always");
  EXPECT_FALSE(r.complete);
  EXPECT_EQ(r.records.steps.size(), 5u);
}

// Always adds; remembers what it was asked and told.
class RecordingPolicy final : public StopPolicy {
 public:
  std::string_view Name() const override { return "recording"; }
  void BeginRound() override {}
  StopDecision Decide(const StopContext& context) override {
    if (context.batch_size == 0) ++empty_batch_decisions;
    return StopDecision::kAdd;
  }
  void OnStepExecuted(const StepFeedback& feedback) override {
    step_ns.push_back(feedback.step_ns);
  }
  uint32_t empty_batch_decisions = 0;
  std::vector<int64_t> step_ns;
};

class DecodePricingEngine final : public Engine {
 public:
  std::string_view Name() const override { return "decode-pricing"; }
  StepTiming Execute(const BatchPlan& plan) override { return inner.Execute(plan); }
  std::optional<int64_t> PriceDecodeOnly(const BatchPlan& decode_plan) override {
    EXPECT_EQ(decode_plan.prefill_tokens, 0u);
    for (const StepRequest& r : decode_plan.requests) EXPECT_FALSE(r.is_prefill);
    return 42;
  }
  ConstantEngine inner;
};

TEST(SimulatorTest, RewardTimeIsTheDecodeOnlyPriceWhenAsked) {
  // The second request arrives while the first decodes: one step mixes prefill and decode.
  const Workload w = MakeWorkload(2, 2, 0, 64, 20, 5'000'000);
  for (const bool decode_only : {false, true}) {
    ServingConfig c = SmallConfig();
    c.reward_decode_only = decode_only;
    std::unique_ptr<CandidateSelector> selector = MakeSelector("fcfs");
    RecordingPolicy policy;
    DecodePricingEngine engine;
    Simulator sim(c, w, *selector, policy, engine);
    const SimResult r = sim.Run();
    ExpectConservation(r, w);
    ASSERT_EQ(policy.step_ns.size(), r.records.steps.size());
    size_t mixed = 0;
    for (size_t i = 0; i < r.records.steps.size(); ++i) {
      const StepRecord& step = r.records.steps[i];
      const bool is_mixed = step.prefill_tokens > 0 && step.decode_tokens > 0;
      mixed += is_mixed ? 1 : 0;
      EXPECT_EQ(policy.step_ns[i], decode_only && is_mixed ? 42 : step.step_ns) << i;
    }
    EXPECT_EQ(mixed, 1u);
    EXPECT_EQ(policy.empty_batch_decisions, 1u);  // the first admission: asked at b = 0 too
  }
}

}  // namespace
}  // namespace feather
