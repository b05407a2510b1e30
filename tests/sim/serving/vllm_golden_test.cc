// vllm_golden_test.cc: feather's serving loop against vLLM's own Scheduler, without vLLM.
//
// tests/golden/vllm/NAME.jsonl holds what vLLM 0.32's real Scheduler and KVCacheManager did,
// step by step, when python/feather/vllm/conformance.py replayed NAME.yaml through them in
// lockstep with feather (scripts/vllm-conformance.sh --write-golden regenerates them). This test
// runs feather's simulator on the same scenario and checks every step against the recording:
// which requests run and in what order, each one's context (so its prefix-cache hit) and new
// tokens, the preemptions, the batch-wide common prefix blocks, and the requests that finish.
// The file format is described beside golden_lines() in conformance.py: a header line, then one
// line per step listing only what a reader cannot infer from the step before (a request that
// runs one more decode token is implicit).
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sim/io/scenario_run.h"
#include "sim/serving/simulator.h"
#include "sim/workload/workload.h"

namespace feather {
namespace {

using nlohmann::json;

const std::string kGoldenDir = std::string(FEATHER_SOURCE_DIR) + "/tests/golden/vllm/";

struct Scheduled {
  int64_t id = 0;
  int64_t context = 0;
  int64_t new_tokens = 0;
  bool operator==(const Scheduled&) const = default;
};

struct GoldenStep {
  std::vector<Scheduled> scheduled;  // in the scheduler's order
  std::vector<int64_t> preempted;    // sorted
  std::vector<int64_t> finished;     // sorted
  int64_t common_prefix_blocks = 0;
};

std::string Describe(const GoldenStep& s) {
  std::ostringstream out;
  out << "scheduled [";
  for (const Scheduled& r : s.scheduled) out << "(" << r.id << " " << r.context << " " << r.new_tokens << ")";
  out << "] preempted [";
  for (const int64_t id : s.preempted) out << id << " ";
  out << "] finished [";
  for (const int64_t id : s.finished) out << id << " ";
  out << "] cpb " << s.common_prefix_blocks;
  return out.str();
}

// The reader of the golden format (the inverse of conformance.py's golden_lines).
struct Golden {
  json header;
  std::vector<GoldenStep> steps;
};

Golden ReadGolden(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  Golden golden;
  std::string line;
  std::getline(in, line);
  golden.header = json::parse(line);
  std::map<int64_t, std::pair<int64_t, int64_t>> previous;  // id -> (context, new)
  std::vector<int64_t> order;
  while (std::getline(in, line)) {
    const json entry = json::parse(line);
    const auto ids = [&](const char* key) {
      std::vector<int64_t> v = entry.value(key, std::vector<int64_t>{});
      std::sort(v.begin(), v.end());
      return v;
    };
    const std::vector<int64_t> gone = ids("gone");
    std::map<int64_t, std::pair<int64_t, int64_t>> changed;
    for (const json& r : entry.value("chg", json::array())) changed[r[0]] = {r[1], r[2]};
    std::map<int64_t, std::pair<int64_t, int64_t>> current;
    std::vector<int64_t> next_order;
    for (const int64_t id : order) {
      if (std::binary_search(gone.begin(), gone.end(), id)) continue;
      const auto c = changed.find(id);
      const auto& p = previous.at(id);
      current[id] = c != changed.end() ? c->second : std::make_pair(p.first + p.second, int64_t{1});
      next_order.push_back(id);
    }
    for (const json& r : entry.value("new", json::array())) {
      current[r[0]] = {r[1], r[2]};
      next_order.push_back(r[0]);
    }
    GoldenStep step;
    for (const int64_t id : next_order) step.scheduled.push_back({id, current[id].first, current[id].second});
    step.preempted = ids("pre");
    step.finished = ids("fin");
    step.common_prefix_blocks = entry.value("cpb", int64_t{0});
    golden.steps.push_back(std::move(step));
    previous = std::move(current);
    order = std::move(next_order);
  }
  return golden;
}

// A scenario's serving loop, stepped as feather.Simulation steps it (python/src/).
class GoldenSteps {
 public:
  GoldenSteps(const std::string& path, const std::vector<std::string>& overrides)
      : run_(path, overrides) {}

  // The next step, completed on the scenario's engine, in the golden's terms; nullopt at the end.
  std::optional<GoldenStep> Next() {
    const std::optional<SchedulePlan> plan = run_.simulator().Schedule();
    if (!plan) return std::nullopt;
    GoldenStep step;
    const uint32_t block = run_.prepared().serving.block_tokens;
    const Workload& workload = run_.workload();
    for (const StepRequest& r : plan->batch.requests) {
      step.scheduled.push_back({r.id, r.context_tokens, r.new_tokens});
      // The step that computes a request's last sequence token samples its last output token.
      const uint64_t end = workload.prompts.Prompt(r.id).size() + workload.output_tokens[r.id];
      if (uint64_t{r.context_tokens} + r.new_tokens + 1 == end) step.finished.push_back(r.id);
    }
    step.preempted.assign(plan->preempted.begin(), plan->preempted.end());
    std::sort(step.preempted.begin(), step.preempted.end());
    std::sort(step.finished.begin(), step.finished.end());
    step.common_prefix_blocks = plan->batch.common_prefix_tokens / block;
    run_.simulator().Complete(*plan, run_.engine().Execute(plan->batch));
    return step;
  }

 private:
  SteppedRun run_;
};

// Steps compare as conformance.py's Step.key() does, plus the finished requests: the scheduled
// set (vLLM lists running requests before newly admitted ones within a step, as feather does,
// but the order of a step's admissions is the only order the key would need) and the rest.
bool Same(GoldenStep a, GoldenStep b) {
  const auto by_id = [](const Scheduled& x, const Scheduled& y) { return x.id < y.id; };
  std::sort(a.scheduled.begin(), a.scheduled.end(), by_id);
  std::sort(b.scheduled.begin(), b.scheduled.end(), by_id);
  return a.scheduled == b.scheduled && a.preempted == b.preempted && a.finished == b.finished &&
         a.common_prefix_blocks == b.common_prefix_blocks;
}

class VllmGolden : public testing::TestWithParam<const char*> {};

TEST_P(VllmGolden, FeatherFormsEveryStepVllmRecorded) {
  const std::string name = GetParam();
  const Golden golden = ReadGolden(kGoldenDir + name + ".jsonl");
  ASSERT_FALSE(golden.steps.empty());
  ASSERT_EQ(golden.header.at("steps").get<size_t>(), golden.steps.size());
  GoldenSteps run(kGoldenDir + name + ".yaml",
                  golden.header.value("overrides", std::vector<std::string>{}));
  size_t index = 0;
  for (; index < golden.steps.size(); ++index) {
    const std::optional<GoldenStep> ours = run.Next();
    ASSERT_TRUE(ours.has_value()) << name << ": feather ended after " << index
                                  << " steps, vLLM ran " << golden.steps.size();
    ASSERT_TRUE(Same(*ours, golden.steps[index]))
        << name << " step " << index << "\n  feather " << Describe(*ours) << "\n  vLLM    "
        << Describe(golden.steps[index]);
  }
  EXPECT_FALSE(run.Next().has_value()) << name << ": feather runs past vLLM's last step";
  // Enough steps to mean something, and the interesting events actually occur.
  EXPECT_GE(index, 1500u);
}

INSTANTIATE_TEST_SUITE_P(AllWorkloads, VllmGolden,
                         testing::Values("prefix-groups", "no-sharing", "single-prefix",
                                         "no-chunking", "preemption", "long-prompts", "trace"),
                         [](const testing::TestParamInfo<const char*>& param) {
                           std::string n = param.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// The workloads exercise what they are named for: preemptions in "preemption", prefix-cache hits
// of resumed requests, and a batch-wide common prefix where groups share one.
TEST(VllmGoldenCoverage, TheRecordingsHoldTheEventsTheyAreFor) {
  const Golden preemption = ReadGolden(kGoldenDir + "preemption.jsonl");
  size_t preempted = 0;
  for (const GoldenStep& s : preemption.steps) preempted += s.preempted.size();
  EXPECT_GE(preempted, 50u);
  const Golden single = ReadGolden(kGoldenDir + "single-prefix.jsonl");
  size_t with_common_prefix = 0;
  for (const GoldenStep& s : single.steps) with_common_prefix += s.common_prefix_blocks > 0;
  EXPECT_GE(with_common_prefix, single.steps.size() / 4);
}

// A recording changed in one field is caught: the reader and the comparison are not vacuous.
TEST(VllmGoldenCoverage, AChangedStepIsCaught) {
  Golden golden = ReadGolden(kGoldenDir + "no-chunking.jsonl");
  GoldenSteps run(kGoldenDir + "no-chunking.yaml", {});
  for (size_t i = 0; i < 20; ++i) {
    const std::optional<GoldenStep> ours = run.Next();
    ASSERT_TRUE(ours.has_value());
    ASSERT_TRUE(Same(*ours, golden.steps[i]));
    GoldenStep changed = golden.steps[i];
    changed.scheduled.back().context += 16;
    EXPECT_FALSE(Same(*ours, changed));
    changed = golden.steps[i];
    changed.finished.push_back(1 << 30);
    EXPECT_FALSE(Same(*ours, changed));
  }
}

}  // namespace
}  // namespace feather
