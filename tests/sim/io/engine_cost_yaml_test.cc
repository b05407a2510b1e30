// engine_cost_yaml_test.cc: the engine cost table reader (the shipped table, every kind of bad
// input with its file, line and key) and the scenario options of `scheduler_time: engine`
// (the mode, the table's name or path, which operation a selector gets, the summary echo).
#include "sim/io/engine_cost_yaml.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/input_error.h"
#include "sim/io/embedded_files.h"
#include "sim/io/scenario.h"
#include "sim/io/scenario_run.h"
#include "tests/sim/io/input_error_test_support.h"

namespace feather {
namespace {

namespace fs = std::filesystem;

constexpr char kShipped[] = "results/engine-cost/amd-epyc-vm.yaml";

constexpr char kGood[] = R"yaml(measured_on: {host: "h", cpu_model: "c"}
engines: {vllm: {version: "0.32.0"}}
operations:
  vllm_schedule:
    terms:
      constant_ns: {value: 100, source: measured, machine: "h (c)"}
      per_running_ns: {value: 2.5, source: measured}
  sglang_lpm:
    terms:
      per_waiting_ns: {value: 7, source: assumed}
  sglang_dfs_weight:
    fit: {anything: 1}
    terms:
      per_tree_node_ns: {value: 3, source: published}
)yaml";

std::vector<InputProblem> ProblemsOf(const std::string& text) {
  try {
    (void)ParseEngineCostTable(text, "t.yaml");
  } catch (const InputError& e) {
    return e.problems();
  }
  return {};
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(EngineCostYaml, ReadsATable) {
  const EngineCostTable t = ParseEngineCostTable(kGood, "t.yaml");
  EXPECT_EQ(t.machine, "h (c)");
  EXPECT_EQ(t.vllm_schedule.constant_ns, 100);
  EXPECT_EQ(t.vllm_schedule.per_running_ns, 2.5);
  EXPECT_EQ(t.vllm_schedule.per_admitted_ns, 0);  // absent: the fit does not use it
  EXPECT_EQ(t.sglang_lpm.per_waiting_ns, 7);
  EXPECT_EQ(t.sglang_dfs_weight.per_tree_node_ns, 3);
}

TEST(EngineCostYaml, TheShippedTableIsBuiltInAndMeasured) {
  const std::optional<std::string_view> text = FindEmbeddedFile(kShipped);
  ASSERT_TRUE(text);
  const EngineCostTable t = ParseEngineCostTable(*text, kShipped);
  EXPECT_GT(t.vllm_schedule.per_running_ns, 0);
  EXPECT_GT(t.sglang_lpm.per_waiting_ns, 0);
  EXPECT_GT(t.sglang_dfs_weight.per_tree_node_ns, 0);  // DFS-weight walks the whole tree
  // Every term the table gives says it was measured, and on which machine.
  size_t terms = 0, measured = 0;
  for (size_t at = text->find("_ns: {value:"); at != std::string_view::npos;
       at = text->find("_ns: {value:", at + 1)) {
    ++terms;
    const std::string_view line = text->substr(at, text->find('\n', at) - at);
    if (line.find("source: measured") != std::string_view::npos &&
        line.find("machine: ") != std::string_view::npos) {
      ++measured;
    }
  }
  EXPECT_GE(terms, 12u);
  EXPECT_EQ(measured, terms);
}

TEST(EngineCostYaml, EveryProblemWithItsLineAndKey) {
  // Negative value, unknown term, bad source, and a missing operation, all in one report.
  std::string text = Replace(kGood, "value: 2.5", "value: -1");
  text = Replace(text, "per_waiting_ns:", "per_waitng_ns:");
  text = Replace(text, "source: published", "source: guessed");
  text = Replace(text, "  sglang_lpm:\n", "  sglang_lmp:\n");
  const std::vector<InputProblem> p = ProblemsOf(text);
  auto has = [&](const std::string& key, uint32_t line, const std::string& words) {
    for (const InputProblem& q : p) {
      if (q.key == key && q.line == line && q.message.find(words) != std::string::npos) {
        return true;
      }
    }
    return false;
  };
  EXPECT_TRUE(has("operations.vllm_schedule.terms.per_running_ns.value", 7, "out of range"))
      << test::ErrorOf([&] { (void)ParseEngineCostTable(text, "t.yaml"); });
  EXPECT_TRUE(has("operations.sglang_dfs_weight.terms.per_tree_node_ns.source", 14, "guessed"));
  EXPECT_TRUE(has("operations.sglang_lmp", 8, "unknown key"));
  EXPECT_TRUE(std::any_of(p.begin(), p.end(), [](const InputProblem& q) {
    return q.key == "operations.sglang_lpm" && q.message.find("missing") != std::string::npos;
  }));
  for (const InputProblem& q : p) EXPECT_EQ(q.file, "t.yaml");
}

TEST(EngineCostYaml, MissingSourceAndEmptyFile) {
  const std::string text = Replace(kGood, "{value: 7, source: assumed}", "{value: 7}");
  const std::vector<InputProblem> p = ProblemsOf(text);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].key, "operations.sglang_lpm.terms.per_waiting_ns.source");
  EXPECT_EQ(p[0].line, 10u);
  EXPECT_EQ(ProblemsOf("")[0].key, "operations");
  EXPECT_EQ(ProblemsOf("- a list\n")[0].line, 1u);
}

TEST(EngineCostScenario, ModeAndTableAreScenarioOptions) {
  Scenario s =
      LoadScenarioText("scheduler_time: engine\nscheduler: {selector: lpm}\n", "s.yaml", ".");
  EXPECT_EQ(s.serving.scheduler_time, SchedulerTimeMode::kEngine);
  EXPECT_EQ(s.engine_cost, "amd-epyc-vm");
  EXPECT_EQ(ScenarioToJson(s)["scheduler_engine_cost"], "amd-epyc-vm");
  // Other modes keep summary.json's shape.
  EXPECT_FALSE(ScenarioToJson(LoadScenarioText("seed: 1\n", "s.yaml", "."))
                   .contains("scheduler_engine_cost"));

  s.workload.requests = 10;
  const PreparedRun run = PrepareRun(s);
  EXPECT_EQ(run.serving.engine_cost.operation, EngineOperation::kSglangLpm);
  EXPECT_EQ(run.engine_cost_file, std::string("<built-in>/") + kShipped);
  EXPECT_EQ(ResolvedRunJson(run)["engine_cost_operation"], "sglang_lpm");
  s.selector = "cht";
  EXPECT_EQ(PrepareRun(s).serving.engine_cost.operation, EngineOperation::kVllmSchedule);

  const std::string error = test::ErrorOf([] {
    (void)LoadScenarioText("scheduler_time: engine\nscheduler_engine_cost: nosuch\n", "s.yaml",
                           ".");
  });
  EXPECT_NE(error.find("s.yaml:2: scheduler_engine_cost: no built-in scheduler_engine_cost "
                       "named 'nosuch'"),
            std::string::npos)
      << error;
  EXPECT_NE(test::ErrorOf([] {
              (void)LoadScenarioText("scheduler_time: engin\n", "s.yaml", ".");
            }).find("engine"),
            std::string::npos);
}

TEST(EngineCostScenario, ABadTableFileIsAnInputErrorNamingFileLineAndField) {
  const fs::path dir = fs::temp_directory_path() / "feather-engine-cost-test";
  fs::create_directories(dir);
  const fs::path table = dir / "bad.yaml";
  std::ofstream(table) << Replace(kGood, "value: 100", "value: lots");
  Scenario s = LoadScenarioText("scheduler_time: engine\nscheduler_engine_cost: " + table.string() +
                                    "\nworkload: {requests: 10}\n",
                                "s.yaml", ".");
  const std::string error = test::ErrorOf([&] { (void)PrepareRun(s); });
  EXPECT_NE(error.find(table.string() + ":6: operations.vllm_schedule.terms.constant_ns.value"),
            std::string::npos)
      << error;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace feather
