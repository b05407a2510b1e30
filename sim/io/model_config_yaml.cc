// model_config_yaml.cc: the validating YAML reader for model descriptions.
//
// The loader reads every field before it throws, so one InputError lists every problem of the
// file (missing, mistyped, out of range, unknown or duplicate keys), each with its 1-based line.
#include "sim/io/model_config_yaml.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "base/input_error.h"
#include "sim/io/yaml_map_reader.h"

namespace feather {

namespace {

// Bounds that catch typos (an extra zero, a width where a count belongs) without excluding any
// real model.
constexpr uint64_t kMaxLayers = 1024;
constexpr uint64_t kMaxWidth = uint64_t{1} << 20;
constexpr uint64_t kMaxHeads = 4096;
constexpr uint64_t kMaxHeadDim = 1024;
constexpr uint64_t kMaxVocab = uint64_t{1} << 24;

}  // namespace

ModelConfig ParseModelConfig(std::string_view yaml_text, const std::string& display_name) {
  const YAML::Node doc = ParseYaml(yaml_text, display_name);
  if (doc.IsNull()) {  // an empty file, or only comments
    throw InputError(
        display_name, 1, "name",
        "missing (required): the file is empty; a model description is a YAML map with "
        "name, source, layers, hidden, heads, kv_heads, head_dim, intermediate, vocab, "
        "tied_embeddings and dtype");
  }
  if (!doc.IsMap()) {
    throw InputError(display_name, std::max<uint32_t>(LineOf(doc), 1), "",
                     "a model description is a YAML map of keys, got " + Describe(doc));
  }
  YamlProblems problems(display_name);
  ModelConfig model;
  MapReader reader(problems, doc, "");
  reader.String("name", model.name, true);
  reader.String("source", model.source, true);
  std::string notes;
  reader.String("notes", notes, false);
  reader.Integer("layers", model.layers, 1, static_cast<int64_t>(kMaxLayers), true);
  reader.Integer("hidden", model.hidden, 1, static_cast<int64_t>(kMaxWidth), true);
  reader.Integer("heads", model.heads, 1, static_cast<int64_t>(kMaxHeads), true);
  reader.Integer("kv_heads", model.kv_heads, 1, static_cast<int64_t>(kMaxHeads), true);
  reader.Integer("head_dim", model.head_dim, 1, static_cast<int64_t>(kMaxHeadDim), true);
  reader.Integer("intermediate", model.intermediate, 1, static_cast<int64_t>(kMaxWidth), true);
  reader.Integer("vocab", model.vocab, 1, static_cast<int64_t>(kMaxVocab), true);
  reader.Bool("tied_embeddings", model.tied_embeddings, true);

  const YAML::Node dtype = reader.Value("dtype", true);
  if (dtype.IsDefined()) {
    const std::string text = dtype.IsScalar() ? dtype.Scalar() : std::string();
    if (text == "bf16" || text == "fp16") {
      model.dtype_bytes = 2;
    } else if (text == "fp32") {
      model.dtype_bytes = 4;
    } else {
      reader.Add(dtype, "dtype", "expected bf16 | fp16 | fp32, got " + Describe(dtype));
    }
  }
  // Grouped-query attention shares each KV head among heads / kv_heads query heads.
  if (model.heads > 0 && model.kv_heads > 0 && model.heads % model.kv_heads != 0) {
    reader.Add(reader.Value("kv_heads"), "kv_heads",
               "value " + std::to_string(model.kv_heads) + " must divide heads (" +
                   std::to_string(model.heads) + ")");
  }
  reader.Finish();
  if (!problems.empty()) throw InputError(problems.Take());
  return model;
}

ModelConfig LoadModelConfig(const std::string& path) {
  return ParseModelConfig(ReadTextFile(path, "model description"), path);
}

}  // namespace feather
