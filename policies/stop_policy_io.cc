// stop_policy_io.cc: JSON save/load of stop policies (format in stop_policy_io.h).
//
// Loading collects every problem of the file before throwing (one report), using a small reader
// that records "field 'path': problem" instead of throwing at the first bad field.
#include "policies/stop_policy_io.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "policies/always_add_policy.h"
#include "policies/converge_policy.h"
#include "policies/bandit_policy.h"
#include "policies/config_fields.h"
#include "policies/dynamic_batching_policy.h"
#include "policies/mpc_policy.h"
#include "policies/heuristic_policy.h"
#include "policies/policy_state.h"
#include "policies/qlearning_policy.h"

namespace feather {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kFormat = "feather-stop-policy";
constexpr uint64_t kVersion = 1;

std::string_view ActionName(StopDecision action) {
  return action == StopDecision::kAdd ? "add" : "stop";
}

// ---------------------------------------------------------------- save

Json CellKey(uint32_t cell) {
  const StateKey key = StateKeyAt(cell / kNumActions);
  Json j;
  j["b_bin"] = key.b_bin;
  j["delta_bin"] = key.delta_bin;
  j["w_bin"] = key.w_bin;
  j["action"] = ActionName(static_cast<StopDecision>(cell % kNumActions));
  return j;
}

// The config's knobs, by its field table (policies/config_fields.h), in table order.
template <class Config>
void SaveOptions(const Config& config, Json& options) {
  ForEachField(config, [&](const ConfigField<Config>& field, const auto& value) {
    options[std::string(field.key)] = value;
  });
}

void SaveBandit(const BanditPolicy& policy, Json& options, Json& state) {
  SaveOptions(policy.config(), options);
  options["state_bins"] = StateBinsName(policy.config().state_bins);
  const BanditTables& t = policy.tables();
  state["total_decisions"] = t.total_decisions;
  Json cells = Json::array();
  for (uint32_t cell = 0; cell < kNumCells; ++cell) {
    if (t.count[cell] == 0) continue;
    Json j = CellKey(cell);
    j["count"] = t.count[cell];
    j["reward_sum"] = t.reward_sum[cell];
    cells.push_back(std::move(j));
  }
  state["cells"] = std::move(cells);
}

void SaveQLearning(const QLearningPolicy& policy, Json& options, Json& state) {
  const QLearningConfig& c = policy.config();
  SaveOptions(c, options);
  options["state_bins"] = StateBinsName(c.state_bins);
  const QTables& t = policy.tables();
  state["decisions"] = t.decisions;
  state["epsilon"] = policy.epsilon();
  state["rng_state"] = policy.rng_state();
  Json cells = Json::array();
  for (uint32_t cell = 0; cell < kNumCells; ++cell) {
    if (t.visits[cell] == 0 && t.q[cell] == 0.0) continue;
    Json j = CellKey(cell);
    j["q"] = t.q[cell];
    j["visits"] = t.visits[cell];
    cells.push_back(std::move(j));
  }
  state["cells"] = std::move(cells);
}

// ---------------------------------------------------------------- load

// Reads fields, recording every problem as "field 'path': ..." instead of stopping at the first.
class Reader {
 public:
  // The member `key` of `object` (at `path`), or nullptr (problem recorded) when absent.
  const Json* Field(const Json& object, std::string_view key, const std::string& path) {
    const std::string full = Join(path, key);
    if (!object.is_object()) {
      Problem(path.empty() ? "(top level)" : path, "expected an object");
      return nullptr;
    }
    const auto it = object.find(std::string(key));
    if (it == object.end()) {
      Problem(full, "missing field");
      return nullptr;
    }
    return &*it;
  }

  const Json* Object(const Json& object, std::string_view key, const std::string& path) {
    const Json* j = Field(object, key, path);
    if (j && !j->is_object()) {
      Problem(Join(path, key), "expected an object, got " + Show(*j));
      return nullptr;
    }
    return j;
  }

  const Json* Array(const Json& object, std::string_view key, const std::string& path) {
    const Json* j = Field(object, key, path);
    if (j && !j->is_array()) {
      Problem(Join(path, key), "expected an array, got " + Show(*j));
      return nullptr;
    }
    return j;
  }

  // A finite number in [lo, hi]; `constraint` describes the range for the message.
  double Number(const Json& object, std::string_view key, const std::string& path,
                double lo = -std::numeric_limits<double>::max(),
                double hi = std::numeric_limits<double>::max(),
                std::string_view constraint = "a finite number") {
    const Json* j = Field(object, key, path);
    if (!j) return 0;
    if (!j->is_number()) {
      Problem(Join(path, key), "expected a number, got " + Show(*j));
      return 0;
    }
    const double v = j->get<double>();
    if (!std::isfinite(v) || v < lo || v > hi) {
      Problem(Join(path, key), "value " + Show(*j) + " must be " + std::string(constraint));
      return 0;
    }
    return v;
  }

  // A non-negative integer no larger than `hi`.
  uint64_t Unsigned(const Json& object, std::string_view key, const std::string& path,
                    uint64_t hi = std::numeric_limits<uint64_t>::max()) {
    const Json* j = Field(object, key, path);
    if (!j) return 0;
    if (!j->is_number_unsigned() && !(j->is_number_integer() && j->get<int64_t>() >= 0)) {
      Problem(Join(path, key), "expected a non-negative integer, got " + Show(*j));
      return 0;
    }
    const uint64_t v = j->get<uint64_t>();
    if (v > hi) {
      Problem(Join(path, key), "value " + Show(*j) + " must be <= " + std::to_string(hi));
      return 0;
    }
    return v;
  }

  uint32_t Unsigned32(const Json& object, std::string_view key, const std::string& path,
                      uint32_t hi = std::numeric_limits<uint32_t>::max()) {
    return static_cast<uint32_t>(Unsigned(object, key, path, hi));
  }

  std::string String(const Json& object, std::string_view key, const std::string& path) {
    const Json* j = Field(object, key, path);
    if (!j) return {};
    if (!j->is_string()) {
      Problem(Join(path, key), "expected a string, got " + Show(*j));
      return {};
    }
    return j->get<std::string>();
  }

  StateBins Bins(const Json& object, std::string_view key, const std::string& path) {
    const Json* j = Field(object, key, path);
    if (!j) return StateBins::kAuthors;
    const std::optional<StateBins> bins =
        j->is_string() ? ParseStateBins(j->get<std::string>()) : std::nullopt;
    if (!bins) {
      Problem(Join(path, key), "value " + Show(*j) + R"( must be "authors", "exponential" or "cascade")");
      return StateBins::kAuthors;
    }
    return *bins;
  }

  // A table cell's index from {b_bin, delta_bin, w_bin, action}; nullopt (recorded) when bad.
  std::optional<uint32_t> Cell(const Json& cell, const std::string& path, StateBins bins) {
    const uint32_t max_bin = kBinsPerDimension - 1;
    const uint32_t max_delta_bin = MaxDeltaBin(bins);
    const size_t before = problems_.size();
    StateKey key;
    key.b_bin = static_cast<uint8_t>(Unsigned32(cell, "b_bin", path, max_bin));
    key.delta_bin = static_cast<uint8_t>(Unsigned32(cell, "delta_bin", path, max_delta_bin));
    key.w_bin = static_cast<uint8_t>(Unsigned32(cell, "w_bin", path, max_bin));
    const std::string action = String(cell, "action", path);
    StopDecision decision = StopDecision::kAdd;
    if (action == "stop") {
      decision = StopDecision::kStop;
    } else if (action != "add" && problems_.size() == before) {
      Problem(Join(path, "action"), "value \"" + action + R"(" must be "add" or "stop")");
    }
    if (problems_.size() != before) return std::nullopt;
    return CellIndex(StateIndex(key), decision);
  }

  void Problem(const std::string& path, const std::string& what) {
    problems_.push_back("field '" + path + "': " + what);
  }
  [[nodiscard]] const std::vector<std::string>& problems() const { return problems_; }

  static std::string Join(const std::string& path, std::string_view key) {
    return path.empty() ? std::string(key) : path + "." + std::string(key);
  }
  static std::string Index(const std::string& path, size_t i) {
    return path + "[" + std::to_string(i) + "]";
  }

  static std::string Show(const Json& j) {
    std::string s = j.dump();
    if (s.size() > 40) s = s.substr(0, 37) + "...";
    return s;
  }

 private:
  std::vector<std::string> problems_;
};

// Reads the config's knobs from `options` by its field table, with the table's ranges (the
// scenario reader's), then its cross-field rules when every knob read.
template <class Config>
void LoadOptions(Reader& r, const Json& options, Config& config) {
  const size_t before = r.problems().size();
  ForEachField(config, [&](const ConfigField<Config>& field, auto& value) {
    using T = std::remove_reference_t<decltype(value)>;
    const std::string key(field.key);
    if constexpr (std::is_same_v<T, double>) {
      const size_t problems = r.problems().size();
      const std::string range = RangeText(field);
      const double v =
          r.Number(options, key, "options", field.range.real_min, field.range.real_max, range);
      if (r.problems().size() != problems) return;
      if (!InFieldRange(field, v)) {
        r.Problem(Reader::Join("options", key),
                  "value " + Reader::Show(options[key]) + " must be " + range);
        return;
      }
      value = v;
    } else if constexpr (std::is_same_v<T, bool>) {
      // A flag absent from the file keeps its default: files written before the flag existed
      // (qlearning's hold) describe policies without it.
      const auto it = options.is_object() ? options.find(key) : options.end();
      const Json* j = it == options.end() ? nullptr : &*it;
      if (j && !j->is_boolean()) {
        r.Problem(Reader::Join("options", key), "expected true or false, got " + Reader::Show(*j));
      } else if (j) {
        value = j->template get<bool>();
      }
    } else {
      const size_t problems = r.problems().size();
      const uint64_t v =
          r.Unsigned(options, key, "options", static_cast<uint64_t>(field.range.int_max));
      if (r.problems().size() != problems) return;
      if (!InFieldRange(field, v)) {
        r.Problem(Reader::Join("options", key),
                  "value " + std::to_string(v) + " must be " + RangeText(field));
        return;
      }
      value = static_cast<T>(v);
    }
  });
  if (r.problems().size() != before) return;
  for (const ConfigRuleProblem& rule : config.RuleProblems()) {
    r.Problem(Reader::Join("options", rule.key), rule.message);
  }
}

void LoadHeuristic(HeuristicPolicy& policy, Reader& r, const Json& options, const Json& state) {
  HeuristicConfig c;
  LoadOptions(r, options, c);
  const uint32_t floor = r.Unsigned32(state, "floor", "state");
  if (r.problems().empty()) policy.Restore(c, floor);
}

void LoadBandit(BanditPolicy& policy, Reader& r, const Json& options, const Json& state) {
  BanditConfig c;
  LoadOptions(r, options, c);
  c.state_bins = r.Bins(options, "state_bins", "options");
  if (policy.config().reward == BanditReward::kAuthors && r.problems().empty()) {
    // bandit-authors is pinned: a file with other constants is not the authors' bandit.
    const BanditConfig pinned = BanditConfig::Authors();
    if (c.exploration != pinned.exploration) {
      r.Problem("options.exploration", "bandit-authors is pinned to 200");
    }
    if (c.state_bins != pinned.state_bins) {
      r.Problem("options.state_bins", "bandit-authors is pinned to the authors' bins");
    }
  }
  auto tables = std::make_unique<BanditTables>();
  tables->total_decisions = r.Unsigned(state, "total_decisions", "state");
  uint64_t count_sum = 0;
  if (const Json* cells = r.Array(state, "cells", "state")) {
    for (size_t i = 0; i < cells->size(); ++i) {
      const std::string path = Reader::Index("state.cells", i);
      const Json& cell = (*cells)[i];
      const std::optional<uint32_t> index = r.Cell(cell, path, c.state_bins);
      const uint64_t count = r.Unsigned(cell, "count", path);
      const double reward_sum = r.Number(cell, "reward_sum", path);
      if (!index) continue;
      if (tables->count[*index] != 0) {
        r.Problem(path, "duplicate cell (same bins and action as an earlier cell)");
        continue;
      }
      if (count == 0) r.Problem(Reader::Join(path, "count"), "value 0 must be > 0");
      tables->count[*index] = count;
      tables->reward_sum[*index] = reward_sum;
      count_sum += count;
    }
  }
  if (r.problems().empty() && count_sum != tables->total_decisions) {
    r.Problem("state.total_decisions", "value " + std::to_string(tables->total_decisions) +
                                           " must equal the sum of the cells' counts (" +
                                           std::to_string(count_sum) + ")");
  }
  if (r.problems().empty()) policy.Restore(c, *tables);
}

void LoadQLearning(QLearningPolicy& policy, Reader& r, const Json& options, const Json& state) {
  QLearningConfig c;
  LoadOptions(r, options, c);
  c.state_bins = r.Bins(options, "state_bins", "options");
  auto tables = std::make_unique<QTables>();
  tables->decisions = r.Unsigned(state, "decisions", "state");
  const uint64_t rng_state = r.Unsigned(state, "rng_state", "state");
  if (const Json* cells = r.Array(state, "cells", "state")) {
    std::vector<bool> seen(kNumCells, false);
    for (size_t i = 0; i < cells->size(); ++i) {
      const std::string path = Reader::Index("state.cells", i);
      const Json& cell = (*cells)[i];
      const std::optional<uint32_t> index = r.Cell(cell, path, c.state_bins);
      const double q = r.Number(cell, "q", path);
      const uint64_t visits = r.Unsigned(cell, "visits", path);
      if (!index) continue;
      if (seen[*index]) {
        r.Problem(path, "duplicate cell (same bins and action as an earlier cell)");
        continue;
      }
      seen[*index] = true;
      tables->q[*index] = q;
      tables->visits[*index] = visits;
    }
  }
  if (r.problems().empty()) policy.Restore(c, *tables, rng_state);
}

void LoadDynamic(DynamicBatchingPolicy& policy, Reader& r, const Json& options, const Json& state) {
  constexpr double kMax = std::numeric_limits<double>::max();
  DynamicBatchingConfig c;
  LoadOptions(r, options, c);
  LatencyFit fit;
  if (const Json* f = r.Object(state, "fit", "state")) {
    fit.weight_sum = r.Number(*f, "weight_sum", "state.fit", 0.0, kMax, "finite and >= 0");
    fit.n_sum = r.Number(*f, "n_sum", "state.fit", 0.0, kMax, "finite and >= 0");
    fit.n2_sum = r.Number(*f, "n2_sum", "state.fit", 0.0, kMax, "finite and >= 0");
    fit.t_sum = r.Number(*f, "t_sum", "state.fit", 0.0, kMax, "finite and >= 0");
    fit.nt_sum = r.Number(*f, "nt_sum", "state.fit", 0.0, kMax, "finite and >= 0");
    fit.min_batch_seen = r.Unsigned32(*f, "min_batch_seen", "state.fit");
    fit.max_batch_seen = r.Unsigned32(*f, "max_batch_seen", "state.fit");
    if (r.problems().empty() && fit.min_batch_seen > fit.max_batch_seen) {
      r.Problem("state.fit.min_batch_seen",
                "value " + std::to_string(fit.min_batch_seen) + " must be <= max_batch_seen");
    }
  }
  if (r.problems().empty()) policy.Restore(c, fit);
}

// Fixed-length arrays of finite numbers: state.fit.<key>.
template <size_t N>
void LoadNumbers(Reader& r, const Json& fit, std::string_view key, std::array<double, N>& out) {
  const Json* a = r.Array(fit, key, "state.fit");
  if (a == nullptr) return;
  const std::string path = "state.fit." + std::string(key);
  if (a->size() != N) {
    r.Problem(path, "expected " + std::to_string(N) + " numbers, got " + std::to_string(a->size()));
    return;
  }
  for (size_t i = 0; i < N; ++i) {
    const Json& v = (*a)[i];
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
      r.Problem(path + "[" + std::to_string(i) + "]", "expected a finite number");
      return;
    }
    out[i] = v.get<double>();
  }
}

void LoadMpc(MpcPolicy& policy, Reader& r, const Json& options, const Json& state) {
  MpcConfig c;
  LoadOptions(r, options, c);
  DecodeTimeFit fit;
  if (const Json* f = r.Object(state, "fit", "state")) {
    LoadNumbers(r, *f, "xtx", fit.xtx);
    LoadNumbers(r, *f, "xty", fit.xty);
    fit.tty = r.Number(*f, "tty", "state.fit", 0.0, std::numeric_limits<double>::max(),
                       "finite and >= 0");
    fit.steps = r.Number(*f, "steps", "state.fit", 0.0, std::numeric_limits<double>::max(),
                         "finite and >= 0");
    fit.observed = r.Unsigned(*f, "observed", "state.fit");
  }
  if (r.problems().empty()) policy.Restore(c, fit);
}

}  // namespace

std::string StopPolicyToJson(const StopPolicy& policy) {
  Json root;
  root["format"] = kFormat;
  root["version"] = kVersion;
  root["kind"] = policy.Name();
  Json options = Json::object();
  Json state = Json::object();
  if (dynamic_cast<const AlwaysAddPolicy*>(&policy) != nullptr ||
      dynamic_cast<const ConvergePolicy*>(&policy) != nullptr) {
    // No options, no state.
  } else if (const auto* h = dynamic_cast<const HeuristicPolicy*>(&policy)) {
    SaveOptions(h->config(), options);
    state["floor"] = h->floor();
  } else if (const auto* b = dynamic_cast<const BanditPolicy*>(&policy)) {
    SaveBandit(*b, options, state);
  } else if (const auto* q = dynamic_cast<const QLearningPolicy*>(&policy)) {
    SaveQLearning(*q, options, state);
  } else if (const auto* d = dynamic_cast<const DynamicBatchingPolicy*>(&policy)) {
    SaveOptions(d->config(), options);
    const LatencyFit& f = d->fit();
    Json fit;
    fit["weight_sum"] = f.weight_sum;
    fit["n_sum"] = f.n_sum;
    fit["n2_sum"] = f.n2_sum;
    fit["t_sum"] = f.t_sum;
    fit["nt_sum"] = f.nt_sum;
    fit["min_batch_seen"] = f.min_batch_seen;
    fit["max_batch_seen"] = f.max_batch_seen;
    state["fit"] = std::move(fit);
  } else if (const auto* m = dynamic_cast<const MpcPolicy*>(&policy)) {
    SaveOptions(m->config(), options);
    const DecodeTimeFit& f = m->fit();
    Json fit;
    fit["xtx"] = f.xtx;
    fit["xty"] = f.xty;
    fit["tty"] = f.tty;
    fit["steps"] = f.steps;
    fit["observed"] = f.observed;
    state["fit"] = std::move(fit);
  } else {
    throw std::runtime_error("cannot save stop policy '" + std::string(policy.Name()) +
                             "': stop_policy_io does not know this policy type");
  }
  root["options"] = std::move(options);
  root["state"] = std::move(state);
  return root.dump(2) + "\n";
}

void StopPolicyFromJson(StopPolicy& policy, std::string_view text, const std::string& source) {
  // A saved policy nests 4 levels deep; the parse stops past 64, before anything could recurse
  // over a bomb of brackets (a 100,000-deep value would overflow the stack when printed or freed).
  constexpr int kMaxNesting = 64;
  struct TooDeep {};
  const Json::parser_callback_t bounded = [](int depth, Json::parse_event_t, Json&) {
    if (depth > kMaxNesting) throw TooDeep{};
    return true;
  };
  Json root;
  try {
    root = Json::parse(text, bounded);
  } catch (const Json::parse_error& e) {
    throw std::runtime_error(source + ": invalid JSON: " + e.what());
  } catch (const TooDeep&) {
    throw std::runtime_error(source + ": arrays and objects nested deeper than " +
                             std::to_string(kMaxNesting) + " levels; not a saved stop policy");
  }
  Reader r;
  auto fail_if_problems = [&] {
    if (r.problems().empty()) return;
    std::string message = source + ": cannot load stop policy '" + std::string(policy.Name()) + "'";
    for (const std::string& p : r.problems()) message += "\n  " + p;
    throw std::runtime_error(message);
  };
  // Header first: a file of another format, version or kind is refused before reading the rest.
  const std::string format = r.String(root, "format", "");
  if (r.problems().empty() && format != kFormat) {
    r.Problem("format", "value \"" + format + "\" must be \"" + std::string(kFormat) + "\"");
  }
  const uint64_t version = r.Unsigned(root, "version", "");
  if (r.problems().empty() && version != kVersion) {
    r.Problem("version", "value " + std::to_string(version) +
                             " is not supported (this build "
                             "reads version " +
                             std::to_string(kVersion) + ")");
  }
  const std::string kind = r.String(root, "kind", "");
  if (r.problems().empty() && kind != policy.Name()) {
    r.Problem("kind", "the file holds a '" + kind + "' policy, not a '" +
                          std::string(policy.Name()) + "' policy");
  }
  fail_if_problems();

  const Json* options = r.Object(root, "options", "");
  const Json* state = r.Object(root, "state", "");
  fail_if_problems();

  if (dynamic_cast<AlwaysAddPolicy*>(&policy) != nullptr ||
      dynamic_cast<ConvergePolicy*>(&policy) != nullptr) {
    // Nothing to restore.
  } else if (auto* h = dynamic_cast<HeuristicPolicy*>(&policy)) {
    LoadHeuristic(*h, r, *options, *state);
  } else if (auto* b = dynamic_cast<BanditPolicy*>(&policy)) {
    LoadBandit(*b, r, *options, *state);
  } else if (auto* q = dynamic_cast<QLearningPolicy*>(&policy)) {
    LoadQLearning(*q, r, *options, *state);
  } else if (auto* d = dynamic_cast<DynamicBatchingPolicy*>(&policy)) {
    LoadDynamic(*d, r, *options, *state);
  } else if (auto* m = dynamic_cast<MpcPolicy*>(&policy)) {
    LoadMpc(*m, r, *options, *state);
  } else {
    throw std::runtime_error(source + ": cannot load into stop policy '" +
                             std::string(policy.Name()) +
                             "': stop_policy_io does not know this policy type");
  }
  fail_if_problems();
}

void SaveStopPolicy(const StopPolicy& policy, const std::string& path) {
  const std::string text = StopPolicyToJson(policy);
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (out) out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(temp, ignored);
      throw std::runtime_error("cannot write stop policy to '" + temp + "'");
    }
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(temp, ignored);
    throw std::runtime_error("cannot rename '" + temp + "' to '" + path + "': " + ec.message());
  }
}

void LoadStopPolicy(StopPolicy& policy, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open stop policy file '" + path + "' for reading");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw std::runtime_error("cannot read stop policy file '" + path + "'");
  StopPolicyFromJson(policy, buffer.str(), path);
}

}  // namespace feather
