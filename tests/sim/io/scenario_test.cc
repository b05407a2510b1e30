// scenario_test.cc: scenario loading: defaults, the built-in and shipped scenario files, --set
// overrides, and one test per kind of bad input (each problem names file, line and key; all
// problems of a file are reported together).
#include "sim/io/scenario.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sim/io/embedded_files.h"
#include "base/input_error.h"
#include "tests/sim/io/input_error_test_support.h"

namespace feather {
namespace {

std::vector<InputProblem> ProblemsOf(const std::string& text,
                                     const std::vector<std::string>& overrides = {}) {
  try {
    (void)LoadScenarioText(text, "test.yaml", ".", overrides);
  } catch (const InputError& e) {
    return e.problems();
  }
  return {};
}

TEST(ScenarioTest, EmptyFileGivesDefaults) {
  const Scenario s = LoadScenarioText("", "empty.yaml", ".");
  EXPECT_EQ(s.selector, "cht");
  EXPECT_EQ(s.stop, "converge");
  EXPECT_EQ(s.serving.max_num_batched_tokens, 32768u);
  EXPECT_EQ(s.serving.max_num_seqs, 500u);
  EXPECT_EQ(s.engine, "model");
  // vLLM's own default since PR 36318: cascade attention is opt-in.
  EXPECT_FALSE(s.serving.cascade_attention);
}

TEST(ScenarioTest, BuiltInDefaultIsThePapersDefault) {
  const auto text = FindEmbeddedFile("scenarios/default.yaml");
  ASSERT_TRUE(text.has_value());
  const Scenario s = LoadScenarioText(*text, "default.yaml", ".");
  EXPECT_EQ(s.workload.requests, 20000u);
  EXPECT_EQ(s.workload.sharing.kind, SharingKind::kGroups);
  EXPECT_EQ(s.workload.sharing.groups, 5u);
  EXPECT_EQ(s.workload.sharing.prefix_tokens, 5000u);
  EXPECT_DOUBLE_EQ(s.workload.arrival.rate_per_s, 100.0);
  EXPECT_EQ(s.workload.output_tokens.value, 200u);
  EXPECT_EQ(s.model, "llama-3-8b");
  EXPECT_EQ(s.profile, "rtx6000-ada");
  EXPECT_TRUE(s.serving.cascade_attention);  // the paper's vLLM ran it
}

TEST(ScenarioTest, EveryShippedScenarioLoads) {
  const std::filesystem::path dir = std::filesystem::path(FEATHER_SOURCE_DIR) / "scenarios";
  int loaded = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    if (entry.path().parent_path().filename() == "models") continue;  // model descriptions
    // Sweep files are not scenarios; tests/cli/sweep_test.cc validates each of them.
    if (entry.path().string().find("/sweeps/") != std::string::npos) continue;
    // Suites are sweep files beside their base scenario (base.yaml, a scenario).
    if (entry.path().string().find("/suites/") != std::string::npos &&
        entry.path().stem() != "base") {
      continue;
    }
    SCOPED_TRACE(entry.path().string());
    if (entry.path().string().find("trace") != std::string::npos &&
        !std::filesystem::exists(std::filesystem::path(FEATHER_SOURCE_DIR) /
                                 "../shared/traces/conversation_trace.jsonl")) {
      continue;  // the trace lives outside the repository
    }
    Scenario s;
    EXPECT_NO_THROW(s = LoadScenarioFile(entry.path().string()));
    // Every shipped scenario reproduces a paper setting, so it turns cascade on explicitly
    // (the built-in default follows current vLLM: off).
    EXPECT_TRUE(s.serving.cascade_attention);
    ++loaded;
  }
  EXPECT_GE(loaded, 10);
}

TEST(ScenarioTest, SetOverridesKeysOfEveryType) {
  const std::vector<std::string> sets = {
      "seed=42", "workload.requests=123", "scheduler.selector=lpm", "scheduler.stop=heuristic",
      "scheduler_time=zero", "serving.prefix_caching=false", "workload.arrival.rate=7.5",
      "workload.output_tokens={kind: uniform, min: 3, max: 9}"};
  const Scenario s = LoadScenarioText("workload: {requests: 5}\n", "t.yaml", ".", sets);
  EXPECT_EQ(s.seed, 42u);
  EXPECT_EQ(s.stop_options.seed, 42u);
  EXPECT_EQ(s.workload.requests, 123u);
  EXPECT_EQ(s.selector, "lpm");
  EXPECT_EQ(s.stop, "heuristic");
  EXPECT_EQ(s.serving.scheduler_time, SchedulerTimeMode::kZero);
  EXPECT_FALSE(s.serving.prefix_caching);
  EXPECT_DOUBLE_EQ(s.workload.arrival.rate_per_s, 7.5);
  EXPECT_EQ(s.workload.output_tokens.kind, LengthKind::kUniform);
  EXPECT_EQ(s.workload.output_tokens.max, 9u);
}

TEST(ScenarioTest, UnknownKeyNamesFileLineAndKey) {
  const auto problems = ProblemsOf("seed: 1\nworkload:\n  requets: 10\n");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].file, "test.yaml");
  EXPECT_EQ(problems[0].line, 3u);
  EXPECT_EQ(problems[0].key, "workload.requets");
  EXPECT_NE(problems[0].message.find("unknown key"), std::string::npos);
  EXPECT_NE(problems[0].message.find("requests"), std::string::npos);  // lists the known keys
}

TEST(ScenarioTest, WrongTypeAndRangeAreReported) {
  EXPECT_EQ(ProblemsOf("seed: abc\n")[0].key, "seed");
  EXPECT_EQ(ProblemsOf("workload: {requests: 0}\n")[0].key, "workload.requests");
  EXPECT_EQ(ProblemsOf("workload: {requests: -5}\n")[0].key, "workload.requests");
  EXPECT_EQ(ProblemsOf("workload: {arrival: {rate: 0}}\n")[0].key, "workload.arrival.rate");
  EXPECT_EQ(ProblemsOf("workload: {arrival: {rate: -1}}\n")[0].key, "workload.arrival.rate");
  EXPECT_EQ(ProblemsOf("serving: {prefix_caching: maybe}\n")[0].key, "serving.prefix_caching");
  // Booleans are YAML 1.2's true and false only, as in profiles and model descriptions.
  EXPECT_EQ(ProblemsOf("serving: {prefix_caching: yes}\n")[0].key, "serving.prefix_caching");
  EXPECT_EQ(ProblemsOf("workload: [1, 2]\n")[0].key, "workload");
  EXPECT_EQ(ProblemsOf("workload: {sharing: {shared_fraction: 1.5}}\n")[0].key,
            "workload.sharing.shared_fraction");
  EXPECT_EQ(ProblemsOf("workload: {output_tokens: {kind: uniform, min: 9, max: 3}}\n")[0].key,
            "workload.output_tokens.min");
}

TEST(ScenarioTest, UnknownNamesListTheValidOnes) {
  const auto selector = ProblemsOf("scheduler:\n  selector: lru\n");
  ASSERT_EQ(selector.size(), 1u);
  EXPECT_EQ(selector[0].line, 2u);
  EXPECT_EQ(selector[0].key, "scheduler.selector");
  EXPECT_NE(selector[0].message.find("fcfs"), std::string::npos);
  const auto stop = ProblemsOf("scheduler: {stop: greedy}\n");
  EXPECT_NE(stop[0].message.find("bandit"), std::string::npos);
  const auto model = ProblemsOf("model: gpt-9\n");
  EXPECT_EQ(model[0].key, "model");
  EXPECT_NE(model[0].message.find("llama-3-8b"), std::string::npos);
  EXPECT_EQ(ProblemsOf("engine: tpu\n")[0].key, "engine");
  EXPECT_EQ(ProblemsOf("scheduler_time: sometimes\n")[0].key, "scheduler_time");
}

TEST(ScenarioTest, ServingEngineIsReadCheckedAndEchoedOnlyUnderSglang) {
  const Scenario vllm = LoadScenarioText("seed: 1\n", "t.yaml", ".");
  EXPECT_EQ(vllm.serving.engine, ServingEngine::kVllm);
  // vLLM runs keep their echo (and so their summary.json) as before the key existed.
  EXPECT_FALSE(ScenarioToJson(vllm)["serving"].contains("engine"));
  const std::vector<std::string> chunk = {"serving.chunked_prefill_size=2048"};
  const Scenario sglang = LoadScenarioText(
      "serving: {engine: sglang, max_prefill_tokens: 8000}\n", "t.yaml", ".", chunk);
  EXPECT_EQ(sglang.serving.engine, ServingEngine::kSglang);
  EXPECT_EQ(sglang.serving.sglang.max_prefill_tokens, 8000u);
  EXPECT_EQ(sglang.serving.sglang.chunked_prefill_size, 2048);
  const auto json = ScenarioToJson(sglang);
  EXPECT_EQ(json["serving"]["engine"], "sglang");
  EXPECT_EQ(json["serving"]["chunked_prefill_size"], 2048);
  const std::vector<std::string> set = {"serving.engine=sglang"};
  EXPECT_EQ(LoadScenarioText("seed: 1\n", "t.yaml", ".", set).serving.engine,
            ServingEngine::kSglang);

  const auto bad = ProblemsOf("seed: 1\nserving:\n  engine: tgi\n");
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].file, "test.yaml");
  EXPECT_EQ(bad[0].line, 3u);
  EXPECT_EQ(bad[0].key, "serving.engine");
  EXPECT_NE(bad[0].message.find("sglang"), std::string::npos);  // lists the valid ones
  const auto orphan = ProblemsOf("serving:\n  max_prefill_tokens: 4096\n");
  ASSERT_EQ(orphan.size(), 1u);
  EXPECT_EQ(orphan[0].key, "serving.max_prefill_tokens");
  EXPECT_EQ(orphan[0].line, 2u);
  EXPECT_EQ(ProblemsOf("serving: {engine: sglang, chunked_prefill_size: -1}\n")[0].key,
            "serving.chunked_prefill_size");
}

TEST(ScenarioTest, WarmPrefixCacheIsReadEchoedOnlyWhenOnAndNeedsPrefixCaching) {
  const Scenario plain = LoadScenarioText("seed: 1\n", "t.yaml", ".");
  EXPECT_FALSE(plain.serving.warm_prefix_cache);
  EXPECT_FALSE(ScenarioToJson(plain)["serving"].contains("warm_prefix_cache"));
  const Scenario warm = LoadScenarioText("serving: {warm_prefix_cache: true}\n", "t.yaml", ".");
  EXPECT_TRUE(warm.serving.warm_prefix_cache);
  EXPECT_EQ(ScenarioToJson(warm)["serving"]["warm_prefix_cache"], true);
  const auto bad =
      ProblemsOf("seed: 1\nserving:\n  prefix_caching: false\n  warm_prefix_cache: true\n");
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].line, 4u);
  EXPECT_EQ(bad[0].key, "serving.warm_prefix_cache");
  EXPECT_NE(bad[0].message.find("prefix_caching"), std::string::npos);
}

TEST(ScenarioTest, AllProblemsOfAFileAreReportedTogether) {
  const auto problems = ProblemsOf("seed: x\nworkload:\n  requests: 0\n  bogus: 1\nfoo: 2\n");
  EXPECT_EQ(problems.size(), 4u);
}

TEST(ScenarioTest, DuplicateKeysAndSyntaxErrorsAreReported) {
  const auto dup = ProblemsOf("seed: 1\nseed: 2\n");
  ASSERT_FALSE(dup.empty());
  EXPECT_NE(dup[0].message.find("duplicate"), std::string::npos);
  const auto syntax = ProblemsOf("workload:\n  requests: [1, 2\n");
  ASSERT_EQ(syntax.size(), 1u);
  EXPECT_GT(syntax[0].line, 0u);
  EXPECT_NE(syntax[0].message.find("YAML"), std::string::npos);
  EXPECT_FALSE(ProblemsOf("- a\n- b\n").empty());  // not a map
}

TEST(ScenarioTest, BadOverridesNameTheSetArgument) {
  const auto no_eq = ProblemsOf("", {"workload.requests"});
  ASSERT_EQ(no_eq.size(), 1u);
  EXPECT_EQ(no_eq[0].file, "--set");
  const auto bad_value = ProblemsOf("", {"workload.requests=lots"});
  ASSERT_EQ(bad_value.size(), 1u);
  EXPECT_EQ(bad_value[0].file, "--set");
  EXPECT_EQ(bad_value[0].key, "workload.requests");
  const auto unknown = ProblemsOf("", {"workload.colour=red"});
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_EQ(unknown[0].key, "workload.colour");
}

TEST(ScenarioTest, MissingFilesAreReported) {
  EXPECT_EQ(ProblemsOf("profile: /no/such/profile.yaml\n")[0].key, "profile");
  EXPECT_EQ(ProblemsOf("workload: {trace: {path: /no/such.jsonl}}\n")[0].key,
            "workload.trace.path");
  EXPECT_THROW((void)LoadScenarioFile("/no/such/scenario.yaml"), InputError);
}

TEST(ScenarioTest, EchoRoundTripsTheResolvedValues) {
  const Scenario s = LoadScenarioText("seed: 9\nscheduler: {selector: fcfs, stop: always}\n",
                                      "t.yaml", ".");
  const auto json = ScenarioToJson(s);
  EXPECT_EQ(json["seed"], 9);
  EXPECT_EQ(json["scheduler"]["selector"], "fcfs");
  EXPECT_EQ(json["serving"]["max_num_seqs"], 500);
  EXPECT_EQ(json.dump(), ScenarioToJson(s).dump());  // deterministic
}

using test::ErrorOf;

// A read that failed (EIO) or a directory read as an empty file: the built-in default scenario
// ran with exit 0, and a profile directory was "empty".
TEST(ScenarioTest, UnreadableFilesAreNamedNotTakenForEmpty) {
  const std::string dir = ::testing::TempDir();
  EXPECT_EQ(ErrorOf([&] { (void)LoadScenarioFile(dir); }),
            dir + ": cannot read the scenario file: Is a directory");
  EXPECT_EQ(ErrorOf([&] { (void)ReadNamedFile(dir, "results/profiles", "profile"); }),
            dir + ": profile: cannot read the file: Is a directory");
  if (!std::ifstream("/proc/self/mem")) GTEST_SKIP() << "/proc/self/mem cannot be opened here";
  EXPECT_EQ(ErrorOf([] { (void)LoadScenarioFile("/proc/self/mem"); }),
            "/proc/self/mem: cannot read the scenario file: Input/output error");
}

TEST(ScenarioTest, EmptyValuesAndSecondDocumentsAreProblems) {
  const auto empty = ProblemsOf("workload:\n  requests:\n");
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_EQ(empty[0].ToString(),
            "test.yaml:2: workload.requests: no value; remove the key to keep the default");
  const auto second = ProblemsOf("seed: 1\n---\nseed: 2\n");
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].line, 3u);
  EXPECT_EQ(second[0].key, "seed");
}

}  // namespace
}  // namespace feather
