// workload_limits_test.cc: the memory limits (WorkloadLimits, a scenario's `limits:` section).
// Workloads that would exhaust memory (10^9 requests, 10^7-token prompts, 10^10 prompt tokens
// in all, a trace with too many or too long records) are refused before anything is generated,
// with a message that names the limit and how to raise it; raising the limit lets the same
// scenario load; the estimate the check uses is exact for fixed lengths.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/input_error.h"
#include "sim/io/scenario.h"
#include "sim/workload/trace_reader.h"
#include "sim/workload/workload.h"

namespace feather {
namespace {

using ::testing::HasSubstr;

// The rendered problems of a scenario text (empty when it loads).
std::string ProblemsOf(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    (void)LoadScenarioText(text, "t.yaml", ".", overrides);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(WorkloadLimitsTest, DefaultsAreDocumentedAndEchoed) {
  const Scenario s = LoadScenarioText("", "t.yaml", ".");
  EXPECT_EQ(s.workload.limits.max_requests, 10'000'000u);
  EXPECT_EQ(s.workload.limits.max_prompt_tokens, 1'000'000u);
  EXPECT_EQ(s.workload.limits.max_total_tokens, 1'000'000'000u);
  EXPECT_EQ(ScenarioToJson(s)["limits"]["max_requests"], 10'000'000u);
}

TEST(WorkloadLimitsTest, TooManyRequestsNameTheLimitAndHowToRaiseIt) {
  const std::string p = ProblemsOf("workload:\n  requests: 1000000000\n");
  EXPECT_EQ(p,
            "t.yaml:2: workload.requests: 1,000,000,000 requests exceed the limit of 10,000,000 "
            "(limits.max_requests); raise it with `limits: {max_requests: N}` in the scenario or "
            "--set limits.max_requests=N");
  // Raised in the file or on the command line, the count alone is accepted (the total-token
  // limit then applies: 10^9 prompts of 5,100 tokens are refused by it).
  EXPECT_THAT(ProblemsOf("limits: {max_requests: 1000000000}\nworkload:\n  requests: 1000000000\n"),
              HasSubstr("limits.max_total_tokens"));
  EXPECT_EQ(ProblemsOf("workload:\n  requests: 20000000\n  prompt_tokens: 1\n  sharing: {kind: "
                       "none}\n",
                       {"limits.max_requests=20000000"}),
            "");
  // Lowered, it refuses smaller runs.
  EXPECT_THAT(ProblemsOf("workload: {requests: 300}\n", {"limits.max_requests=100"}),
              HasSubstr("300 requests exceed the limit of 100"));
}

TEST(WorkloadLimitsTest, LongPromptsNameThePartThatIsTooLong) {
  EXPECT_THAT(ProblemsOf("workload:\n  prompt_tokens: 10000000\n"),
              HasSubstr("t.yaml:2: workload.prompt_tokens: prompts of up to 10,005,000 tokens "
                        "exceed the limit of 1,000,000 tokens per prompt "
                        "(limits.max_prompt_tokens); raise it with `limits: {max_prompt_tokens: "
                        "N}` in the scenario or --set limits.max_prompt_tokens=N"));
  EXPECT_THAT(ProblemsOf("workload:\n  sharing: {prefix_tokens: 999990}\n  prompt_tokens: "
                         "{kind: uniform, min: 1, max: 20}\n"),
              HasSubstr("t.yaml:2: workload.sharing.prefix_tokens: prompts of up to 1,000,010"));
  EXPECT_THAT(ProblemsOf("workload:\n  sharing: {kind: radix, levels: 4, level_tokens: 300000}\n"),
              HasSubstr("workload.sharing.level_tokens: prompts of up to 1,200,100"));
  // Raised, a 2M-token prompt loads (1,000 of them stay under the total).
  EXPECT_EQ(ProblemsOf("limits: {max_prompt_tokens: 3000000, max_total_tokens: 3000000000}\n"
                       "workload:\n  prompt_tokens: 2000000\n"),
            "");
}

TEST(WorkloadLimitsTest, TotalTokensAreEstimatedFromTheSpec) {
  // 5M requests x 500 tokens = 2.5e9 tokens: over 1e9.
  EXPECT_THAT(ProblemsOf("workload:\n  requests: 5000000\n  sharing: {kind: none}\n"
                         "  prompt_tokens: 500\n"),
              HasSubstr("t.yaml:2: workload.requests: 5,000,000 requests of about 500 prompt "
                        "tokens hold about 2,500,000,000 tokens (10,000 MB of token ids), over "
                        "the limit of 1,000,000,000 tokens (limits.max_total_tokens)"));
  EXPECT_EQ(ProblemsOf("workload:\n  requests: 5000000\n  sharing: {kind: none}\n"
                       "  prompt_tokens: 500\n",
                       {"limits.max_total_tokens=3000000000"}),
            "");
  // The ceilings of the representation cannot be raised past.
  EXPECT_THAT(ProblemsOf("", {"limits.max_requests=99999999999"}),
              HasSubstr("--set: limits.max_requests: value 99999999999 out of range"));
}

TEST(WorkloadLimitsTest, EstimateIsExactForFixedLengths) {
  WorkloadSpec spec;
  spec.requests = 1000;
  spec.sharing.kind = SharingKind::kGroups;
  spec.sharing.prefix_tokens = 5000;
  spec.prompt_tokens.kind = LengthKind::kFixed;
  spec.prompt_tokens.value = 100;
  const WorkloadSize size = EstimateWorkloadSize(spec);
  EXPECT_EQ(size.max_prompt_tokens, 5100u);
  EXPECT_DOUBLE_EQ(size.expected_total_tokens, 5.1e6);
  spec.requests = 20;
  const Workload w = GenerateWorkload(spec, 1);
  EXPECT_EQ(CopyEachPrompt(w.prompts).tokens.size(), 20u * 5100u);
  spec.prompt_tokens = LengthSpec{LengthKind::kUniform, 0, 10, 30, 0, 0};
  spec.sharing.kind = SharingKind::kRadix;
  spec.sharing.levels = 3;
  spec.sharing.level_tokens = 7;
  EXPECT_EQ(EstimateWorkloadSize(spec).max_prompt_tokens, 51u);
  EXPECT_DOUBLE_EQ(EstimateWorkloadSize(spec).expected_total_tokens, 20 * 41.0);
}

TEST(WorkloadLimitsTest, GeneratorRefusesWhatValidationWouldRefuse) {
  WorkloadSpec spec;
  spec.requests = 50;
  spec.limits.max_requests = 10;
  EXPECT_THROW((void)GenerateWorkload(spec, 1), std::invalid_argument);
  spec.limits = WorkloadLimits{};
  spec.limits.max_prompt_tokens = 1000;  // default prompts are 5,000 + 100 tokens
  EXPECT_THROW((void)GenerateWorkload(spec, 1), std::invalid_argument);
  spec.limits = WorkloadLimits{};
  spec.limits.max_total_tokens = 1000;
  EXPECT_THROW((void)GenerateWorkload(spec, 1), std::invalid_argument);
}

std::string TraceProblems(const std::string& text, const TraceReadOptions& options) {
  std::istringstream in(text);
  try {
    (void)ParseMooncakeTrace(in, "t.jsonl", options);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(WorkloadLimitsTest, TraceLimitsAreCheckedWhileReading) {
  const std::string record =
      R"({"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2]})";
  const std::string three = record + "\n" + record + "\n" + record + "\n";
  TraceReadOptions options;
  EXPECT_EQ(TraceProblems(three, options), "");
  options.max_records = 2;
  EXPECT_THAT(TraceProblems(three, options),
              HasSubstr("t.jsonl:3: the trace has more than 2 records, over the limit of 2 "
                        "requests (limits.max_requests); raise it with"));
  options = TraceReadOptions{};
  options.max_input_tokens = 599;
  EXPECT_THAT(TraceProblems(record + "\n", options),
              HasSubstr("t.jsonl:1: input_length: 600 tokens exceed the limit of 599 tokens per "
                        "prompt (limits.max_prompt_tokens); raise it with"));
  options = TraceReadOptions{};
  options.max_total_tokens = 1000;
  EXPECT_EQ(TraceProblems(three, options),
            "t.jsonl:2: input_length: the prompts up to this record hold 1200 tokens, over the "
            "limit of 1000 (limits.max_total_tokens); raise it with `limits: {max_total_tokens: "
            "N}` in the scenario or --set limits.max_total_tokens=N, or replay fewer records "
            "with workload.trace.limit");
}

}  // namespace
}  // namespace feather
