// config_fields_test.cc: each policy and selector config's field table drives the scenario
// reader, its validation, the summary's echo and the docs (policies/config_fields.h). Walks every
// table generically, so a knob added to a table is tested here without a new line, and a knob
// that one of those places forgets fails here.
#include "policies/config_fields.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "base/input_error.h"
#include "policies/stop_policy_factory.h"
#include "sim/io/scenario.h"

namespace feather {
namespace {

std::string SetPrefix(std::string_view section) {
  return section.empty() ? "scheduler." : "scheduler." + std::string(section) + ".";
}

// The echo's map for the section: scenario.scheduler.<section> (or scenario.scheduler itself).
const nlohmann::ordered_json& EchoOf(const nlohmann::ordered_json& scenario,
                                     std::string_view section) {
  const nlohmann::ordered_json& scheduler = scenario.at("scheduler");
  return section.empty() ? scheduler : scheduler.at(std::string(section));
}

// A valid value other than the default, as --set text and as the echo shows it.
template <class Config, class T>
std::string OtherValidValue(const ConfigField<Config>& field, T current) {
  if constexpr (std::is_same_v<T, bool>) {
    return current ? "false" : "true";
  } else if constexpr (std::is_same_v<T, double>) {
    const double v = current == field.range.real_max ? (field.range.real_min + current) / 2
                                                     : (current + field.range.real_max) / 2;
    std::ostringstream out;
    out.precision(17);
    out << v;
    return out.str();
  } else {
    const int64_t v =
        static_cast<int64_t>(current) == field.range.int_max
            ? field.range.int_min
            : std::max<int64_t>(field.range.int_min, static_cast<int64_t>(current) + 1);
    return std::to_string(v);
  }
}

// Every knob of the table: --set reaches the config, the echo names it with the same value, and
// the echo's map holds exactly the table's keys in the table's order.
template <class Config>
void CheckReaderAndEcho(Config& (*select)(Scenario&)) {
  const std::string prefix = SetPrefix(Config::kSection);
  Scenario defaults = LoadScenarioText("", "t.yaml", ".");
  std::vector<std::string> table_keys;
  ForEachField(select(defaults), [&](const ConfigField<Config>& field, const auto& value) {
    table_keys.emplace_back(field.key);
    const std::string set = prefix + std::string(field.key) + "=" + OtherValidValue(field, value);
    Scenario changed = LoadScenarioText("", "t.yaml", ".", std::vector<std::string>{set});
    const nlohmann::ordered_json echo = EchoOf(ScenarioToJson(changed), Config::kSection);
    const nlohmann::ordered_json before = EchoOf(ScenarioToJson(defaults), Config::kSection);
    EXPECT_NE(echo.at(std::string(field.key)), before.at(std::string(field.key))) << set;
  });
  const nlohmann::ordered_json echo = EchoOf(ScenarioToJson(defaults), Config::kSection);
  std::vector<std::string> echo_keys;
  for (const auto& [key, value] : echo.items()) {
    if (std::find(table_keys.begin(), table_keys.end(), key) != table_keys.end()) {
      echo_keys.push_back(key);
    }
  }
  EXPECT_EQ(echo_keys, table_keys) << "the echo of " << prefix << " follows the table's order";
  if (!std::string_view(Config::kSection).empty()) {
    EXPECT_EQ(echo.size(), table_keys.size()) << prefix << " echoes only the table's knobs";
  }
}

// Just past each end of every knob's range is an input error naming the key.
template <class Config>
void CheckRangesAreEnforced(Config& (*select)(Scenario&)) {
  const std::string prefix = SetPrefix(Config::kSection);
  Scenario defaults = LoadScenarioText("", "t.yaml", ".");
  ForEachField(select(defaults), [&](const ConfigField<Config>& field, const auto& value) {
    using T = std::remove_cvref_t<decltype(value)>;
    std::vector<std::string> bad;
    if constexpr (std::is_same_v<T, bool>) {
      bad = {"maybe"};
    } else if constexpr (std::is_same_v<T, double>) {
      std::ostringstream above;
      above << field.range.real_max * 1.5 + 1;
      bad = {above.str(), field.range.min_exclusive ? std::to_string(field.range.real_min) : "-1"};
    } else {
      bad = {"-1"};
      if (field.range.int_max < std::numeric_limits<int64_t>::max()) {
        bad.push_back(std::to_string(field.range.int_max + 1));
      }
      if (field.range.int_min > 0) bad.push_back(std::to_string(field.range.int_min - 1));
    }
    for (const std::string& text : bad) {
      const std::string set = prefix + std::string(field.key) + "=" + text;
      try {
        (void)LoadScenarioText("", "t.yaml", ".", std::vector<std::string>{set});
        ADD_FAILURE() << set << " was accepted";
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find(prefix + std::string(field.key)), std::string::npos)
            << set << ": " << e.what();
      }
    }
  });
}

HeuristicConfig& Heuristic(Scenario& s) { return s.stop_options.heuristic; }
BanditConfig& Bandit(Scenario& s) { return s.stop_options.bandit; }
QLearningConfig& QLearning(Scenario& s) { return s.stop_options.qlearning; }
DynamicBatchingConfig& Dynamic(Scenario& s) { return s.stop_options.dynamic_batching; }
SelectorOptions& Selector(Scenario& s) { return s.selector_options; }

TEST(ConfigFields, EveryKnobIsReadAndEchoedByItsTable) {
  CheckReaderAndEcho<HeuristicConfig>(Heuristic);
  CheckReaderAndEcho<BanditConfig>(Bandit);
  CheckReaderAndEcho<QLearningConfig>(QLearning);
  CheckReaderAndEcho<DynamicBatchingConfig>(Dynamic);
  CheckReaderAndEcho<SelectorOptions>(Selector);
}

TEST(ConfigFields, EveryKnobsRangeIsEnforcedWithItsKey) {
  CheckRangesAreEnforced<HeuristicConfig>(Heuristic);
  CheckRangesAreEnforced<BanditConfig>(Bandit);
  CheckRangesAreEnforced<QLearningConfig>(QLearning);
  CheckRangesAreEnforced<DynamicBatchingConfig>(Dynamic);
  CheckRangesAreEnforced<SelectorOptions>(Selector);
}

TEST(ConfigFields, DefaultsAreValidAndTheFactoryChecksTheSameTable) {
  const StopPolicyOptions o;
  EXPECT_TRUE(ConfigProblems(o.heuristic).empty());
  EXPECT_TRUE(ConfigProblems(o.bandit).empty());
  EXPECT_TRUE(ConfigProblems(o.qlearning).empty());
  EXPECT_TRUE(ConfigProblems(o.dynamic_batching).empty());
  EXPECT_TRUE(ConfigProblems(SelectorOptions{}).empty());
  StopPolicyOptions bad;
  bad.dynamic_batching.forgetting = 0;
  EXPECT_EQ(StopPolicyOptionErrors("dynamic-batching", bad),
            std::vector<std::string>{"forgetting = 0: must be in (0, 1]"});
  bad = {};
  bad.heuristic.relaxed_loss_chunks = 1;  // below max_loss_chunks = 5
  ASSERT_EQ(StopPolicyOptionErrors("heuristic", bad).size(), 1u);
}

// scenarios/README.md documents every knob: a row starting "| `scheduler.<section>." (or
// "| `scheduler." for the selectors' keys) names it.
template <class Config>
void CheckDocumented(const std::vector<std::string>& rows) {
  const std::string start = "| `" + SetPrefix(Config::kSection);
  Config config;
  ForEachField(config, [&](const ConfigField<Config>& field, const auto&) {
    bool found = false;
    for (const std::string& row : rows) {
      if (row.rfind(start, 0) != 0) continue;
      const std::string cell = row.substr(0, row.find(" | ", 2));
      for (const char* before : {".", "{", ", ", "`."}) {
        if (cell.find(before + std::string(field.key)) != std::string::npos) found = true;
      }
    }
    EXPECT_TRUE(found) << SetPrefix(Config::kSection) << field.key
                       << " is not in scenarios/README.md's key table";
  });
}

TEST(ConfigFields, ScenarioReadmeDocumentsEveryKnob) {
  std::ifstream in(std::string(FEATHER_SOURCE_DIR) + "/scenarios/README.md");
  ASSERT_TRUE(in) << "cannot open scenarios/README.md";
  std::vector<std::string> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(line);
  CheckDocumented<HeuristicConfig>(rows);
  CheckDocumented<BanditConfig>(rows);
  CheckDocumented<QLearningConfig>(rows);
  CheckDocumented<DynamicBatchingConfig>(rows);
  CheckDocumented<SelectorOptions>(rows);
}

}  // namespace
}  // namespace feather
