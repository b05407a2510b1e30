// model_config.h: the shape of a decoder-only transformer, as the cost model needs it.
//
// A ModelConfig holds the handful of numbers of a Hugging Face config.json that decide how many
// bytes and FLOPs a step costs (layers, widths, heads, vocabulary, dtype). The shipped
// descriptions live in scenarios/models/*.yaml, each citing the config.json it came from.
// Derived quantities are O(1) member functions; the loaders validate every field and report all
// problems of a file in one InputError (base/input_error.h).
//
// Counting conventions (documented once here, used by sim/engine/model_engine.h):
//  - Linear layers per transformer layer: Q (hidden × heads·head_dim), K and V (hidden ×
//    kv_heads·head_dim each), O (heads·head_dim × hidden), and a gated MLP (gate, up: hidden ×
//    intermediate; down: intermediate × hidden). Biases (Qwen2.5's QKV bias) and norms are
//    ignored in FLOPs: they are < 0.1% of the work.
//  - The LM head is vocab × hidden. With tied embeddings it is the embedding matrix itself, so it
//    costs memory once but is still streamed once per step for the logits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace feather {

struct ModelConfig {
  std::string name;    // short name, e.g. "llama-3-8b"
  std::string source;  // where the numbers come from (a config.json URL)
  uint32_t layers = 0;
  uint32_t hidden = 0;
  uint32_t heads = 0;     // query heads
  uint32_t kv_heads = 0;  // key/value heads (== heads without GQA)
  uint32_t head_dim = 0;
  uint32_t intermediate = 0;  // MLP inner width
  uint32_t vocab = 0;
  uint32_t dtype_bytes = 2;  // weights, activations and KV cache (bf16/fp16)
  bool tied_embeddings = false;

  // K and V of one token across all layers: 2 × layers × kv_heads × head_dim × dtype_bytes.
  [[nodiscard]] uint64_t KvBytesPerToken() const;
  // The same for one layer (attention runs layer by layer).
  [[nodiscard]] uint64_t KvBytesPerTokenPerLayer() const;
  // Weights of the linear layers of one transformer layer (QKV, O, gate/up/down), in parameters.
  [[nodiscard]] uint64_t LayerLinearParams() const;
  // Σ over layers of LayerLinearParams (the LM head excluded).
  [[nodiscard]] uint64_t LinearParams() const;
  // vocab × hidden.
  [[nodiscard]] uint64_t LmHeadParams() const;
  // Every parameter that occupies device memory: linear layers, norms, the embedding and, when
  // not tied, the LM head.
  [[nodiscard]] uint64_t TotalParams() const;
  // TotalParams × dtype_bytes: what the weights take in device memory.
  [[nodiscard]] uint64_t WeightBytes() const;
  // (LinearParams + LmHeadParams) × dtype_bytes: the weights a forward step streams from memory
  // (the embedding is a row gather, not a stream).
  [[nodiscard]] uint64_t StepWeightBytes() const;
  // 2 × LinearParams: multiply-adds of the linear layers for one token, LM head excluded.
  [[nodiscard]] double LinearFlopsPerToken() const;
  // 2 × LmHeadParams: the logits of one sampled token.
  [[nodiscard]] double LmHeadFlopsPerToken() const;
  // 4 × heads × head_dim × layers: QKᵀ and PV for one (query, key) pair across all layers.
  [[nodiscard]] double AttentionFlopsPerPair() const;
};

}  // namespace feather
