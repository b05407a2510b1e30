// engine_cost_test.cc: `scheduler_time: engine`: the cost line's arithmetic, which operation
// prices which selector, when SGLang's ranking is charged, what the radix selectors report as
// a round's work, and the simulator's charges against quantities counted independently
// (Σ charged = coefficient × Σ admitted requests or prompt blocks), and determinism.
#include "sim/serving/engine_cost.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "policies/lpm_selector.h"
#include "policies/selector_factory.h"
#include "policies/stop_policy_factory.h"
#include "sim/serving/simulator.h"
#include "sim/workload/synthetic_prompts.h"

namespace feather {
namespace {

TEST(EngineCost, RoundNsIsTheLinearFormRounded) {
  EngineCost cost;
  cost.operation = EngineOperation::kVllmSchedule;
  cost.terms = {.constant_ns = 1000.4,
                .per_running_ns = 10,
                .per_admitted_ns = 100,
                .per_admitted_block_ns = 2,
                .per_waiting_ns = 3,
                .per_waiting_token_ns = 0.5,
                .per_tree_node_ns = 7};
  const EngineRound round{.running = 4,
                          .admitted = 2,
                          .admitted_blocks = 50,
                          .waiting = 6,
                          .waiting_tokens = 1001,
                          .tree_nodes = 9,
                          .ranked = false};
  // 1000.4 + 40 + 200 + 100 + 18 + 500.5 + 63 = 1921.9
  EXPECT_EQ(EngineRoundNs(cost, round), 1922);
  EXPECT_EQ(EngineRoundNs(cost, EngineRound{}), 1000);  // vLLM's schedule() runs every round
}

TEST(EngineCost, SglangChargesOnlyRoundsThatRankAWaitingQueue) {
  EngineCost cost;
  cost.operation = EngineOperation::kSglangLpm;
  cost.terms.constant_ns = 500;
  cost.terms.per_waiting_ns = 10;
  EXPECT_EQ(EngineRoundNs(cost, EngineRound{.waiting = 3, .ranked = true}), 530);
  EXPECT_EQ(EngineRoundNs(cost, EngineRound{.waiting = 3, .ranked = false}), 0);
  EXPECT_EQ(EngineRoundNs(cost, EngineRound{.waiting = 0, .ranked = true}), 0);
  cost.operation = EngineOperation::kSglangDfsWeight;
  EXPECT_EQ(EngineRoundNs(cost, EngineRound{.waiting = 1, .ranked = true}), 510);
}

TEST(EngineCost, OperationPerSelector) {
  EXPECT_EQ(EngineOperationFor("lpm"), EngineOperation::kSglangLpm);
  EXPECT_EQ(EngineOperationFor("dfs-weight"), EngineOperation::kSglangDfsWeight);
  for (const char* vllm : {"fcfs", "cht", "block-table", "oracle"}) {
    EXPECT_EQ(EngineOperationFor(vllm), EngineOperation::kVllmSchedule) << vllm;
  }
  EngineCostTable table;
  table.vllm_schedule.constant_ns = 1;
  table.sglang_lpm.constant_ns = 2;
  table.sglang_dfs_weight.constant_ns = 3;
  EXPECT_EQ(table.For(EngineOperation::kSglangLpm).terms.constant_ns, 2);
  EXPECT_EQ(table.For(EngineOperation::kSglangDfsWeight).terms.constant_ns, 3);
  EXPECT_EQ(table.For(EngineOperation::kVllmSchedule).terms.constant_ns, 1);
  EXPECT_EQ(EngineOperationName(EngineOperation::kSglangDfsWeight), "sglang_dfs_weight");
}

TEST(EngineCost, RadixSelectorsReportTheirRoundsWork) {
  const std::vector<Token> a(10, 1), b(20, 2), c(30, 3);
  LpmSelector lpm;
  EXPECT_EQ(lpm.LastRoundWork().waiting_tokens, 0u);
  lpm.OnArrival({0, PromptView(a), kNoPrefixGroup});
  lpm.OnArrival({1, PromptView(b), kNoPrefixGroup});
  lpm.OnArrival({2, PromptView(c), kNoPrefixGroup});
  lpm.BeginRound();
  EXPECT_EQ(lpm.LastRoundWork().waiting_tokens, 60u);
  EXPECT_EQ(lpm.LastRoundWork().tree_nodes, lpm.cache().NodeCount());
  const size_t empty_tree = lpm.LastRoundWork().tree_nodes;
  const std::optional<Candidate> first = lpm.Next();
  ASSERT_TRUE(first);
  lpm.Admit(first->id);
  lpm.BeginRound();
  EXPECT_EQ(lpm.LastRoundWork().waiting_tokens, 60u - (first->id + 1) * 10);
  EXPECT_GT(lpm.LastRoundWork().tree_nodes, empty_tree);  // the admitted prompt is cached
  // Selectors without a tree report nothing.
  std::unique_ptr<CandidateSelector> fcfs = MakeSelector("fcfs");
  fcfs->OnArrival({0, PromptView(a), kNoPrefixGroup});
  fcfs->BeginRound();
  EXPECT_EQ(fcfs->LastRoundWork().waiting_tokens, 0u);
}

// Step time = 1 ms + 10 us per request.
class FlatEngine final : public Engine {
 public:
  std::string_view Name() const override { return "flat"; }
  StepTiming Execute(const BatchPlan& plan) override {
    StepTiming t;
    t.term_ns[static_cast<size_t>(StepTerm::kOverhead)] =
        1'000'000 + 10'000 * static_cast<int64_t>(plan.num_requests());
    t.total_ns = t.term(StepTerm::kOverhead);
    return t;
  }
};

Workload GroupedWorkload(uint32_t count, uint32_t prefix, uint32_t suffix) {
  Workload w;
  w.prompts = StoreEachPrompt(MakeGroupedPrompts(count, 4, prefix, suffix, 11));
  for (uint32_t i = 0; i < count; ++i) {
    w.arrival_ns.push_back(200'000 * static_cast<int64_t>(i));
    w.output_tokens.push_back(5 + i % 7);
  }
  return w;
}

SimResult RunEngineMode(const Workload& w, std::string_view selector_name, EngineCost cost,
                        uint32_t max_num_seqs = 32) {
  ServingConfig c;
  c.kv_cache_blocks = 1 << 16;  // no preemption: every admission is a first admission
  c.max_num_seqs = max_num_seqs;
  c.scheduler_time = SchedulerTimeMode::kEngine;
  c.engine_cost = cost;
  std::unique_ptr<CandidateSelector> selector = MakeSelector(selector_name);
  std::unique_ptr<StopPolicy> policy = MakeStopPolicy("always");
  FlatEngine engine;
  Simulator sim(c, w, *selector, *policy, engine);
  return sim.Run();
}

int64_t ChargedNs(const SimResult& r) {
  int64_t sum = 0;
  for (const StepRecord& s : r.records.steps) sum += s.scheduler_ns;
  return sum;
}

TEST(EngineCost, SimulatorChargesVllmPerRoundAdmissionAndBlock) {
  const Workload w = GroupedWorkload(120, 100, 37);
  EngineCost cost;
  cost.terms.constant_ns = 1000;
  SimResult r = RunEngineMode(w, "fcfs", cost);
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(ChargedNs(r), 1000 * static_cast<int64_t>(r.records.steps.size()));

  cost.terms = {};
  cost.terms.per_admitted_ns = 700;
  r = RunEngineMode(w, "cht", cost);
  uint64_t admitted = 0;
  for (const StepRecord& s : r.records.steps) admitted += s.admitted;
  EXPECT_EQ(admitted, w.size());
  EXPECT_EQ(ChargedNs(r), 700 * static_cast<int64_t>(admitted));

  cost.terms = {};
  cost.terms.per_admitted_block_ns = 3;
  r = RunEngineMode(w, "fcfs", cost);
  int64_t blocks = 0;  // full 16-token blocks of each prompt, each admitted once
  for (size_t i = 0; i < w.size(); ++i) blocks += w.prompts.Prompt(i).size() / 16;
  EXPECT_EQ(ChargedNs(r), 3 * blocks);
}

TEST(EngineCost, SimulatorChargesSglangOnlyWhenTheBatchHasRoom) {
  // All requests at t = 0 and a batch of 8: rounds with a full batch rank nothing.
  Workload w = GroupedWorkload(64, 200, 20);
  std::fill(w.arrival_ns.begin(), w.arrival_ns.end(), 0);
  EngineCost cost;
  cost.operation = EngineOperation::kSglangLpm;
  cost.terms.constant_ns = 1000;
  const SimResult r = RunEngineMode(w, "lpm", cost, /*max_num_seqs=*/8);
  size_t charged = 0, free = 0;
  for (const StepRecord& s : r.records.steps) {
    EXPECT_TRUE(s.scheduler_ns == 0 || s.scheduler_ns == 1000) << s.scheduler_ns;
    (s.scheduler_ns > 0 ? charged : free) += 1;
  }
  EXPECT_GT(charged, 0u);
  EXPECT_GT(free, 0u);  // decode steps of a full batch
  // Every charged round admitted someone or had requests waiting; the last rounds, with
  // nothing waiting, are free.
  EXPECT_EQ(r.records.steps.back().scheduler_ns, 0);
}

TEST(EngineCost, SimulatorIsDeterministicInEngineMode) {
  const Workload w = GroupedWorkload(150, 300, 40);
  EngineCost cost;
  cost.operation = EngineOperation::kSglangDfsWeight;
  cost.terms = {.constant_ns = 1e5,
                .per_waiting_ns = 1.7e4,
                .per_waiting_token_ns = 3.1,
                .per_tree_node_ns = 1500};
  const SimResult a = RunEngineMode(w, "dfs-weight", cost);
  const SimResult b = RunEngineMode(w, "dfs-weight", cost);
  ASSERT_EQ(a.records.steps.size(), b.records.steps.size());
  for (size_t k = 0; k < a.records.steps.size(); ++k) {
    EXPECT_EQ(a.records.steps[k].scheduler_ns, b.records.steps[k].scheduler_ns) << k;
  }
  EXPECT_EQ(a.summary.duration_s, b.summary.duration_s);
  EXPECT_GT(ChargedNs(a), 0);
}

}  // namespace
}  // namespace feather
