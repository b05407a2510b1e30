// yaml_map_reader.cc: the validating YAML map reader (see yaml_map_reader.h).
#include "sim/io/yaml_map_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace feather {
namespace {

// Follows yaml-cpp's parse events without building nodes: counts the nesting of lists and maps
// (throwing TooDeep at the first one beyond kMaxInputNesting, before yaml-cpp's recursive parser
// goes any deeper) and notes where a second document with content starts (an empty one, like a
// trailing '---', holds nothing that could be ignored). yaml-cpp 0.7 neither consumes nor
// rejects a stray ',' where a document should start (YAML::Load reads ",x" as an empty file):
// a document starting where the previous one did is Stuck there.
class ShapeCheck final : public YAML::EventHandler {
 public:
  struct TooDeep {
    YAML::Mark mark;
  };
  struct Stuck {
    YAML::Mark mark;
  };
  struct SecondDocument {
    YAML::Mark start;    // its '---' (or its first token when it has no '---')
    YAML::Mark content;  // its first node
  };

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (documents_ > 0 && mark.pos == document_start_.pos) throw Stuck{mark};
    ++documents_;
    document_start_ = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& /*mark*/, YAML::anchor_t /*anchor*/) override {}
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t /*anchor*/) override { Content(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string& /*tag*/, YAML::anchor_t /*anchor*/,
                const std::string& /*value*/) override {
    Content(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string& /*tag*/,
                       YAML::anchor_t /*anchor*/, YAML::EmitterStyle::value /*style*/) override {
    Open(mark);
  }
  void OnSequenceEnd() override { --depth_; }
  void OnMapStart(const YAML::Mark& mark, const std::string& /*tag*/, YAML::anchor_t /*anchor*/,
                  YAML::EmitterStyle::value /*style*/) override {
    Open(mark);
  }
  void OnMapEnd() override { --depth_; }

  [[nodiscard]] const std::optional<SecondDocument>& second_document() const { return second_; }

 private:
  void Content(const YAML::Mark& mark) {
    if (documents_ > 1 && !second_) second_ = SecondDocument{document_start_, mark};
  }
  void Open(const YAML::Mark& mark) {
    Content(mark);
    if (++depth_ > kMaxInputNesting) throw TooDeep{mark};
  }

  int depth_ = 0;
  int documents_ = 0;
  YAML::Mark document_start_;
  std::optional<SecondDocument> second_;
};

uint32_t LineOfMark(const YAML::Mark& mark) {
  return mark.line >= 0 ? static_cast<uint32_t>(mark.line + 1) : 1;
}

std::string NestingMessage() {
  return "lists and maps nested deeper than " + std::to_string(kMaxInputNesting) + " levels";
}

}  // namespace

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


std::string KeyPathAtLine(std::string_view text, uint32_t line) {
  struct Level {
    size_t indent;
    std::string key;
  };
  std::vector<Level> stack;
  std::string own_key;
  size_t own_indent = 0;
  uint32_t number = 0;
  size_t start = 0;
  while (start <= text.size() && number < line) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view row = text.substr(start, end - start);
    start = end + 1;
    ++number;
    size_t indent = row.find_first_not_of(' ');
    if (indent == std::string_view::npos || row[indent] == '#' || row[indent] == '\r') {
      if (number == line) own_indent = row.size();
      continue;
    }
    // "- key: value" in a list: the key sits two columns in.
    while (indent + 1 < row.size() && row[indent] == '-' && row[indent + 1] == ' ') {
      indent = row.find_first_not_of(' ', indent + 1);
      if (indent == std::string_view::npos) indent = row.size();
    }
    std::string_view rest = row.substr(std::min(indent, row.size()));
    std::string key;
    if (!rest.empty() && (rest[0] == '"' || rest[0] == '\'')) {
      const size_t close = rest.find(rest[0], 1);
      if (close != std::string_view::npos && close + 1 < rest.size() && rest[close + 1] == ':') {
        key = std::string(rest.substr(1, close - 1));
      }
    } else {
      const size_t colon = rest.find(':');
      if (colon != std::string_view::npos && colon > 0 &&
          (colon + 1 == rest.size() || rest[colon + 1] == ' ' || rest[colon + 1] == '\r') &&
          rest.substr(0, colon).find_first_of("{[,#\"'") == std::string_view::npos) {
        key = std::string(rest.substr(0, colon));
        while (!key.empty() && key.back() == ' ') key.pop_back();
      }
    }
    if (number == line) {
      own_key = key;
      own_indent = indent;
      break;
    }
    if (key.empty()) continue;
    while (!stack.empty() && stack.back().indent >= indent) stack.pop_back();
    stack.push_back({indent, key});
  }
  std::string path;
  for (const Level& level : stack) {
    if (level.indent >= own_indent) break;
    path += (path.empty() ? "" : ".") + level.key;
  }
  if (!own_key.empty()) path += (path.empty() ? "" : ".") + own_key;
  return path;
}

YAML::Node ParseYaml(std::string_view text, const std::string& display_name) {
  if (const std::optional<size_t> bad = FirstInvalidUtf8(text)) {
    const std::string_view before = text.substr(0, *bad);
    const auto line = static_cast<uint32_t>(1 + std::count(before.begin(), before.end(), '\n'));
    const size_t line_start = before.rfind('\n');
    const size_t column = *bad - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
    char byte[8];
    std::snprintf(byte, sizeof(byte), "0x%02X", static_cast<unsigned char>(text[*bad]));
    throw InputError(display_name, line, KeyPathAtLine(text, line),
                     std::string("not valid UTF-8: byte ") + byte + " at column " +
                         std::to_string(column) + " (save the file as UTF-8)");
  }
  const std::string copy(text);
  try {
    std::istringstream in(copy);
    YAML::Parser parser(in);
    ShapeCheck check;
    bool more = true;
    while (more && !check.second_document()) more = parser.HandleNextDocument(check);
    if (const auto& second = check.second_document()) {
      // The key path is read from the second document's own lines.
      const size_t start_pos = static_cast<size_t>(std::max(second->start.pos, 0));
      const size_t doc_begin = start_pos == 0 ? 0 : copy.rfind('\n', start_pos - 1) + 1;
      const uint32_t start_line = LineOfMark(second->start);
      const uint32_t line = std::max(LineOfMark(second->content), start_line);
      throw InputError(
          display_name, line,
          KeyPathAtLine(std::string_view(copy).substr(doc_begin), line - start_line + 1),
          "in a second YAML document (it starts on line " + std::to_string(start_line) +
              "), which would be ignored; a file holds one document: delete the "
              "'---' line to merge the two, or the second document");
    }
    return YAML::Load(copy);
  } catch (const ShapeCheck::Stuck& stuck) {
    const uint32_t line = LineOfMark(stuck.mark);
    const size_t pos = static_cast<size_t>(std::max(stuck.mark.pos, 0));
    const char c = pos < copy.size() ? copy[pos] : ' ';
    throw InputError(display_name, line, KeyPathAtLine(text, line),
                     std::string("YAML syntax error: unexpected ") +
                         (c > ' ' && c < 0x7F ? std::string("'") + c + "'" : "text"));
  } catch (const ShapeCheck::TooDeep& deep) {
    const uint32_t line = LineOfMark(deep.mark);
    throw InputError(display_name, line, KeyPathAtLine(text, line), NestingMessage());
  } catch (const YAML::DeepRecursion& deep) {  // yaml-cpp's own guard (about 500 levels)
    const uint32_t line = LineOfMark(deep.mark);
    throw InputError(display_name, line, KeyPathAtLine(text, line), NestingMessage());
  } catch (const YAML::Exception& e) {
    // yaml-cpp marks an error it cannot place with line -1; the end of the text is then where
    // parsing stopped.
    const auto line = e.mark.line >= 0
                          ? static_cast<uint32_t>(e.mark.line + 1)
                          : static_cast<uint32_t>(1 + std::count(text.begin(), text.end(), '\n'));
    throw InputError(display_name, line, KeyPathAtLine(text, line), "YAML syntax error: " + e.msg);
  }
}


void YamlProblems::Add(const YAML::Node& node, const std::string& key, std::string message) {
  for (const auto& [path, override_key] : created_) {
    if (key == path) {
      list_.push_back({"--set", 0, override_key, "'" + key + "': " + std::move(message)});
      return;
    }
  }
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
  for (const auto& [path, override_key] : created_) {
    if (key == path || key.rfind(path + ".", 0) == 0) return true;
  }
  return false;
}

void YamlProblems::NoteCreatedByOverride(std::string path, std::string override_key) {
  created_.emplace_back(std::move(path), std::move(override_key));
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
      // An empty value ("key:") of a required key is as good as absent; one of a key that is not
      // required is reported by Finish().
      if (required && entry.second.IsNull() && reported_empty_.insert(key).second) {
        Add(entry.first, key, "missing (required)");
      }
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
    } else if (entry.second.IsNull() && reported_empty_.insert(key).second) {
      Add(entry.first, key, "no value; remove the key to keep the default");
    }
  }
}

}  // namespace feather
