// yaml_map_reader.h: the one validating YAML reader behind every input file of the simulator
// (scenarios, device profiles, model descriptions). I/O edge only: it includes yaml-cpp.
//
// A MapReader walks one YAML map key by key: each accessor marks its key as known, checks type
// and range, and records a problem (with the value node's line) instead of throwing, so a loader
// reports every problem of a file at once. Duplicate keys are reported on construction; keys no
// accessor asked for are reported as unknown by Finish() (or the destructor). YamlProblems
// collects the problems of one file and knows which key paths came from the command line's
// `--set` (those are reported against "--set", without a line).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/input_error.h"
#include "base/input_text.h"

namespace feather {

// 1-based line of a node (0 when the node is undefined).
[[nodiscard]] uint32_t LineOf(const YAML::Node& node);
// "'text'" for a scalar, else "a list" | "a map" | "nothing": what a message says was found.
[[nodiscard]] std::string Describe(const YAML::Node& node);
[[nodiscard]] std::optional<int64_t> ParseInteger(const std::string& text);
[[nodiscard]] std::optional<double> ParseReal(const std::string& text);  // finite only


// Parses YAML text (its first document). Text that is not UTF-8, a syntax error (a truncated
// file, say), lists and maps nested deeper than kMaxInputNesting, and a second document with
// content (after a '---' line: it would be ignored) become an InputError naming the file, the
// line and the key path the line belongs to (found from the indentation of the lines above it,
// since the text did not parse). O(size): one pass checks the shape, a second builds the nodes.
[[nodiscard]] YAML::Node ParseYaml(std::string_view text, const std::string& display_name);
// The dotted key path of block-style YAML `text` at 1-based `line`: the keys of the enclosing
// block maps and the line's own key ("workload.arrival" for "  arrival: {kind: ..." under
// "workload:"), or "" when none. A best-effort reading of indentation for unparsable text.
[[nodiscard]] std::string KeyPathAtLine(std::string_view text, uint32_t line);

class YamlProblems {
 public:
  explicit YamlProblems(std::string file, std::vector<std::string> override_keys = {})
      : file_(std::move(file)), override_keys_(std::move(override_keys)) {}

  void Add(const YAML::Node& node, const std::string& key, std::string message);
  [[nodiscard]] bool FromOverride(const std::string& key) const;
  // `--set a.b.c=v` on a file without `a` creates the map `a`: a problem found at `a` (an
  // unknown key, say) is then reported as "--set: a.b.c: 'a': ...", naming the argument.
  void NoteCreatedByOverride(std::string path, std::string override_key);
  [[nodiscard]] bool empty() const { return list_.empty(); }
  [[nodiscard]] size_t size() const { return list_.size(); }
  [[nodiscard]] std::vector<InputProblem> Take() { return std::move(list_); }

 private:
  std::string file_;
  std::vector<std::string> override_keys_;
  std::vector<std::pair<std::string, std::string>> created_;  // map path -> --set key
  std::vector<InputProblem> list_;
};

class MapReader {
 public:
  // `path` is the dotted key path of the map ("" at the top level).
  MapReader(YamlProblems& problems, YAML::Node node, std::string path);
  MapReader(const MapReader&) = delete;
  MapReader& operator=(const MapReader&) = delete;
  ~MapReader() { Finish(); }

  [[nodiscard]] std::string Join(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }
  // The value node of `key` (undefined when absent), marking the key as known; a "missing
  // (required)" problem when `required` and the key is absent or its value empty. An empty value
  // ("key:" with nothing after it, or "key: ~") of a key that is not required is a problem too
  // (Finish() reports it: "no value; remove the key to keep the default"), whatever the key's
  // type: a value lost in an edit must not run the default in silence. Accessors then leave
  // `out` as they would for an absent key, and Child() returns nothing.
  YAML::Node Value(const std::string& key, bool required = false);
  // A problem about `key` of this map, at `node`'s line.
  void Add(const YAML::Node& node, const std::string& key, std::string message) {
    problems_.Add(node, Join(key), std::move(message));
  }

  // Typed accessors: leave `out` unchanged when the key is absent or its value is bad.
  template <typename Int>
  void Integer(const std::string& key, Int& out, int64_t min, int64_t max, bool required = false) {
    if (const std::optional<int64_t> v = IntegerValue(key, min, max, required)) {
      out = static_cast<Int>(*v);
    }
  }
  // A real number in [min, max] (min excluded when `min_exclusive`).
  void Real(const std::string& key, double& out, double min, double max, bool min_exclusive = false,
            bool required = false);
  void Bool(const std::string& key, bool& out, bool required = false);           // true | false
  void String(const std::string& key, std::string& out, bool required = false);  // non-empty
  // A string that must be one of `names`.
  template <typename Names>
  void Choice(const std::string& key, std::string& out, const Names& names) {
    std::vector<std::string_view> list(std::begin(names), std::end(names));
    ChoiceOf(key, out, list);
  }
  // A name mapped to an enum value through `table` (name, value) pairs.
  template <typename Table, typename Enum>
  void EnumChoice(const std::string& key, Enum& out, const Table& table) {
    std::vector<std::string_view> names;
    for (const auto& [name, value] : table) names.push_back(name);
    std::string chosen;
    ChoiceOf(key, chosen, names);
    for (const auto& [name, value] : table) {
      if (chosen == name) out = value;
    }
  }
  // A child map; a problem if present but not a map.
  std::optional<YAML::Node> Child(const std::string& key, bool required = false);

  // Reports the keys no accessor asked for and the empty values of the keys they asked for
  // (once).
  void Finish();

  [[nodiscard]] YamlProblems& problems() { return problems_; }

 private:
  std::optional<int64_t> IntegerValue(const std::string& key, int64_t min, int64_t max,
                                      bool required);
  void ChoiceOf(const std::string& key, std::string& out,
                const std::vector<std::string_view>& names);

  YamlProblems& problems_;
  YAML::Node node_;
  std::string path_;
  std::set<std::string> known_;
  std::set<std::string> reported_empty_;  // keys whose empty value has been reported
  bool finished_ = false;
};

}  // namespace feather
