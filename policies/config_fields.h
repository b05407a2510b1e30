// config_fields.h: one table per policy config, from which every reader and writer works.
//
// A stop policy's or selector's knobs used to be spelled out in about seven places: the scenario
// reader, its validation, the summary's echo, the saved-policy writer and reader, the factory's
// copy from a flat option bag, and the docs. Now each config struct (HeuristicConfig,
// BanditConfig, QLearningConfig, DynamicBatchingConfig, ChtSelectorConfig, RadixSelectorConfig)
// lists its knobs once, as a `Fields()` table of ConfigField entries, plus its cross-field rules
// (`RuleProblems()`). Everything else walks the table:
//
//   scenario YAML  scheduler.<kSection>.<key>   sim/io/scenario.cc  (ranges, file:line)
//   summary.json   scenario.scheduler...        sim/io/scenario.cc  (same keys, same order)
//   saved policy   options.<key>                policies/stop_policy_io.cc (same ranges)
//   factory        ConfigProblems(config)       policies/stop_policy_factory.cc
//   docs           scenarios/README.md          tests/policies/config_fields_test.cc checks it
//
// so adding a knob is one line in its config's table (and a sentence in the README, which the
// test asks for). A config's `kSection` is the key of its map under `scheduler:` ("" for keys
// that sit directly under `scheduler:`, as the selectors' do).
//
// Ranges: integers are checked against [int_min, int_max]; reals against [real_min, real_max],
// or (real_min, real_max] when `min_exclusive`, and must be finite. RangeText renders a range the
// way every message says it: "in [0, 1]", "in (0, 1]".
//
// Example (one knob, the whole of its plumbing):
//   {"epsilon_min", &QLearningConfig::epsilon_min, ConfigField<QLearningConfig>::Real(0, 1)},
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace feather {

template <class Config>
struct ConfigField {
  using Member =
      std::variant<uint32_t Config::*, uint64_t Config::*, double Config::*, bool Config::*>;

  struct Range {
    int64_t int_min = 0;
    int64_t int_max = 0;
    double real_min = 0;
    double real_max = 0;
    bool min_exclusive = false;
  };
  static constexpr Range Integer(int64_t min, int64_t max) { return {min, max, 0, 0, false}; }
  static constexpr Range Real(double min, double max, bool min_exclusive = false) {
    return {0, 0, min, max, min_exclusive};
  }
  static constexpr Range Flag() { return {}; }

  std::string_view key;  // the YAML key, the summary's key and the saved policy's option name
  Member member;
  Range range;
};

// A cross-field rule that a config breaks. Readers blame `key` when the input gave it, else
// `other_key` (the rule's other side), so the line shown is one the user wrote.
struct ConfigRuleProblem {
  std::string_view key;
  std::string_view other_key;
  std::string message;
};

// "in [0, 1]", "in (0, 1]", "in [1, 1048576]": the range as messages state it.
inline std::string RangeText(double min, double max, bool min_exclusive) {
  std::ostringstream out;
  out << "in " << (min_exclusive ? "(" : "[") << min << ", " << max << "]";
  return out.str();
}
template <class Config>
std::string RangeText(const ConfigField<Config>& field) {
  if (std::holds_alternative<double Config::*>(field.member)) {
    return RangeText(field.range.real_min, field.range.real_max, field.range.min_exclusive);
  }
  return "in [" + std::to_string(field.range.int_min) + ", " + std::to_string(field.range.int_max) +
         "]";
}

// Calls fn(field, value) for each knob, value a (const) reference of the member's type.
template <class Config, class Fn>
void ForEachField(Config& config, Fn&& fn) {
  using Plain = std::remove_const_t<Config>;
  for (const ConfigField<Plain>& field : Plain::Fields()) {
    std::visit([&](auto member) { fn(field, config.*member); }, field.member);
  }
}

// Whether `value` lies in the field's range (booleans always do).
template <class Config, class T>
bool InFieldRange(const ConfigField<Config>& field, T value) {
  if constexpr (std::is_same_v<T, bool>) {
    return true;
  } else if constexpr (std::is_same_v<T, double>) {
    if (!std::isfinite(value) || value > field.range.real_max) return false;
    return field.range.min_exclusive ? value > field.range.real_min : value >= field.range.real_min;
  } else {
    return static_cast<int64_t>(value) >= field.range.int_min && value >= 0 &&
           static_cast<uint64_t>(value) <= static_cast<uint64_t>(field.range.int_max);
  }
}

// Every knob out of range ("key = value: must be in [a, b]") and every broken cross-field rule
// (its message), in table order: empty when the config is valid. O(fields).
template <class Config>
std::vector<std::string> ConfigProblems(const Config& config) {
  std::vector<std::string> problems;
  ForEachField(config, [&](const ConfigField<Config>& field, const auto& value) {
    if (InFieldRange(field, value)) return;
    std::ostringstream out;
    out << field.key << " = " << value << ": must be " << RangeText(field);
    problems.push_back(out.str());
  });
  if (problems.empty()) {
    for (ConfigRuleProblem& rule : config.RuleProblems())
      problems.push_back(std::move(rule.message));
  }
  return problems;
}

}  // namespace feather
