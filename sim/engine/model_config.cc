// model_config.cc: derived sizes of a model (parameters, KV bytes, FLOPs per token). The YAML
// loader for model descriptions is sim/io/model_config_yaml.cc.
#include "sim/engine/model_config.h"

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

}  // namespace feather
