// simulator_sglang_test.cc: the serving loop under `serving.engine: sglang` (SGLang's batch
// formation, sim/serving/sglang_batcher.h) against a constant-cost engine: properties over random
// workloads (every request finishes with its whole output, prefill and decode never share a step,
// KV within the pool, new_token_ratio within [floor, 1], retraction exercised), PrefillAdder's
// decode reservation on a hand-worked case, the paper's trend (longer outputs, smaller prefill
// batches) and determinism.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "policies/selector_factory.h"
#include "policies/stop_policy_factory.h"
#include "sim/serving/simulator.h"
#include "sim/workload/synthetic_prompts.h"
#include "tests/sim/serving/constant_engine.h"

namespace feather {
namespace {

ServingConfig SglangConfigFor(uint64_t kv_blocks) {
  ServingConfig c;
  c.engine = ServingEngine::kSglang;
  c.cascade_attention = false;
  c.kv_cache_blocks = kv_blocks;
  c.scheduler_time = SchedulerTimeMode::kZero;
  c.sglang.chunked_prefill_size = 4096;
  return c;
}

// Grouped prompts (suffixes >= 17 unique tokens, so a prefill always computes more than one
// token), arrivals `gap_ns` apart, outputs in [output_min, output_max].
Workload MakeWorkload(uint32_t count, uint32_t groups, uint32_t prefix, uint32_t suffix,
                      uint32_t output_min, uint32_t output_max, int64_t gap_ns, uint64_t seed) {
  Workload w;
  w.prompts = StoreEachPrompt(MakeGroupedPrompts(count, groups, prefix, suffix, seed));
  std::mt19937_64 rng(seed);
  for (uint32_t i = 0; i < count; ++i) {
    w.arrival_ns.push_back(gap_ns * i);
    w.output_tokens.push_back(output_min +
                              static_cast<uint32_t>(rng() % (output_max - output_min + 1)));
  }
  return w;
}

struct Checked {
  SimResult result;
  uint64_t mixed_steps = 0;
  double min_ratio = 1;
  double max_ratio = 0;
};

// Runs step by step and classifies every scheduled request: a decode is a request that has
// sampled a token and not been retracted since (one new token); anything else is prefill work.
Checked RunChecked(const ServingConfig& config, const Workload& w, std::string_view selector_name) {
  std::unique_ptr<CandidateSelector> selector = MakeSelector(selector_name);
  std::unique_ptr<StopPolicy> policy = MakeStopPolicy("always");
  ConstantEngine engine;
  Simulator sim(config, w, *selector, *policy, engine);
  std::vector<uint32_t> generated(w.size(), 0);
  std::vector<bool> decoding(w.size(), false);
  Checked out;
  while (const std::optional<SchedulePlan> plan = sim.Schedule()) {
    for (const RequestId id : plan->preempted) decoding[id] = false;
    uint32_t decodes = 0;
    for (const StepRequest& r : plan->batch.requests) decodes += decoding[r.id] ? 1 : 0;
    if (decodes != 0 && decodes != plan->batch.requests.size()) ++out.mixed_steps;
    const double ratio = sim.SglangNewTokenRatio();
    out.min_ratio = std::min(out.min_ratio, ratio);
    out.max_ratio = std::max(out.max_ratio, ratio);
    EXPECT_GE(ratio, sim.SglangMinNewTokenRatio() - 1e-12);
    EXPECT_LE(ratio, 1.0);
    // Which requests sample a token this step (their whole known sequence is computed).
    std::vector<RequestId> sampled;
    for (const StepRequest& r : plan->batch.requests) {
      const uint64_t sequence = w.prompts.Prompt(r.id).size() + generated[r.id];
      if (r.context_tokens + r.new_tokens == sequence) sampled.push_back(r.id);
    }
    sim.Complete(*plan, engine.Execute(plan->batch));
    for (const RequestId id : sampled) {
      ++generated[id];
      decoding[id] = true;
    }
  }
  out.result = sim.TakeResult();
  return out;
}

TEST(SimulatorSglangTest, PropertiesHoldOverRandomWorkloads) {
  uint64_t retractions = 0;
  uint64_t chunked_prompts = 0;
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    std::mt19937_64 rng(seed * 7919);
    const uint32_t count = 20 + static_cast<uint32_t>(rng() % 40);
    const uint32_t groups = 1 + static_cast<uint32_t>(rng() % 4);
    const uint32_t prefix = static_cast<uint32_t>(rng() % 700);
    const uint32_t suffix = 17 + static_cast<uint32_t>(rng() % 80);
    const uint32_t out_max = 1 + static_cast<uint32_t>(rng() % 120);
    const int64_t gap = static_cast<int64_t>(rng() % 3) * 700'000;
    const Workload w = MakeWorkload(count, groups, prefix, suffix, 1, out_max, gap, seed);
    ServingConfig c = SglangConfigFor(60 + rng() % 400);
    const int64_t chunks[] = {64, 256, 4096};
    c.sglang.chunked_prefill_size = chunks[rng() % 3];
    c.sglang.max_prefill_tokens = rng() % 2 == 0 ? 16384 : 300;
    c.max_num_seqs = rng() % 2 == 0 ? 500 : 3 + static_cast<uint32_t>(rng() % 6);
    c.block_tokens = rng() % 2 == 0 ? 16 : 1;
    if (c.block_tokens == 1) c.kv_cache_blocks *= 16;
    for (const std::string_view name : {"fcfs", "lpm", "dfs-weight"}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " selector " + std::string(name));
      const Checked r = RunChecked(c, w, name);
      ASSERT_TRUE(r.result.complete);
      EXPECT_EQ(r.result.summary.requests_unservable, 0u);
      EXPECT_EQ(r.result.summary.requests_finished, w.size());
      for (size_t i = 0; i < w.size(); ++i) {
        EXPECT_EQ(r.result.records.requests[i].output_tokens, w.output_tokens[i]) << i;
      }
      EXPECT_EQ(r.mixed_steps, 0u) << "a step held prefill and decode work";
      for (const StepRecord& s : r.result.records.steps) {
        EXPECT_LE(s.kv_used_blocks, c.kv_cache_blocks);
        EXPECT_LE(s.batch_size, c.max_num_seqs + 1);  // + the chunked request in flight
        EXPECT_FALSE(s.cascade_used);
      }
      retractions += r.result.summary.preemptions;
      if (prefix + suffix > static_cast<uint32_t>(c.sglang.chunked_prefill_size)) ++chunked_prompts;
    }
  }
  // The random configurations reach retraction and chunked prefill, so the properties cover them.
  EXPECT_GT(retractions, 0u);
  EXPECT_GT(chunked_prompts, 0u);
}

TEST(SimulatorSglangTest, AdmissionReservesTheOutputOfAdmittedRequests) {
  // 100 blocks of 16 = 1600 tokens. Each request: 100 unique prompt tokens + 500 output tokens.
  // PrefillAdder: 1st 600 < 1600; 2nd 600 < 1600 - 600; 3rd 600 >= 1600 - 1200: NO_TOKEN.
  const Workload w = MakeWorkload(4, 4, 0, 100, 500, 500, 0, 3);
  const Checked r = RunChecked(SglangConfigFor(100), w, "fcfs");
  ASSERT_TRUE(r.result.complete);
  ASSERT_FALSE(r.result.records.steps.empty());
  EXPECT_EQ(r.result.records.steps[0].admitted, 2u);
  EXPECT_EQ(r.result.records.steps[0].decode_tokens, 0u);
  // The batch is marked full: the next steps decode until a request finishes or is retracted.
  EXPECT_EQ(r.result.records.steps[1].admitted, 0u);
  EXPECT_EQ(r.result.records.steps[1].decode_tokens, 2u);
}

// Mean requests per prefill step (steps that admitted any).
double MeanPrefillBatch(const SimResult& r) {
  uint64_t steps = 0;
  uint64_t admitted = 0;
  for (const StepRecord& s : r.records.steps) {
    if (s.admitted == 0) continue;
    ++steps;
    admitted += s.admitted;
  }
  return steps == 0 ? 0.0 : static_cast<double>(admitted) / static_cast<double>(steps);
}

TEST(SimulatorSglangTest, LongerOutputsGiveSmallerPrefillBatches) {
  // The paper (decode-tokens sweep): SGLang's LPM and DFS-weight run smaller batches as the
  // decode length grows. A saturated queue (all 400 requests at once; 5 groups x 2000-token
  // prefixes, 60-token suffixes) and a pool of 40K tokens: PrefillAdder reserves each admitted
  // request's whole output and new_token_ratio x the running ones' remaining output, so longer
  // outputs admit fewer per prefill round. (With arrivals slower than service, the rounds are
  // arrival-limited instead, and longer outputs let more requests queue up per round.)
  for (const std::string_view name : {"lpm", "dfs-weight", "fcfs"}) {
    SCOPED_TRACE(std::string(name));
    const Workload short_out = MakeWorkload(400, 5, 2000, 60, 10, 10, 0, 11);
    const Workload long_out = MakeWorkload(400, 5, 2000, 60, 200, 200, 0, 11);
    const ServingConfig c = SglangConfigFor(2500);
    const Checked s = RunChecked(c, short_out, name);
    const Checked l = RunChecked(c, long_out, name);
    ASSERT_TRUE(s.result.complete);
    ASSERT_TRUE(l.result.complete);
    EXPECT_LT(MeanPrefillBatch(l.result), MeanPrefillBatch(s.result));
  }
}

TEST(SimulatorSglangTest, SameInputsGiveIdenticalRecords) {
  const Workload w = MakeWorkload(80, 3, 400, 40, 1, 90, 300'000, 5);
  const ServingConfig c = SglangConfigFor(150);
  for (const std::string_view name : {"fcfs", "lpm", "dfs-weight"}) {
    const Checked a = RunChecked(c, w, name);
    const Checked b = RunChecked(c, w, name);
    ASSERT_EQ(a.result.records.steps.size(), b.result.records.steps.size());
    for (size_t i = 0; i < a.result.records.steps.size(); ++i) {
      const StepRecord& x = a.result.records.steps[i];
      const StepRecord& y = b.result.records.steps[i];
      EXPECT_EQ(x.start_ns, y.start_ns);
      EXPECT_EQ(x.batch_size, y.batch_size);
      EXPECT_EQ(x.prefill_tokens, y.prefill_tokens);
      EXPECT_EQ(x.decode_tokens, y.decode_tokens);
      EXPECT_EQ(x.kv_used_blocks, y.kv_used_blocks);
    }
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_EQ(a.result.records.requests[i].finish_ns, b.result.records.requests[i].finish_ns);
      EXPECT_EQ(a.result.records.requests[i].cached_tokens,
                b.result.records.requests[i].cached_tokens);
    }
    EXPECT_EQ(a.result.summary.preemptions, b.result.summary.preemptions);
  }
}

TEST(SimulatorSglangTest, DiffersFromVllmOnTheSameWorkload) {
  // The switch is live: vLLM mixes decode into prefill steps, SGLang never does.
  const Workload w = MakeWorkload(60, 2, 300, 40, 20, 20, 500'000, 9);
  ServingConfig vllm = SglangConfigFor(4096);
  vllm.engine = ServingEngine::kVllm;
  std::unique_ptr<CandidateSelector> selector = MakeSelector("fcfs");
  std::unique_ptr<StopPolicy> policy = MakeStopPolicy("always");
  ConstantEngine engine;
  Simulator sim(vllm, w, *selector, *policy, engine);
  const SimResult v = sim.Run();
  uint64_t mixed = 0;
  for (const StepRecord& s : v.records.steps) mixed += s.prefill_tokens > 0 && s.decode_tokens > 0;
  EXPECT_GT(mixed, 0u);
  EXPECT_EQ(RunChecked(SglangConfigFor(4096), w, "fcfs").mixed_steps, 0u);
}

}  // namespace
}  // namespace feather
