// sweep_spec.cc: sweep file loading, expansion, naming and up-front validation (sweep_spec.h).
#include "cli/sweep_spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>

#include "base/input_error.h"
#include "sim/io/scenario.h"
#include "sim/io/scenario_run.h"
#include "sim/io/yaml_map_reader.h"

namespace feather {
namespace {

namespace fs = std::filesystem;

// Keys whose value is a file path (or a built-in short name for model and profile).
constexpr std::string_view kPathKeys[] = {"model", "profile", "workload.trace.path",
                                          "scheduler.policy.load"};
constexpr std::string_view kPlotKinds[] = {"lines", "bars", "timeseries"};

// One `vary` entry: its choices, each the values of its key(s) (several when zipped).
using VaryDimension = std::vector<std::vector<SweepValue>>;

bool IsPathKey(std::string_view key) {
  return std::find(std::begin(kPathKeys), std::end(kPathKeys), key) != std::end(kPathKeys);
}

// A built-in name ("llama-3-8b"), not a path: the same rule as the scenario loader's.
bool IsShortName(const std::string& value) {
  return value.find('/') == std::string::npos &&
         !(value.size() > 5 && value.compare(value.size() - 5, 5, ".yaml") == 0);
}

std::string ResolveAgainst(const std::string& value, const std::string& base_dir) {
  if (value.empty() || fs::path(value).is_absolute()) return value;
  return (fs::path(base_dir) / value).lexically_normal().string();
}

// A value as `--set` text: flow-style YAML, which the override parser reads back to the same
// node (scalars are re-quoted only when plain style would change their meaning).
std::string FlowText(const YAML::Node& node) {
  YAML::Emitter out;
  out.SetMapFormat(YAML::Flow);
  out.SetSeqFormat(YAML::Flow);
  if (node.IsScalar()) {
    out << node.Scalar();
  } else {
    out << node;
  }
  return out.c_str();
}

uint64_t Fnv1a(std::string_view text) {
  uint64_t hash = 1469598103934665603ull;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

std::string Hex8(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%08llx",
                static_cast<unsigned long long>((value ^ (value >> 32)) & 0xffffffffull));
  return text;
}

// A value's part of a point name: like SanitizeName, but ',' and '=' (the name's separators)
// are replaced too and the fragment is trimmed of '_'.
std::string NameFragment(std::string_view display) {
  std::string out;
  for (const char c : display) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '+' || c == '-';
    if (keep) {
      out += c;
    } else if (!out.empty() && out.back() != '_') {
      out += '_';
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? std::string("_") : out;
}

// Builds one SweepValue from a key and its value node; records a problem for an empty value.
std::optional<SweepValue> MakeValue(YamlProblems& problems, const std::string& where,
                                    const std::string& key, const YAML::Node& value,
                                    const std::string& base_dir) {
  if (key.empty() || key.front() == '.' || key.back() == '.' ||
      key.find("..") != std::string::npos || key.find_first_of(" =\t") != std::string::npos) {
    problems.Add(value, where,
                 "'" + key +
                     "' is not a scenario key (dotted path, e.g. "
                     "workload.arrival.rate)");
    return std::nullopt;
  }
  if (!value.IsDefined() || value.IsNull()) {
    problems.Add(value, where + "." + key, "expected a value, got nothing");
    return std::nullopt;
  }
  SweepValue v;
  v.key = key;
  v.line = LineOf(value);
  v.section = where;
  v.display = value.IsScalar() ? value.Scalar() : FlowText(value);
  if (IsPathKey(key) && value.IsScalar()) {
    const std::string& text = value.Scalar();
    const bool short_name = (key == "model" || key == "profile") && IsShortName(text);
    v.text = short_name ? FlowText(value) : FlowText(YAML::Node(ResolveAgainst(text, base_dir)));
  } else if (key == "workload.trace" && value.IsMap() && value["path"] &&
             value["path"].IsScalar()) {
    YAML::Node copy = YAML::Clone(value);
    copy["path"] = ResolveAgainst(value["path"].Scalar(), base_dir);
    v.text = FlowText(copy);
  } else {
    v.text = FlowText(value);
  }
  return v;
}

// The entries of a map of key -> value, in file order; a problem for a non-scalar key.
std::vector<SweepValue> ReadOverrideMap(YamlProblems& problems, const std::string& where,
                                        const YAML::Node& map, const std::string& base_dir) {
  std::vector<SweepValue> values;
  std::set<std::string> seen;
  for (const auto& entry : map) {
    if (!entry.first.IsScalar()) {
      problems.Add(entry.first, where, "keys are scenario key paths, got " + Describe(entry.first));
      continue;
    }
    const std::string key = entry.first.Scalar();
    if (!seen.insert(key).second) {
      problems.Add(entry.first, where + "." + key, "duplicate key");
      continue;
    }
    if (auto v = MakeValue(problems, where, key, entry.second, base_dir)) {
      values.push_back(std::move(*v));
    }
  }
  return values;
}

nlohmann::ordered_json ReadPlot(MapReader& root) {
  nlohmann::ordered_json plot = nlohmann::ordered_json::object();
  const std::optional<YAML::Node> node = root.Child("plot");
  if (!node) return plot;
  MapReader m(root.problems(), *node, "plot");
  std::string x, kind, title, x_label, lines;
  bool log_x = false;
  m.String("x", x);
  m.Choice("kind", kind, kPlotKinds);
  m.String("title", title);
  m.String("x_label", x_label);
  m.String("lines", lines);
  m.Bool("log_x", log_x);
  if (!x.empty()) plot["x"] = x;
  if (!kind.empty()) plot["kind"] = kind;
  if (!title.empty()) plot["title"] = title;
  if (!x_label.empty()) plot["x_label"] = x_label;
  if (!lines.empty()) plot["lines"] = lines;
  if (m.Value("log_x").IsDefined()) plot["log_x"] = log_x;
  if (const YAML::Node metrics = m.Value("metrics"); metrics.IsDefined() && !metrics.IsNull()) {
    bool ok = metrics.IsSequence() && metrics.size() > 0;
    for (size_t i = 0; ok && i < metrics.size(); ++i) ok = metrics[i].IsScalar();
    if (!ok) {
      m.Add(metrics, "metrics",
            "expected a non-empty list of table columns (throughput_tok_s, ...), got " +
                Describe(metrics));
    } else {
      for (const auto& item : metrics) plot["metrics"].push_back(item.Scalar());
    }
  }
  return plot;
}

// Names every point (see the header) and reports points with identical overrides.
void NamePoints(SweepSpec& spec, YamlProblems& problems,
                const std::vector<YAML::Node>& point_nodes) {
  std::map<std::string, size_t> last_component_users;
  for (const std::string& key : spec.swept_keys) {
    const size_t dot = key.rfind('.');
    ++last_component_users[dot == std::string::npos ? key : key.substr(dot + 1)];
  }
  auto short_key = [&](const std::string& key) {
    const size_t dot = key.rfind('.');
    const std::string last = dot == std::string::npos ? key : key.substr(dot + 1);
    return last_component_users[last] > 1 ? key : last;
  };
  std::map<std::string, size_t> name_count;
  for (SweepPoint& p : spec.points) {
    std::string name;
    for (const SweepValue& v : p.values) {
      if (!name.empty()) name += ',';
      name += SanitizeName(short_key(v.key)) + "=" + NameFragment(v.display);
    }
    p.name = name.empty() ? "base" : SanitizeName(name);
    ++name_count[p.name];
  }
  std::map<std::string, size_t> by_overrides;
  for (size_t i = 0; i < spec.points.size(); ++i) {
    SweepPoint& p = spec.points[i];
    std::string joined;
    for (const SweepValue& v : p.values) joined += v.key + "=" + v.text + "\n";
    if (const auto [it, inserted] = by_overrides.emplace(joined, i); !inserted) {
      const YAML::Node where = i < point_nodes.size() ? point_nodes[i] : YAML::Node();
      problems.Add(where, "points",
                   "point " + std::to_string(i + 1) + " (" + p.name + ") repeats point " +
                       std::to_string(it->second + 1) + " with the same values");
      continue;
    }
    if (name_count[p.name] > 1 || p.name.size() > kMaxPointNameChars) {
      const size_t keep = std::min(p.name.size(), kMaxPointNameChars - 9);
      p.name = p.name.substr(0, keep) + "~" + Hex8(Fnv1a(joined));
    }
  }
}

// Loads every point's scenario; the problems of --set values move to the sweep file's lines.
void ValidatePoints(SweepSpec& spec, std::vector<InputProblem>& out) {
  std::set<std::string> seen;
  auto add = [&](InputProblem p) {
    if (seen.insert(p.ToString()).second) out.push_back(std::move(p));
  };
  for (SweepPoint& point : spec.points) {
    try {
      const Scenario scenario = LoadScenarioFile(spec.base, point.overrides);
      point.scenario = nlohmann::json::parse(ScenarioToJson(scenario).dump());
      if (scenario.engine == "model") (void)PrepareRun(scenario);
    } catch (const InputError& error) {
      for (const InputProblem& p : error.problems()) {
        if (p.file != "--set") {
          add(p);
          continue;
        }
        // The override the problem is about: its key, or a key path under it. The problem is
        // reported at that value's line, under the section it is in ("vary.KEY").
        InputProblem moved{spec.file, 0, p.key, p.message};
        auto matches = [&](const SweepValue& v) {
          return p.key == v.key || p.key.rfind(v.key + ".", 0) == 0;
        };
        const auto move_to = [&](const SweepValue& v) {
          moved.line = v.line;
          moved.key = v.section.empty() ? p.key : v.section + "." + p.key;
        };
        // The command line's own --set are applied last, so they are the value in force: their
        // problems stay "--set" problems.
        bool from_command_line = false;
        for (const std::string& set : spec.command_line_sets) {
          const std::string key = set.substr(0, set.find('='));
          from_command_line |= p.key == key || p.key.rfind(key + ".", 0) == 0;
        }
        if (from_command_line) {
          add(p);
          continue;
        }
        for (const SweepValue& v : point.values) {
          if (matches(v)) move_to(v);
        }
        if (moved.line == 0) {
          for (const SweepValue& v : spec.fixed) {
            if (matches(v)) move_to(v);
          }
        }
        add(std::move(moved));
      }
    }
  }
}

}  // namespace

std::string SanitizeName(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '=' || c == ',' || c == '+' || c == '-';
    const char k = keep ? c : '_';
    if (k == '_' && !out.empty() && out.back() == '_') continue;
    out += k;
  }
  if (out.empty() || out.front() == '.' || out.front() == '-') out.insert(out.begin(), '_');
  return out;
}

std::pair<uint32_t, uint32_t> ParseShard(std::string_view text) {
  const size_t slash = text.find('/');
  uint32_t k = 0, n = 0;
  bool ok = slash != std::string_view::npos;
  if (ok) {
    const char* begin = text.data();
    const auto [k_end, k_ec] = std::from_chars(begin, begin + slash, k);
    const auto [n_end, n_ec] = std::from_chars(begin + slash + 1, begin + text.size(), n);
    ok = k_ec == std::errc() && n_ec == std::errc() && k_end == begin + slash &&
         n_end == begin + text.size() && n >= 1 && k >= 1 && k <= n;
  }
  if (!ok) {
    throw std::invalid_argument("--shard: expected K/N with 1 <= K <= N (e.g. 2/8), got '" +
                                std::string(text) + "'");
  }
  return {k, n};
}

std::vector<size_t> ShardPoints(size_t point_count, uint32_t k, uint32_t n) {
  std::vector<size_t> indices;
  for (size_t i = k - 1; i < point_count; i += n) indices.push_back(i);
  return indices;
}

SweepSpec LoadSweepText(std::string_view text, const std::string& display_name,
                        const std::string& base_dir, bool validate_scenarios,
                        std::span<const std::string> sets) {
  YAML::Node doc = ParseYaml(text, display_name);
  if (!doc.IsMap()) {
    throw InputError(
        display_name, LineOf(doc), "",
        "a sweep file is a YAML map (base, set, points, vary, plot), got " + Describe(doc));
  }
  YamlProblems problems(display_name);
  SweepSpec spec;
  spec.file = display_name;
  spec.command_line_sets.assign(sets.begin(), sets.end());
  std::vector<std::vector<SweepValue>> point_lists;  // from `points`
  std::vector<YAML::Node> point_list_nodes;
  std::vector<VaryDimension> vary;  // one per `vary` entry
  {
    MapReader root(problems, doc, "");
    root.String("name", spec.name);
    root.String("base", spec.base, /*required=*/true);
    if (!spec.base.empty()) {
      spec.base = ResolveAgainst(spec.base, base_dir);
      if (!fs::is_regular_file(spec.base)) {
        problems.Add(root.Value("base"), "base", "no such scenario file: " + spec.base);
      }
    }
    if (const auto set = root.Child("set")) {
      spec.fixed = ReadOverrideMap(problems, "set", *set, base_dir);
    }
    if (const YAML::Node points = root.Value("points"); points.IsDefined() && !points.IsNull()) {
      if (!points.IsSequence() || points.size() == 0) {
        problems.Add(points, "points",
                     "expected a non-empty list of override maps, got " + Describe(points));
      } else {
        for (size_t i = 0; i < points.size(); ++i) {
          const YAML::Node item = points[i];
          const std::string where = "points[" + std::to_string(i) + "]";
          if (!item.IsMap()) {
            problems.Add(item, where, "expected a map of key: value, got " + Describe(item));
            continue;
          }
          point_lists.push_back(ReadOverrideMap(problems, where, item, base_dir));
          point_list_nodes.push_back(item);
        }
      }
    }
    if (const auto vary_node = root.Child("vary")) {
      std::set<std::string> seen;
      for (const auto& entry : *vary_node) {
        const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : std::string();
        const std::string where = "vary." + key;
        if (!entry.second.IsSequence() || entry.second.size() == 0) {
          problems.Add(entry.second, where,
                       "expected a non-empty list of values, got " + Describe(entry.second));
          continue;
        }
        // "a, b: [[1, x], [2, y]]" varies a and b together (zipped), one tuple per choice.
        std::vector<std::string> keys;
        for (size_t start = 0; start <= key.size();) {
          size_t comma = key.find(',', start);
          if (comma == std::string::npos) comma = key.size();
          std::string k = key.substr(start, comma - start);
          k.erase(0, k.find_first_not_of(' '));
          k.erase(k.find_last_not_of(' ') + 1);
          keys.push_back(k);
          start = comma + 1;
        }
        bool duplicate = false;
        for (const std::string& k : keys) duplicate = !seen.insert(k).second || duplicate;
        if (duplicate) {
          problems.Add(entry.first, where, "a key is varied twice");
          continue;
        }
        VaryDimension dimension;
        for (const auto& item : entry.second) {
          if (keys.size() > 1 && (!item.IsSequence() || item.size() != keys.size())) {
            problems.Add(item, where,
                         "expected a list of " + std::to_string(keys.size()) +
                             " values (one per key), got " + Describe(item) +
                             (item.IsSequence() ? " of " + std::to_string(item.size()) : ""));
            continue;
          }
          std::vector<SweepValue> choice;
          for (size_t k = 0; k < keys.size(); ++k) {
            const YAML::Node value = keys.size() > 1 ? item[k] : item;
            if (auto v = MakeValue(problems, "vary", keys[k], value, base_dir)) {
              choice.push_back(std::move(*v));
            }
          }
          if (choice.size() == keys.size()) dimension.push_back(std::move(choice));
        }
        if (!dimension.empty()) vary.push_back(std::move(dimension));
      }
    }
    spec.plot = ReadPlot(root);
  }
  if (spec.name.empty()) spec.name = fs::path(display_name).stem().string();
  spec.name = SanitizeName(spec.name);

  // Expansion: point lists (or one empty list) × the cartesian product of vary.
  if (point_lists.empty()) {
    point_lists.emplace_back();
    point_list_nodes.emplace_back();
  }
  std::vector<YAML::Node> point_nodes;
  for (size_t pi = 0; pi < point_lists.size(); ++pi) {
    std::vector<size_t> index(vary.size(), 0);
    while (true) {
      SweepPoint point;
      point.values = point_lists[pi];
      for (size_t k = 0; k < vary.size(); ++k) {
        const std::vector<SweepValue>& choice = vary[k][index[k]];
        point.values.insert(point.values.end(), choice.begin(), choice.end());
      }
      spec.points.push_back(std::move(point));
      point_nodes.push_back(point_list_nodes[pi]);
      // Odometer step: the last key fastest; done when the first key wraps.
      bool done = true;
      for (size_t k = vary.size(); k > 0; --k) {
        if (++index[k - 1] < vary[k - 1].size()) {
          done = false;
          break;
        }
        index[k - 1] = 0;
      }
      if (done) break;
    }
  }
  for (const SweepPoint& p : spec.points) {
    for (const SweepValue& v : p.values) {
      if (std::find(spec.swept_keys.begin(), spec.swept_keys.end(), v.key) ==
          spec.swept_keys.end()) {
        spec.swept_keys.push_back(v.key);
      }
    }
  }
  if (spec.plot.contains("x")) {
    const std::string x = spec.plot["x"].get<std::string>();
    constexpr std::string_view kDerived[] = {"scheduler", "selector", "stop", "model", "profile"};
    const bool derived =
        std::find(std::begin(kDerived), std::end(kDerived), x) != std::end(kDerived);
    if (!derived &&
        std::find(spec.swept_keys.begin(), spec.swept_keys.end(), x) == spec.swept_keys.end()) {
      problems.Add(doc["plot"]["x"], "plot.x",
                   "'" + x + "' is neither a swept key (" +
                       (spec.swept_keys.empty() ? std::string("none")
                                                : nlohmann::json(spec.swept_keys).dump()) +
                       ") nor scheduler | selector | stop | model | profile");
    }
  }
  NamePoints(spec, problems, point_nodes);
  for (SweepPoint& p : spec.points) {
    for (const SweepValue& v : spec.fixed) p.overrides.push_back(v.key + "=" + v.text);
    for (const SweepValue& v : p.values) p.overrides.push_back(v.key + "=" + v.text);
    for (const std::string& set : spec.command_line_sets) p.overrides.push_back(set);
  }
  std::vector<InputProblem> all = problems.Take();
  if (all.empty() && validate_scenarios) ValidatePoints(spec, all);
  if (!all.empty()) throw InputError(std::move(all));
  return spec;
}

SweepSpec LoadSweepFile(const std::string& path, std::span<const std::string> sets) {
  const std::string text = ReadTextFile(path, "sweep file");
  const std::string base_dir = fs::path(path).parent_path().string();
  return LoadSweepText(text, path, base_dir.empty() ? "." : base_dir, true, sets);
}

}  // namespace feather
