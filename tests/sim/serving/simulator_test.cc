// simulator_test.cc: the serving loop against a constant-cost engine: conservation of tokens,
// the vLLM limits (token budget, max batch, chunked prefill), prefix-cache hits, preemption by
// recompute, rejection of unservable requests (each kind, on arrival or at re-admission), the
// overload verdict, scheduler-time charging, TBT bookkeeping and determinism.
#include "sim/serving/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "policies/cht_selector.h"
#include "policies/selector_factory.h"
#include "policies/stop_policy_factory.h"
#include "sim/workload/synthetic_prompts.h"
#include "tests/sim/serving/constant_engine.h"

namespace feather {
namespace {

Workload MakeWorkload(uint32_t count, uint32_t groups, uint32_t prefix, uint32_t suffix,
                      uint32_t output, int64_t gap_ns, uint64_t seed = 7) {
  Workload w;
  w.prompts = StoreEachPrompt(MakeGroupedPrompts(count, groups, prefix, suffix, seed));
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

// `groups` prefixes of `prefix` tokens stored once each as the prompts' shared heads (as the
// workload builder stores them), each followed by `suffix` tokens of the request's own; request
// i is in group i % groups.
Workload MakeSharedHeadWorkload(uint32_t count, uint32_t groups, uint32_t prefix, uint32_t suffix,
                                uint32_t output, int64_t gap_ns) {
  Workload w;
  Token next = 1;
  std::vector<uint64_t> heads;
  for (uint32_t g = 0; g < groups; ++g) {
    heads.push_back(w.prompts.AppendTokens(prefix));
    for (uint32_t t = 0; t < prefix; ++t) w.prompts.MutableTokens(heads.back())[t] = next++;
  }
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t tail = w.prompts.AppendTokens(suffix);
    for (uint32_t t = 0; t < suffix; ++t) w.prompts.MutableTokens(tail)[t] = next++;
    w.prompts.AddPrompt({heads[i % groups], prefix}, {tail, suffix}, i % groups);
    w.arrival_ns.push_back(gap_ns * i);
    w.output_tokens.push_back(output);
  }
  return w;
}

// serving.warm_prefix_cache: every shared head is a hit from the first request of its group on,
// so only the requests' own tokens are prefilled; without it the first of each group computes
// its prefix.
TEST(SimulatorTest, WarmPrefixCacheHitsEveryHeadFromTheFirstRequest) {
  const Workload w = MakeSharedHeadWorkload(10, 2, 800, 50, 4, 50'000'000);
  ServingConfig c = SmallConfig();
  const SimResult cold = RunWith(c, w, "fcfs", "always");
  ExpectConservation(cold, w);
  EXPECT_EQ(cold.records.requests[0].cached_tokens, 0u);
  EXPECT_EQ(cold.records.requests[1].cached_tokens, 0u);
  EXPECT_EQ(cold.summary.cached_prompt_tokens, 8u * 800u);
  c.warm_prefix_cache = true;
  const SimResult warm = RunWith(c, w, "fcfs", "always");
  ExpectConservation(warm, w);
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_EQ(warm.records.requests[i].cached_tokens, 800u) << i;
  }
  EXPECT_EQ(warm.summary.prefill_tokens, 10u * 50u);
  EXPECT_EQ(warm.summary.cached_prompt_tokens, 10u * 800u);
  EXPECT_EQ(warm.summary.evictions, 0u);
  EXPECT_LT(warm.records.requests[0].first_token_ns - warm.records.requests[0].arrival_ns,
            cold.records.requests[0].first_token_ns - cold.records.requests[0].arrival_ns);
}

// A pool smaller than the heads keeps what a warm-up run would leave: the later head whole, and
// of the earlier one the blocks the later did not evict (its deepest go first: a freed table
// returns to the free queue last block first).
TEST(SimulatorTest, WarmPrefixCacheKeepsTheMostRecentHeadsWhenThePoolIsShort) {
  const Workload w = MakeSharedHeadWorkload(2, 2, 800, 50, 4, 50'000'000);  // 50 blocks a head
  ServingConfig c = SmallConfig();
  c.kv_cache_blocks = 80;
  c.warm_prefix_cache = true;
  const SimResult r = RunWith(c, w, "fcfs", "always");
  ExpectConservation(r, w);
  // Group 1's warm-up took the 30 never-used blocks and group 0's 20 deepest.
  EXPECT_EQ(r.records.requests[0].cached_tokens, 30u * 16u);
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

// Requests with these prompt lengths and output lengths, `gap_ns` apart, unique prompts.
Workload MakeSizedWorkload(const std::vector<uint32_t>& prompt_tokens,
                           const std::vector<uint32_t>& output_tokens, int64_t gap_ns = 0) {
  Workload w;
  PromptSet all;
  all.offsets.push_back(0);
  for (size_t i = 0; i < prompt_tokens.size(); ++i) {
    const PromptSet one =
        MakeGroupedPrompts(1, 1, 0, std::max<uint32_t>(prompt_tokens[i], 1), 100 + i);
    const auto p = one.Prompt(0).first(prompt_tokens[i]);
    all.tokens.insert(all.tokens.end(), p.begin(), p.end());
    all.offsets.push_back(all.tokens.size());
    all.group.push_back(static_cast<uint32_t>(i));
    w.arrival_ns.push_back(gap_ns * static_cast<int64_t>(i));
    w.output_tokens.push_back(output_tokens[i]);
  }
  w.prompts = StoreEachPrompt(all);
  return w;
}

// Every request either finished with all its tokens or is listed as unservable, never both.
void ExpectFinishedOrUnservable(const SimResult& r, const Workload& w) {
  ASSERT_TRUE(r.complete);
  std::vector<bool> rejected(w.size(), false);
  for (const UnservableRequest& u : r.unservable) rejected[u.id] = true;
  for (size_t i = 0; i < w.size(); ++i) {
    const RequestRecord& rec = r.records.requests[i];
    if (rejected[i]) {
      EXPECT_EQ(rec.finish_ns, -1) << "request " << i;
    } else {
      EXPECT_EQ(rec.output_tokens, w.output_tokens[i]) << "request " << i;
      EXPECT_GE(rec.finish_ns, rec.first_token_ns) << "request " << i;
    }
  }
  EXPECT_EQ(r.summary.requests_unservable, r.unservable.size());
  EXPECT_EQ(r.summary.requests_finished + r.summary.requests_unservable, w.size());
  EXPECT_TRUE(std::is_sorted(r.unservable.begin(), r.unservable.end(),
                             [](const auto& a, const auto& b) { return a.id < b.id; }));
}

TEST(SimulatorTest, RejectsOnArrivalAPromptLargerThanThePool) {
  ServingConfig c = SmallConfig();
  c.kv_cache_blocks = 20;  // 320 tokens
  // The middle prompt is far longer than the pool; every selector serves the other two.
  const Workload w = MakeSizedWorkload({100, 1000, 100}, {3, 3, 3});
  for (std::string_view selector : SelectorNames()) {
    SCOPED_TRACE(selector);
    const SimResult r = RunWith(c, w, selector, "always");
    ExpectFinishedOrUnservable(r, w);
    EXPECT_EQ(r.summary.requests_finished, 2u);
    ASSERT_EQ(r.unservable.size(), 1u);
    EXPECT_EQ(r.unservable[0].id, 1u);
    EXPECT_EQ(r.unservable[0].reason, UnservableReason::kExceedsKvCache);
    EXPECT_EQ(r.unservable[0].needed, 63u);  // ceil((1000 + 3 - 1) / 16)
    EXPECT_EQ(r.unservable[0].limit, 20u);
  }
}

TEST(SimulatorTest, RejectsOnArrivalARequestWhoseOutputOutgrowsThePool) {
  // The prompt (200 tokens, 13 blocks) fits the 20-block pool but prompt + output (399 tokens,
  // 25 blocks) never does. Admitted, it would decode until the pool ran out, preempt itself and
  // recompute in vain; it is refused before it costs a step, and the short request is served.
  ServingConfig c = SmallConfig();
  c.kv_cache_blocks = 20;
  const Workload w = MakeSizedWorkload({200, 50}, {200, 10});
  const SimResult r = RunWith(c, w, "fcfs", "always");
  ExpectFinishedOrUnservable(r, w);
  ASSERT_EQ(r.unservable.size(), 1u);
  EXPECT_EQ(r.unservable[0].id, 0u);
  EXPECT_EQ(r.unservable[0].reason, UnservableReason::kExceedsKvCache);
  EXPECT_EQ(r.unservable[0].needed, 25u);
  EXPECT_EQ(r.records.requests[0].output_tokens, 0u);
  EXPECT_EQ(r.records.requests[0].preemptions, 0u);
  EXPECT_EQ(r.summary.preemptions, 0u);
  EXPECT_EQ(r.summary.admitted_prompt_tokens, 50u);
  // Exactly the pool: 20 blocks hold prompt + output - 1 = 320 tokens.
  const Workload exact = MakeSizedWorkload({300}, {21});
  const SimResult fits = RunWith(c, exact, "fcfs", "always");
  ExpectConservation(fits, exact);
  EXPECT_TRUE(fits.unservable.empty());
}

TEST(SimulatorTest, RejectsOnArrivalAPromptOverTheBudgetWithoutChunkedPrefill) {
  ServingConfig c = SmallConfig();
  c.chunked_prefill = false;
  c.max_num_batched_tokens = 512;
  const Workload w = MakeSizedWorkload({100, 600, 512, 40}, {5, 5, 5, 5}, 1'000'000);
  for (std::string_view selector : SelectorNames()) {
    SCOPED_TRACE(selector);
    const SimResult r = RunWith(c, w, selector, "always");
    ExpectFinishedOrUnservable(r, w);
    ASSERT_EQ(r.unservable.size(), 1u);
    EXPECT_EQ(r.unservable[0].id, 1u);
    EXPECT_EQ(r.unservable[0].reason, UnservableReason::kPromptOverBudget);
    EXPECT_EQ(r.unservable[0].needed, 600u);
    EXPECT_EQ(r.unservable[0].limit, 512u);
  }
  // With chunked prefill the same prompt is served in chunks.
  c.chunked_prefill = true;
  const SimResult chunked = RunWith(c, w, "fcfs", "always");
  ExpectConservation(chunked, w);
  EXPECT_EQ(chunked.summary.requests_unservable, 0u);
}

TEST(SimulatorTest, RejectsARecomputeOverTheBudgetWithoutChunkedPrefill) {
  // Without chunked prefill a preempted request recomputes prompt + generated tokens in one
  // step; once that exceeds the budget it can never run again. Two requests of 200 + 100 tokens
  // (19 blocks each at the end) share a 34-block pool: when both hold 17 blocks the older one's
  // next block preempts the newer, then about 270 tokens long. It is rejected when it comes up
  // again (vLLM V0's prompt_limit), and a later request is still served.
  ServingConfig c = SmallConfig();
  c.chunked_prefill = false;
  c.prefix_caching = false;
  c.max_num_batched_tokens = 256;
  c.kv_cache_blocks = 34;
  Workload w = MakeSizedWorkload({200, 200, 50}, {100, 100, 5});
  w.arrival_ns[2] = 1'000'000'000;  // after the others are done
  const SimResult r = RunWith(c, w, "fcfs", "always");
  ExpectFinishedOrUnservable(r, w);
  ASSERT_EQ(r.unservable.size(), 1u);
  const UnservableRequest& u = r.unservable[0];
  EXPECT_EQ(u.id, 1u);
  EXPECT_EQ(u.reason, UnservableReason::kRecomputeOverBudget);
  EXPECT_GT(u.needed, 256u);
  EXPECT_EQ(u.limit, 256u);
  EXPECT_EQ(r.records.requests[1].preemptions, 1u);
  EXPECT_EQ(r.summary.requests_finished, 2u);
  for (const StepRecord& s : r.records.steps) EXPECT_LE(s.prefill_tokens + s.decode_tokens, 256u);
}

TEST(SimulatorTest, RejectsAnEmptyPromptInsteadOfSpinning) {
  // An empty prompt has nothing to prefill: admitted, it would sit in the batch forever. The
  // step limit only bounds the test if that regresses.
  ServingConfig c = SmallConfig();
  c.max_steps = 10'000;
  const Workload w = MakeSizedWorkload({30, 0, 30}, {4, 4, 4});
  const SimResult r = RunWith(c, w, "fcfs", "always");
  ExpectFinishedOrUnservable(r, w);
  ASSERT_EQ(r.unservable.size(), 1u);
  EXPECT_EQ(r.unservable[0].id, 1u);
  EXPECT_EQ(r.unservable[0].reason, UnservableReason::kEmptyPrompt);
  EXPECT_LT(r.records.steps.size(), 100u);
}

TEST(SimulatorTest, DescribesUnservableRequestsInOneLine) {
  EXPECT_EQ(DescribeUnservable({}, 10), "");
  const std::vector<UnservableRequest> one = {{7, UnservableReason::kExceedsKvCache, 251, 4}};
  EXPECT_EQ(DescribeUnservable(one, 5),
            "1 of 5 requests can never be served and were rejected: 1 need more KV blocks for "
            "prompt + output than the whole cache holds (up to 251 blocks; the cache has 4); "
            "request 7");
  std::vector<UnservableRequest> many;
  for (RequestId id = 0; id < 7; ++id) {
    many.push_back(
        {id * 10, id < 5 ? UnservableReason::kExceedsKvCache : UnservableReason::kPromptOverBudget,
         1000u + id, id < 5 ? 64u : 512u});
  }
  const std::string line = DescribeUnservable(many, 3993);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_NE(line.find("7 of 3993 requests can never be served"), std::string::npos) << line;
  EXPECT_NE(line.find("5 need more KV blocks"), std::string::npos) << line;
  EXPECT_NE(line.find("(up to 1004 blocks; the cache has 64)"), std::string::npos) << line;
  EXPECT_NE(line.find("2 have a prompt longer than the token budget with chunked prefill off "
                      "(up to 1006 tokens; serving.max_num_batched_tokens 512)"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("; requests 0, 10, 20, 30, 40 and 2 more"), std::string::npos) << line;
}

// Closed-loop replay (Workload::predecessor): a turn arrives at max(its trace time, its
// predecessor's finish), never before, under every selector.
TEST(SimulatorTest, ClosedLoopHoldsATurnUntilItsPredecessorFinishes) {
  // Six requests at t = 0; 1 continues 0, 2 continues 1, 4 and 5 both continue 3.
  Workload w = MakeSizedWorkload({64, 80, 96, 40, 50, 60}, {5, 4, 3, 6, 2, 3});
  const SimResult open = RunWith(SmallConfig(), w, "fcfs", "always");
  for (const RequestRecord& rec : open.records.requests) EXPECT_EQ(rec.arrival_ns, 0);
  w.predecessor = {kNoRequest, 0, 1, kNoRequest, 3, 3};
  for (std::string_view selector : SelectorNames()) {
    SCOPED_TRACE(selector);
    const SimResult r = RunWith(SmallConfig(), w, selector, "always");
    ExpectFinishedOrUnservable(r, w);
    ASSERT_EQ(r.summary.requests_finished, w.size());
    const auto& req = r.records.requests;
    for (size_t i = 0; i < w.size(); ++i) {
      const RequestId p = w.predecessor[i];
      const int64_t expect = p == kNoRequest ? 0 : std::max(w.arrival_ns[i], req[p].finish_ns);
      EXPECT_EQ(req[i].arrival_ns, expect) << i;
      EXPECT_GE(req[i].first_token_ns, req[i].arrival_ns) << i;
    }
    EXPECT_GT(req[2].arrival_ns, req[1].arrival_ns);  // a chain arrives one turn at a time
    EXPECT_EQ(req[4].arrival_ns, req[5].arrival_ns);  // both continue 3
  }
}

TEST(SimulatorTest, ClosedLoopKeepsTraceTimeWhenThePredecessorFinishedFirst) {
  // Request 1 arrives 10 s after request 0, which finishes within milliseconds: not held.
  Workload w = MakeSizedWorkload({64, 80}, {3, 3}, 10'000'000'000);
  w.predecessor = {kNoRequest, 0};
  const SimResult r = RunWith(SmallConfig(), w, "cht", "always");
  ExpectConservation(r, w);
  ASSERT_LT(r.records.requests[0].finish_ns, w.arrival_ns[1]);
  EXPECT_EQ(r.records.requests[1].arrival_ns, w.arrival_ns[1]);
}

TEST(SimulatorTest, ClosedLoopReleasesTheTurnsOfARefusedPredecessor) {
  // Request 0 can never fit the 20-block pool: refused on arrival, its successor arrives then
  // (t = 0) and is served; so is the successor's own successor.
  ServingConfig c = SmallConfig();
  c.kv_cache_blocks = 20;
  Workload w = MakeSizedWorkload({1000, 100, 100}, {3, 3, 3});
  w.predecessor = {kNoRequest, 0, 1};
  const SimResult r = RunWith(c, w, "fcfs", "always");
  ExpectFinishedOrUnservable(r, w);
  ASSERT_EQ(r.unservable.size(), 1u);
  EXPECT_EQ(r.unservable[0].id, 0u);
  EXPECT_EQ(r.records.requests[1].arrival_ns, 0);
  EXPECT_EQ(r.records.requests[2].arrival_ns, r.records.requests[1].finish_ns);
  EXPECT_EQ(r.summary.requests_finished, 2u);
}

TEST(SimulatorTest, ACachedChtWorkingSetHearsEveryEvictionAndServesEveryone) {
  // A pool of 40 blocks (640 tokens) under 60 requests of 3 groups: the cache evicts often.
  // The CHT keeps finished requests in its working set until the cache reports them evicted;
  // with every report delivered, each retained request still owns a cached block.
  ServingConfig c = SmallConfig();
  c.kv_cache_blocks = 40;
  const Workload w = MakeWorkload(60, 3, 300, 40, 20, 2'000'000);
  SelectorOptions options;
  options.cht_retain_cached = true;
  std::unique_ptr<CandidateSelector> selector = MakeSelector("cht", options);
  std::unique_ptr<StopPolicy> policy = MakeStopPolicy("always");
  ConstantEngine engine;
  Simulator sim(c, w, *selector, *policy, engine);
  const SimResult r = sim.Run();
  ExpectConservation(r, w);
  EXPECT_GT(r.summary.evictions, 0u);
  const auto& cht = static_cast<const ChtSelector&>(*selector);
  // Every retained request owns a cached block (else the cache named it): at most one each.
  ASSERT_NE(cht.cached_tree(), nullptr);
  EXPECT_LE(cht.cached_tree()->NumRetained(), c.kv_cache_blocks);
  EXPECT_GT(cht.cached_tree()->NumRetained(), 0u);  // the last ones to finish are still cached
  cht.tree().CheckInvariants();
  cht.cached_tree()->CheckInvariants();
}

TEST(SimulatorTest, FlagsARunWhoseArrivalsOutpaceService) {
  // One request at a time (max batch 1), each taking about 20 steps of ~1 ms: ~50 req/s.
  ServingConfig c = SmallConfig();
  c.max_num_seqs = 1;
  // 200 req/s for 0.5 s: the queue grows by ~150 req/s; at the last arrival ~75 % still wait.
  const Workload fast = MakeWorkload(100, 2, 64, 16, 20, 5'000'000);
  const SimResult over = RunWith(c, fast, "fcfs", "always");
  ExpectConservation(over, fast);
  EXPECT_TRUE(over.summary.overloaded);
  EXPECT_GE(over.summary.waiting_at_last_arrival, 50u);
  EXPECT_NEAR(over.summary.arrival_span_s, 0.495, 1e-9);
  // 20 req/s: each request is done before the next arrives.
  const Workload slow = MakeWorkload(100, 2, 64, 16, 20, 50'000'000);
  const SimResult under = RunWith(c, slow, "fcfs", "always");
  ExpectConservation(under, slow);
  EXPECT_FALSE(under.summary.overloaded);
  EXPECT_EQ(under.summary.waiting_at_last_arrival, 0u);
  // Everything at t = 0 is a batch job, not an overload.
  const Workload offline = MakeWorkload(100, 2, 64, 16, 20, 0);
  const SimResult batch = RunWith(c, offline, "fcfs", "always");
  ExpectConservation(batch, offline);
  EXPECT_FALSE(batch.summary.overloaded);
}

TEST(SimulatorTest, CountsPrefilledAndAdmittedPromptTokens) {
  const Workload w = MakeWorkload(20, 1, 800, 50, 4, 50'000'000);  // arrivals far apart
  const SimResult r = RunWith(SmallConfig(), w, "fcfs", "always");
  ExpectConservation(r, w);
  EXPECT_EQ(r.summary.admitted_prompt_tokens, 20u * 850u);
  // The first computes its whole prompt, the others the 50 tokens after the cached 800.
  EXPECT_EQ(r.summary.prefill_tokens, 850u + 19u * 50u);
  EXPECT_EQ(r.summary.cached_prompt_tokens, 19u * 800u);
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

// Skips every proposal with an odd id while the batch has requests (or every proposal, with
// `all`), and counts its decisions per round.
class SkippingPolicy final : public StopPolicy {
 public:
  explicit SkippingPolicy(bool all = false) : all_(all) {}
  std::string_view Name() const override { return "skipping"; }
  void BeginRound() override { decisions_this_round = 0; }
  StopDecision Decide(const StopContext&) override {
    ++decisions_this_round;
    max_decisions_per_round = std::max(max_decisions_per_round, decisions_this_round);
    return all_ || (proposed_ % 2 == 1) ? StopDecision::kSkip : StopDecision::kAdd;
  }
  void OnStepExecuted(const StepFeedback&) override {}
  void Propose(RequestId id) { proposed_ = id; }
  uint32_t decisions_this_round = 0;
  uint32_t max_decisions_per_round = 0;

 private:
  bool all_;
  RequestId proposed_ = 0;
};

// Tells the policy which request each proposal is (StopContext does not carry the id).
class TellingSelector final : public CandidateSelector {
 public:
  TellingSelector(std::unique_ptr<CandidateSelector> inner, SkippingPolicy& policy)
      : inner_(std::move(inner)), policy_(policy) {}
  std::string_view Name() const override { return inner_->Name(); }
  void OnArrival(const RequestInfo& r) override { inner_->OnArrival(r); }
  void BeginRound() override { inner_->BeginRound(); }
  std::optional<Candidate> Next() override {
    std::optional<Candidate> c = inner_->Next();
    if (c) policy_.Propose(c->id);
    return c;
  }
  void Admit(RequestId id) override { inner_->Admit(id); }
  bool Skip(RequestId id) override { return inner_->Skip(id); }
  void OnFinish(RequestId id) override { inner_->OnFinish(id); }
  void OnPreempt(RequestId id) override { inner_->OnPreempt(id); }
  void OnCancel(RequestId id) override { inner_->OnCancel(id); }
  size_t NumWaiting() const override { return inner_->NumWaiting(); }
  size_t MemoryBytes() const override { return inner_->MemoryBytes(); }

 private:
  std::unique_ptr<CandidateSelector> inner_;
  SkippingPolicy& policy_;
};

TEST(SimulatorTest, ASkipPassesOverTheProposalWhereTheSelectorCanSkip) {
  // 40 requests of one group, all at t = 0. The CHT parks each odd one and proposes the next:
  // the first round admits the 20 even ones. FCFS cannot skip: the skip ends the round, so the
  // first round admits request 0 alone, and request 1 (always proposed first) waits for an
  // empty batch.
  const Workload w = MakeWorkload(40, 1, 64, 16, 8, 0);
  for (const char* name : {"cht", "fcfs"}) {
    SCOPED_TRACE(name);
    SkippingPolicy policy;
    TellingSelector selector(MakeSelector(name), policy);
    ConstantEngine engine;
    Simulator sim(SmallConfig(), w, selector, policy, engine);
    const SimResult r = sim.Run();
    ExpectConservation(r, w);
    ASSERT_FALSE(r.records.steps.empty());
    const int64_t first = r.records.requests[0].first_token_ns;
    for (RequestId id = 0; id < 40; ++id) {
      const bool with_first = r.records.requests[id].first_token_ns == first;
      if (std::string_view(name) == "cht") {
        EXPECT_EQ(with_first, id % 2 == 0) << id;
      } else {
        EXPECT_EQ(with_first, id == 0) << id;
      }
    }
    EXPECT_EQ(r.records.steps.front().admitted, std::string_view(name) == "cht" ? 20u : 1u);
  }
}

TEST(SimulatorTest, SkipsPerRoundAreCappedAndSkippedRequestsStillWait) {
  // A policy that skips everything: each round admits only into an empty batch, passes over at
  // most kMaxSkipsPerRound proposals, and counts the skipped ones as waiting throughout.
  const uint32_t count = kMaxSkipsPerRound + 40;
  const Workload w = MakeWorkload(count, 2, 64, 16, 4, 0);
  SkippingPolicy policy(/*all=*/true);
  TellingSelector selector(MakeSelector("cht"), policy);
  ConstantEngine engine;
  Simulator sim(SmallConfig(), w, selector, policy, engine);
  const SimResult r = sim.Run();
  ExpectConservation(r, w);
  // The empty batch's decision, then kMaxSkipsPerRound skips the selector took, then the one
  // that ended the round.
  EXPECT_EQ(policy.max_decisions_per_round, kMaxSkipsPerRound + 2);
  EXPECT_EQ(r.records.steps.front().admitted, 1u);
}

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

// results.h5's /steps/common_prefix_tokens is the plan's: the loop completes a step with the plan
// in hand (it was always 0 before).
TEST(SimulatorTest, StepRecordsCarryThePlansCommonPrefix) {
  const Workload w = MakeWorkload(16, 1, 256, 16, 6, 0);  // one group, all at t = 0
  ConstantEngine engine;
  const SimResult r = RunWith(SmallConfig(), w, "fcfs", "always", &engine);
  ExpectConservation(r, w);
  uint32_t recorded_max = 0;
  for (const StepRecord& step : r.records.steps) {
    recorded_max = std::max(recorded_max, step.common_prefix_tokens);
    EXPECT_EQ(step.common_prefix_tokens % SmallConfig().block_tokens, 0u);
  }
  EXPECT_GE(recorded_max, 256u);
  EXPECT_GE(recorded_max, engine.max_common_prefix);
}

// Schedule / Complete / TakeResult, driven by hand, is Run(): the seam a conformance harness or
// another engine steps through gives the same records bit for bit.
TEST(SimulatorTest, SteppingByHandIsRun) {
  const Workload w = MakeWorkload(60, 3, 96, 32, 12, 200'000);
  ServingConfig c = SmallConfig();
  c.kv_cache_blocks = 48;  // preemptions
  for (const char* stop : {"always", "bandit"}) {
    SCOPED_TRACE(stop);
    std::unique_ptr<CandidateSelector> s1 = MakeSelector("cht");
    std::unique_ptr<StopPolicy> p1 = MakeStopPolicy(stop);
    ConstantEngine e1;
    const SimResult run = Simulator(c, w, *s1, *p1, e1).Run();

    std::unique_ptr<CandidateSelector> s2 = MakeSelector("cht");
    std::unique_ptr<StopPolicy> p2 = MakeStopPolicy(stop);
    ConstantEngine e2;
    Simulator stepped(c, w, *s2, *p2, e2);
    size_t steps = 0;
    uint64_t admitted = 0;
    while (const std::optional<SchedulePlan> plan = stepped.Schedule()) {
      ASSERT_GT(plan->batch.num_requests(), 0u);
      admitted += plan->admitted;
      stepped.Complete(*plan, e2.Execute(plan->batch));
      ++steps;
    }
    const SimResult by_hand = stepped.TakeResult();
    ExpectConservation(by_hand, w);
    EXPECT_GT(by_hand.summary.preemptions, 0u);
    ASSERT_EQ(steps, run.records.steps.size());
    EXPECT_EQ(by_hand.summary.steps, run.summary.steps);
    EXPECT_EQ(by_hand.summary.duration_s, run.summary.duration_s);
    uint64_t recorded_admitted = 0;
    for (size_t i = 0; i < steps; ++i) {
      const StepRecord& a = run.records.steps[i];
      const StepRecord& b = by_hand.records.steps[i];
      EXPECT_EQ(a.start_ns, b.start_ns) << i;
      EXPECT_EQ(a.step_ns, b.step_ns) << i;
      EXPECT_EQ(a.batch_size, b.batch_size) << i;
      EXPECT_EQ(a.common_prefix_tokens, b.common_prefix_tokens) << i;
      recorded_admitted += b.admitted;
    }
    EXPECT_EQ(admitted, recorded_admitted);
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_EQ(run.records.requests[i].finish_ns, by_hand.records.requests[i].finish_ns) << i;
    }
  }
}

// The CLI polls SIGINT/SIGTERM in the progress callback: by default it runs after every step,
// so a run whose steps cost seconds of scheduler CPU still stops within one step.
TEST(SimulatorTest, ProgressIsReportedAfterEveryStepByDefault) {
  const Workload w = MakeWorkload(40, 4, 64, 32, 8, 1'000'000);
  std::unique_ptr<CandidateSelector> selector = MakeSelector("fcfs");
  std::unique_ptr<StopPolicy> policy = MakeStopPolicy("always");
  ConstantEngine engine;
  Simulator sim(SmallConfig(), w, *selector, *policy, engine);
  std::vector<uint64_t> seen;
  const SimResult r = sim.Run([&](const SimProgress& p) { seen.push_back(p.steps); });
  ExpectConservation(r, w);
  ASSERT_EQ(seen.size(), r.records.steps.size());
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], i + 1);
}

}  // namespace
}  // namespace feather
