// sglang_batcher.cc: SGLang 0.5.6's new_token_ratio, retraction order and chunked_prefill_size
// (see sglang_batcher.h for the rules and their sources).
#include "sim/serving/sglang_batcher.h"

#include <algorithm>

namespace feather {

int64_t ChunkedPrefillSizeFor(double memory_bytes) {
  const double mib = memory_bytes / (1024.0 * 1024.0);
  if (mib < 35 * 1024) return 2048;   // T4, 4080 (< 20 GiB); A10, 4090, 5090
  if (mib < 60 * 1024) return 4096;   // A100 40GB, L40, RTX 6000 Ada (48 GB)
  if (mib < 160 * 1024) return 8192;  // H100, A100 80GB (< 90 GiB); H20, H200
  return 16384;                       // B200, MI300
}

SglangBatcher::SglangBatcher(const SglangConfig& config)
    : config_(config),
      ratio_(std::min(config.init_new_token_ratio, 1.0)),
      min_ratio_(ratio_ * config.min_new_token_ratio_factor),
      decay_((ratio_ - min_ratio_) / static_cast<double>(config.new_token_ratio_decay_steps)) {}

void SglangBatcher::OnDecodeWithoutRetraction() { ratio_ = std::max(ratio_ - decay_, min_ratio_); }

void SglangBatcher::OnRetraction(uint64_t kept, uint64_t kept_output_tokens,
                                 uint64_t kept_max_new_tokens) {
  const double estimate =
      static_cast<double>(kept_output_tokens + uint64_t{config_.retract_decode_steps} * kept) /
      static_cast<double>(kept_max_new_tokens + 1);
  ratio_ = std::min(1.0, estimate);
  batch_is_full_ = false;
}

void SglangBatcher::RetractionOrder(std::span<SglangRetractCandidate> batch) {
  // Python's sort is stable: equal keys keep their batch order, then reverse=True sorts
  // descending by (output, -prompt) while keeping equal keys in order.
  std::stable_sort(batch.begin(), batch.end(),
                   [](const SglangRetractCandidate& a, const SglangRetractCandidate& b) {
                     if (a.output_tokens != b.output_tokens)
                       return a.output_tokens > b.output_tokens;
                     return a.prompt_tokens < b.prompt_tokens;
                   });
}

}  // namespace feather
