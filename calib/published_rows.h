// published_rows.h: rows for the calibration fit (fit.h) read from measurements this project did
// not make: Vidur's per-operator GPU tables, decode-attention kernel points and cascade speedups
// (../shared/published/README.md, transcribed in results/published/), and the paper's §3
// measurements on the RTX 6000 Ada (results/published/paper-s3-rtx6000-ada.csv).
//
// Published figures are not whole steps. Each is turned into what it pins, and no more:
//
// * A term row (PublishedTermRow): one cost-model term measured for a shape; the other terms and
//   the total are 0, which the fit reads as unknown (a row informs a term only when that term's
//   measured ns is positive, and enters the whole-step error only with a positive total). So the
//   fit uses exactly the term the source measured, with its usual hold-out split and per-term
//   errors; the fitted parameters are marked `source: published` (FitOptions::fitted_source)
//   and their notes name the files.
//
//   (a) Vidur mlp.csv (ParseVidurMlpCsv): one row per (num_tokens, TP degree t), times in
//       milliseconds per layer on one GPU, the median of Vidur's repetitions. The gemm term is
//       attn_pre_proj (QKV) + attn_post_proj (O) + mlp_up_proj (gate and up, fused in Vidur's
//       gated MLP) + mlp_down_proj, converted exactly: ns = round(ms · 1e6). The shape is a step
//       of num_tokens new tokens, one request, no sampled token, stated in the per-GPU shard of
//       one layer: ModelConfig{layers 1, hidden n_embd, heads n_head/t, kv_heads n_kv_head/t,
//       head_dim n_embd/n_head, intermediate n_expanded_embd/t, vocab 0}. vocab 0 because Vidur
//       times no LM head (emb is the embedding gather); layers 1 because the times are per
//       layer: the gemm efficiencies fitted on it are the device's, for any depth. Not mapped:
//       input_layernorm, post_attention_layernorm, attn_rope, mlp_act, add and emb. The cost
//       model does not price elementwise kernels (model_engine.h, "Not modelled"), and no term
//       takes them honestly: overhead is per step and per request, these grow with tokens. The
//       row label gives their sum, so what is left out stays visible.
//   (b) Decode-attention points (ParseDecodePointsCsv, "# feather published-decode-attention
//       v1"): a kernel's time for a batch of `batch` sequences of `context_tokens` on one layer
//       with kv_heads × head_dim, given as time_us or as achieved bytes/s (time = KV bytes read /
//       bandwidth, KV bytes = batch · context · 2 · kv_heads · head_dim · dtype_bytes, which is
//       how both sources count, checked on their pairs of time and bandwidth). The decode term
//       depends on the model only through KV bytes per token, so RestateDecodeRow states the
//       point in the fit model's tokens: T and B scaled by (source KV bytes per token and layer)
//       / (fit model's KV bytes per token). That is exact for the formula, not an approximation.
//
// * A ratio row (RatioRow, "# feather published-ratios v1"): two decode batches A and B and the
//   measured ratio of their per-token time, throughput(B) / throughput(A), about, at least or at
//   most a value (the paper's "nearly 2×", "over 60 % higher", "remains stable" = about 1). A
//   batch is requests, context tokens per request, distinct KV tokens over the batch, and the
//   cascade prefix (0: cascade off). The quantity is the whole decode step or the attention
//   terms only (kernel speedups). Ratio rows are CHECKED against a profile (CheckRatio): the
//   refit prints predicted against measured for every row whose device is the profile's. They
//   are not fitted: what they inform (reuse_hit_max, the window, the cascade costs) would need a
//   joint fit across terms on ratios, which fit.cc does not do (issue 16 item 1, left open).
//
// Every data file row cites its source line (the `source` column). All readers report each bad
// cell as FILE:LINE: COLUMN: message in one InputError (base/input_error.h). O(file size).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sim/engine/model_config.h"
#include "sim/engine/model_engine.h"

namespace feather::calib {

// One term of a shape measured by a published source (see the file comment).
struct PublishedTermRow {
  std::string label;     // e.g. "vidur h100 tp1 tokens=128 (norm/rope/act/add/emb 0.41 ms left out)"
  std::string citation;  // FILE:LINE, and for transcribed rows the source they cite
  std::string device;    // "h100", "a100", ... as the source names it
  uint32_t tensor_parallel = 1;
  ModelConfig model;     // the (per-GPU, one-layer) model the shape is stated in
  MeasuredStep step;     // the pinned term's ns; every other term and total_ns 0
};

// (a) Vidur's mlp.csv; `device` names the GPU (its folder: h100, a100).
[[nodiscard]] std::vector<PublishedTermRow> ParseVidurMlpCsv(std::string_view text,
                                                             const std::string& display_name,
                                                             std::string_view device);
// (b) A decode-attention points file.
[[nodiscard]] std::vector<PublishedTermRow> ParseDecodePointsCsv(std::string_view text,
                                                                 const std::string& display_name);
// A decode-attention row stated in `model`'s KV tokens (exact; see the file comment).
[[nodiscard]] MeasuredStep RestateDecodeRow(const PublishedTermRow& row, const ModelConfig& model);

struct DecodeBatch {
  double requests = 0;
  double context_tokens = 0;         // per request
  double unique_kv_tokens = 0;       // distinct tokens over the batch
  double cascade_prefix_tokens = 0;  // 0: cascade off
};
enum class RatioRelation : uint8_t { kAbout, kAtLeast, kAtMost };
enum class RatioQuantity : uint8_t { kStepTime, kAttentionTime };

struct RatioRow {
  std::string id;
  std::string device;  // a profile name (rtx6000-ada, h100-sxm) or another device
  std::string model;   // a model name of scenarios/models
  RatioQuantity quantity = RatioQuantity::kStepTime;
  DecodeBatch a, b;
  double measured = 0;  // throughput(B) / throughput(A) = (time_A / requests_A) / (time_B / ...)
  RatioRelation relation = RatioRelation::kAbout;
  std::string citation;  // FILE:LINE and the source column
};

// (b), (c) A ratio file.
[[nodiscard]] std::vector<RatioRow> ParseRatioRowsCsv(std::string_view text,
                                                      const std::string& display_name);

// The decode step of a batch: every request decodes one token.
[[nodiscard]] StepShape DecodeShape(const DecodeBatch& batch);

struct RatioCheck {
  double predicted = 0;  // the pricer's ratio
  double rel_error = 0;  // predicted / measured − 1
  bool consistent = false;  // about: |rel_error| <= 0.25; at least / at most: the side holds
};
[[nodiscard]] RatioCheck CheckRatio(const RatioRow& row, const StepPricer& pricer);

// What a rows file holds, from its first line: calibration rows (rows_csv.h, header starting
// "label,"), a Vidur mlp.csv (header has time_stats.attn_pre_proj.median), or one of the two
// magic first lines above. InputError naming line 1 otherwise.
enum class RowsFileKind : uint8_t { kCalibrationRows, kVidurMlp, kDecodePoints, kRatios };
[[nodiscard]] RowsFileKind DetectRowsFileKind(std::string_view text,
                                              const std::string& display_name);

[[nodiscard]] std::string_view RatioRelationName(RatioRelation relation);  // about|at_least|...

}  // namespace feather::calib
