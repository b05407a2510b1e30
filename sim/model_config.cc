// model_config.cc: derived sizes of a model and the YAML loader for model descriptions.
//
// The loader reads every field before it throws, so one InputError lists every problem of the
// file (missing, mistyped, out of range, unknown or duplicate keys), each with its 1-based line.
#include "sim/model_config.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "sim/input_error.h"

namespace feather {

uint64_t ModelConfig::KvBytesPerToken() const {
  return uint64_t{layers} * KvBytesPerTokenPerLayer();
}

uint64_t ModelConfig::KvBytesPerTokenPerLayer() const {
  return 2 * uint64_t{kv_heads} * head_dim * dtype_bytes;
}

uint64_t ModelConfig::LayerLinearParams() const {
  const uint64_t q_width = uint64_t{heads} * head_dim;
  const uint64_t kv_width = uint64_t{kv_heads} * head_dim;
  const uint64_t attention = uint64_t{hidden} * (q_width + 2 * kv_width) + q_width * hidden;
  const uint64_t mlp = 3 * uint64_t{hidden} * intermediate;
  return attention + mlp;
}

uint64_t ModelConfig::LinearParams() const { return uint64_t{layers} * LayerLinearParams(); }

uint64_t ModelConfig::LmHeadParams() const { return uint64_t{vocab} * hidden; }

uint64_t ModelConfig::TotalParams() const {
  // Two RMSNorm weight vectors per layer plus the final norm.
  const uint64_t norms = (2 * uint64_t{layers} + 1) * hidden;
  const uint64_t embedding = LmHeadParams();
  return LinearParams() + norms + embedding + (tied_embeddings ? 0 : LmHeadParams());
}

uint64_t ModelConfig::WeightBytes() const { return TotalParams() * dtype_bytes; }

uint64_t ModelConfig::StepWeightBytes() const {
  return (LinearParams() + LmHeadParams()) * dtype_bytes;
}

double ModelConfig::LinearFlopsPerToken() const {
  return 2.0 * static_cast<double>(LinearParams());
}

double ModelConfig::LmHeadFlopsPerToken() const {
  return 2.0 * static_cast<double>(LmHeadParams());
}

double ModelConfig::AttentionFlopsPerPair() const {
  return 4.0 * heads * static_cast<double>(head_dim) * layers;
}

namespace {

// Bounds that catch typos (an extra zero, a width where a count belongs) without excluding any
// real model.
constexpr uint64_t kMaxLayers = 1024;
constexpr uint64_t kMaxWidth = uint64_t{1} << 20;
constexpr uint64_t kMaxHeads = 4096;
constexpr uint64_t kMaxHeadDim = 1024;
constexpr uint64_t kMaxVocab = uint64_t{1} << 24;

uint32_t LineOf(const YAML::Node& node) {
  return node.IsDefined() ? static_cast<uint32_t>(node.Mark().line + 1) : 0;
}

std::string Describe(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return "nothing";
}

// Reads the top-level map field by field, recording problems instead of throwing.
class FieldReader {
 public:
  FieldReader(std::string file, const YAML::Node& map) : file_(std::move(file)), map_(map) {
    std::set<std::string> seen;
    for (const auto& entry : map_) {
      const std::string key = entry.first.Scalar();
      if (!seen.insert(key).second) Add(LineOf(entry.first), key, "duplicate key");
    }
  }

  // The value of `key`, or an undefined node (and a "missing" problem when required).
  YAML::Node Get(const std::string& key, bool required) {
    known_.insert(key);
    for (const auto& entry : map_) {
      if (entry.first.Scalar() == key) return entry.second;
    }
    if (required) Add(LineOf(map_), key, "missing (required)");
    return YAML::Node(YAML::NodeType::Undefined);
  }

  void String(const std::string& key, std::string& out, bool required) {
    const YAML::Node node = Get(key, required);
    if (!node.IsDefined()) return;
    if (!node.IsScalar() || node.Scalar().empty()) {
      Add(LineOf(node), key, "expected a non-empty string, got " + Describe(node));
      return;
    }
    out = node.Scalar();
  }

  void Count(const std::string& key, uint32_t& out, uint64_t max) {
    const YAML::Node node = Get(key, true);
    if (!node.IsDefined()) return;
    const std::string text = node.IsScalar() ? node.Scalar() : std::string();
    int64_t value = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (!node.IsScalar() || ec != std::errc() || ptr != end) {
      Add(LineOf(node), key, "expected an integer, got " + Describe(node));
      return;
    }
    if (value < 1 || static_cast<uint64_t>(value) > max) {
      Add(LineOf(node), key,
          "value " + text + " out of range: must be in [1, " + std::to_string(max) + "]");
      return;
    }
    out = static_cast<uint32_t>(value);
  }

  void Bool(const std::string& key, bool& out) {
    const YAML::Node node = Get(key, true);
    if (!node.IsDefined()) return;
    if (node.IsScalar() && (node.Scalar() == "true" || node.Scalar() == "false")) {
      out = node.Scalar() == "true";
      return;
    }
    Add(LineOf(node), key, "expected true or false, got " + Describe(node));
  }

  void Add(uint32_t line, const std::string& key, std::string message) {
    problems_.push_back({file_, line, key, std::move(message)});
  }

  // Reports the keys no accessor asked for, then hands over every problem.
  [[nodiscard]] std::vector<InputProblem> Finish(const std::string& allowed) {
    for (const auto& entry : map_) {
      const std::string key = entry.first.Scalar();
      if (known_.count(key) == 0) {
        Add(LineOf(entry.first), key, "unknown key (allowed: " + allowed + ")");
      }
    }
    return std::move(problems_);
  }

 private:
  std::string file_;
  YAML::Node map_;
  std::set<std::string> known_;
  std::vector<InputProblem> problems_;
};

}  // namespace

ModelConfig ParseModelConfig(std::string_view yaml_text, const std::string& display_name) {
  YAML::Node doc;
  try {
    doc = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    throw InputError(display_name, static_cast<uint32_t>(e.mark.line + 1), "",
                     "YAML syntax error: " + e.msg);
  }
  if (!doc.IsMap()) {
    throw InputError(display_name, LineOf(doc), "",
                     "a model description is a YAML map of keys, got " + Describe(doc));
  }
  FieldReader reader(display_name, doc);
  ModelConfig model;
  reader.String("name", model.name, true);
  reader.String("source", model.source, true);
  std::string notes;
  reader.String("notes", notes, false);
  reader.Count("layers", model.layers, kMaxLayers);
  reader.Count("hidden", model.hidden, kMaxWidth);
  reader.Count("heads", model.heads, kMaxHeads);
  reader.Count("kv_heads", model.kv_heads, kMaxHeads);
  reader.Count("head_dim", model.head_dim, kMaxHeadDim);
  reader.Count("intermediate", model.intermediate, kMaxWidth);
  reader.Count("vocab", model.vocab, kMaxVocab);
  reader.Bool("tied_embeddings", model.tied_embeddings);

  const YAML::Node dtype = reader.Get("dtype", true);
  if (dtype.IsDefined()) {
    const std::string text = dtype.IsScalar() ? dtype.Scalar() : std::string();
    if (text == "bf16" || text == "fp16") {
      model.dtype_bytes = 2;
    } else if (text == "fp32") {
      model.dtype_bytes = 4;
    } else {
      reader.Add(LineOf(dtype), "dtype", "expected bf16 | fp16 | fp32, got " + Describe(dtype));
    }
  }
  // Grouped-query attention shares each KV head among heads / kv_heads query heads.
  if (model.heads > 0 && model.kv_heads > 0 && model.heads % model.kv_heads != 0) {
    reader.Add(LineOf(reader.Get("kv_heads", false)), "kv_heads",
               "value " + std::to_string(model.kv_heads) + " must divide heads (" +
                   std::to_string(model.heads) + ")");
  }
  std::vector<InputProblem> problems = reader.Finish(
      "name, source, notes, layers, hidden, heads, kv_heads, head_dim, intermediate, vocab, "
      "dtype, tied_embeddings");
  if (!problems.empty()) throw InputError(std::move(problems));
  return model;
}

ModelConfig LoadModelConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, 0, "", "cannot open the model description");
  std::ostringstream text;
  text << in.rdbuf();
  return ParseModelConfig(text.str(), path);
}

}  // namespace feather
