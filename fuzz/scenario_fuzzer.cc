// scenario_fuzzer.cc: libFuzzer target for the scenario loader (sim/io/scenario.h).
//
// Input: the scenario YAML, optionally followed by '\0'-separated `--set key=value` overrides.
// Contract checked: loading either succeeds or throws InputError (never another exception, a
// crash or UB); every problem names a file; a scenario that loads echoes to JSON, and a small
// synthetic workload it describes generates without std::invalid_argument (validation and
// generation agree) and with well-formed arrivals, lengths and prompt offsets.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/check.h"
#include "base/input_error.h"
#include "sim/io/scenario.h"
#include "sim/workload/workload.h"

namespace {

constexpr uint64_t kMaxGeneratedTokens = 200'000;  // keep each execution fast

// The workload's largest possible prompt: shared part + the length spec's upper bound.
uint64_t MaxPromptTokens(const feather::WorkloadSpec& w) {
  const feather::LengthSpec& l = w.prompt_tokens;
  const uint64_t unique = l.kind == feather::LengthKind::kFixed ? l.value : l.max;
  const feather::SharingSpec& s = w.sharing;
  switch (s.kind) {
    case feather::SharingKind::kGroups:
    case feather::SharingKind::kTwoPrefixes:
      return s.prefix_tokens + unique;
    case feather::SharingKind::kRadix:
      return uint64_t{s.levels} * s.level_tokens + unique;
    default:
      return unique;
  }
}

void CheckWorkload(const feather::Scenario& scenario) {
  const feather::WorkloadSpec& w = scenario.workload;
  if (w.use_trace || w.requests > 200) return;
  if (w.requests * MaxPromptTokens(w) > kMaxGeneratedTokens) return;
  // A validated scenario must generate: std::invalid_argument here is a validation gap.
  const feather::Workload workload = feather::GenerateWorkload(w, scenario.seed);
  FEATHER_CHECK(workload.size() == w.requests, "request count");
  FEATHER_CHECK(workload.prompts.size() == w.requests, "prompt count");
  uint64_t total = 0;
  for (size_t i = 0; i < workload.size(); ++i) {
    FEATHER_CHECK(workload.arrival_ns[i] >= 0, "negative arrival");
    if (i > 0) FEATHER_CHECK(workload.arrival_ns[i] >= workload.arrival_ns[i - 1], "arrivals");
    FEATHER_CHECK(workload.output_tokens[i] >= 1, "output tokens");
    total += workload.prompts.Prompt(i).size();
  }
  FEATHER_CHECK(total == workload.prompts.TotalTokens(), "prompt total");
  FEATHER_CHECK(workload.prompts.StoredTokens() <= total + MaxPromptTokens(w), "stored tokens");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t yaml_end = input.find('\0');
  const std::string_view yaml = input.substr(0, yaml_end);
  std::vector<std::string> overrides;
  if (yaml_end != std::string_view::npos) {
    std::string_view rest = input.substr(yaml_end + 1);
    while (!rest.empty() && overrides.size() < 8) {
      const size_t end = rest.find('\0');
      overrides.emplace_back(rest.substr(0, end));
      if (end == std::string_view::npos) break;
      rest.remove_prefix(end + 1);
    }
  }
  try {
    const feather::Scenario scenario =
        feather::LoadScenarioText(yaml, "fuzz.yaml", "/nonexistent-feather-fuzz", overrides);
    (void)feather::ScenarioToJson(scenario).dump();
    CheckWorkload(scenario);
  } catch (const feather::InputError& error) {
    FEATHER_CHECK(!error.problems().empty(), "an InputError without problems");
    for (const feather::InputProblem& p : error.problems()) {
      FEATHER_CHECK(!p.file.empty(), "a problem without a file");
      FEATHER_CHECK(!p.message.empty(), "a problem without a message");
    }
  }
  return 0;
}
