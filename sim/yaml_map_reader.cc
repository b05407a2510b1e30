// yaml_map_reader.cc: the validating YAML map reader (see yaml_map_reader.h).
#include "sim/yaml_map_reader.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

namespace feather {

uint32_t LineOf(const YAML::Node& node) {
  return node.IsDefined() ? static_cast<uint32_t>(node.Mark().line + 1) : 0;
}

std::string Describe(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return "nothing";
}

std::optional<int64_t> ParseInteger(const std::string& text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::optional<double> ParseReal(const std::string& text) {
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || !std::isfinite(value)) return std::nullopt;
  return value;
}

YAML::Node ParseYaml(std::string_view text, const std::string& display_name) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    throw InputError(display_name, static_cast<uint32_t>(e.mark.line + 1), "",
                     "YAML syntax error: " + e.msg);
  }
}

std::string ReadTextFile(const std::string& path, std::string_view what, std::string_view key) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, 0, std::string(key), "cannot open the " + std::string(what));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void YamlProblems::Add(const YAML::Node& node, const std::string& key, std::string message) {
  if (FromOverride(key)) {
    list_.push_back({"--set", 0, key, std::move(message)});
  } else {
    list_.push_back({file_, LineOf(node), key, std::move(message)});
  }
}

bool YamlProblems::FromOverride(const std::string& key) const {
  for (const std::string& o : override_keys_) {
    if (key == o || key.rfind(o + ".", 0) == 0) return true;
  }
  return false;
}

MapReader::MapReader(YamlProblems& problems, YAML::Node node, std::string path)
    : problems_(problems), node_(std::move(node)), path_(std::move(path)) {
  if (!node_.IsMap()) return;
  std::set<std::string> seen;
  for (const auto& entry : node_) {
    const std::string key = entry.first.Scalar();
    if (!seen.insert(key).second) Add(entry.first, key, "duplicate key");
  }
}

YAML::Node MapReader::Value(const std::string& key, bool required) {
  known_.insert(key);
  if (node_.IsMap()) {
    for (const auto& entry : node_) {
      if (entry.first.Scalar() != key) continue;
      // An empty value ("key:") of a required key is as good as absent.
      if (required && entry.second.IsNull()) Add(entry.first, key, "missing (required)");
      return entry.second;
    }
  }
  if (required) Add(node_, key, "missing (required)");
  return YAML::Node(YAML::NodeType::Undefined);
}

std::optional<int64_t> MapReader::IntegerValue(const std::string& key, int64_t min, int64_t max,
                                               bool required) {
  const YAML::Node v = Value(key, required);
  if (!v.IsDefined() || v.IsNull()) return std::nullopt;
  const std::optional<int64_t> parsed = v.IsScalar() ? ParseInteger(v.Scalar()) : std::nullopt;
  if (!parsed) {
    Add(v, key, "expected an integer, got " + Describe(v));
    return std::nullopt;
  }
  if (*parsed < min || *parsed > max) {
    Add(v, key,
        "value " + v.Scalar() + " out of range [" + std::to_string(min) + ", " +
            std::to_string(max) + "]");
    return std::nullopt;
  }
  return parsed;
}

void MapReader::Real(const std::string& key, double& out, double min, double max,
                     bool min_exclusive, bool required) {
  const YAML::Node v = Value(key, required);
  if (!v.IsDefined() || v.IsNull()) return;
  const std::optional<double> parsed = v.IsScalar() ? ParseReal(v.Scalar()) : std::nullopt;
  if (!parsed) {
    Add(v, key, "expected a number, got " + Describe(v));
    return;
  }
  const bool below = min_exclusive ? *parsed <= min : *parsed < min;
  if (below || *parsed > max) {
    std::ostringstream range;
    range << (min_exclusive ? "(" : "[") << min << ", " << max << "]";
    Add(v, key, "value " + v.Scalar() + " out of range " + range.str());
    return;
  }
  out = *parsed;
}

void MapReader::Bool(const std::string& key, bool& out, bool required) {
  const YAML::Node v = Value(key, required);
  if (!v.IsDefined() || v.IsNull()) return;
  // YAML 1.2's core schema: only true and false (not yaml-cpp's yes/no/on/off).
  if (v.IsScalar() && (v.Scalar() == "true" || v.Scalar() == "false")) {
    out = v.Scalar() == "true";
    return;
  }
  Add(v, key, "expected true or false, got " + Describe(v));
}

void MapReader::String(const std::string& key, std::string& out, bool required) {
  const YAML::Node v = Value(key, required);
  if (!v.IsDefined() || v.IsNull()) return;
  if (!v.IsScalar() || v.Scalar().empty()) {
    Add(v, key, "expected a non-empty string, got " + Describe(v));
    return;
  }
  out = v.Scalar();
}

void MapReader::ChoiceOf(const std::string& key, std::string& out,
                         const std::vector<std::string_view>& names) {
  const YAML::Node v = Value(key);
  if (!v.IsDefined() || v.IsNull()) return;
  if (v.IsScalar()) {
    for (const std::string_view name : names) {
      if (v.Scalar() == name) {
        out = v.Scalar();
        return;
      }
    }
  }
  std::string list;
  for (const std::string_view name : names) list += (list.empty() ? "" : " | ") + std::string(name);
  Add(v, key, "unknown value " + Describe(v) + "; expected one of: " + list);
}

std::optional<YAML::Node> MapReader::Child(const std::string& key, bool required) {
  const YAML::Node v = Value(key, required);
  if (!v.IsDefined() || v.IsNull()) return std::nullopt;
  if (!v.IsMap()) {
    Add(v, key, "expected a map, got " + Describe(v));
    return std::nullopt;
  }
  return v;
}

void MapReader::Finish() {
  if (finished_ || !node_.IsMap()) return;
  finished_ = true;
  for (const auto& entry : node_) {
    const std::string key = entry.first.Scalar();
    if (known_.count(key) == 0) {
      std::string list;
      for (const std::string& k : known_) list += (list.empty() ? "" : ", ") + k;
      Add(entry.first, key, "unknown key (known here: " + list + ")");
    }
  }
}

}  // namespace feather
