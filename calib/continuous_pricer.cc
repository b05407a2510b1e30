// continuous_pricer.cc: StepPricer's formulas (sim/model_engine.cc), unrounded.
#include "calib/continuous_pricer.h"

#include <algorithm>

namespace feather::calib {
namespace {
constexpr double kNsPerS = 1e9;
}  // namespace

ContinuousPricer::ContinuousPricer(const DeviceProfile& p, const ModelConfig& model) {
  const double gemm_flops = p.dense_flops_per_s * p.gemm_flops_efficiency;
  const double attn_dram_bw = p.dram_bw_bytes_per_s * p.attn_bw_efficiency;
  const auto kv_bytes = static_cast<double>(model.KvBytesPerToken());
  const double layers = model.layers;
  weight_stream_ns_ = static_cast<double>(model.StepWeightBytes()) * kNsPerS /
                      (p.dram_bw_bytes_per_s * p.gemm_bw_efficiency);
  linear_ns_per_token_ = model.LinearFlopsPerToken() * kNsPerS / gemm_flops;
  lm_head_ns_per_token_ = model.LmHeadFlopsPerToken() * kNsPerS / gemm_flops;
  gemm_batched_fixed_ns_ = p.gemm_batched_fixed_ns;
  dram_ns_per_kv_token_ = kv_bytes * kNsPerS / attn_dram_bw;
  l2_ns_per_kv_token_ = kv_bytes * kNsPerS / p.l2_bw_bytes_per_s;
  attn_ns_per_pair_ =
      model.AttentionFlopsPerPair() * kNsPerS / (p.dense_flops_per_s * p.attn_flops_efficiency);
  reuse_window_requests_ = std::max(1.0, p.reuse_window_ctas / std::max(1u, model.kv_heads));
  reuse_hit_max_ = p.reuse_hit_max;
  cascade_fixed_ns_ = layers * p.cascade_layer_ns;
  cascade_ns_per_request_ = layers * p.cascade_merge_ns_per_request_layer;
  overhead_fixed_ns_ = p.step_fixed_ns + layers * p.layer_fixed_ns;
  per_request_ns_ = p.per_request_ns;
}

std::array<double, kNumStepTerms> ContinuousPricer::Terms(const StepShape& shape) const {
  std::array<double, kNumStepTerms> terms{};
  if (shape.requests <= 0) return terms;
  const double p = shape.cascade_prefix_tokens;
  auto at = [&terms](StepTerm term) -> double& { return terms[static_cast<size_t>(term)]; };
  at(StepTerm::kGemm) = std::max(
      weight_stream_ns_, shape.new_tokens * linear_ns_per_token_ +
                             shape.sampled_tokens * lm_head_ns_per_token_ +
                             (shape.new_tokens >= 2 ? gemm_batched_fixed_ns_ : 0.0));
  if (shape.cascade()) {
    at(StepTerm::kCascadePrefix) =
        std::max(p * dram_ns_per_kv_token_, shape.new_tokens * p * attn_ns_per_pair_) +
        cascade_fixed_ns_ + shape.requests * cascade_ns_per_request_;
  }
  const KvReadSplit split =
      SplitKvReads(shape.decode_kv_tokens, shape.decode_kv_unique_tokens, shape.decode_requests,
                   reuse_window_requests_, reuse_hit_max_);
  at(StepTerm::kDecodeAttention) =
      (split.dram_tokens + shape.decode_requests) * dram_ns_per_kv_token_;
  at(StepTerm::kKvReuse) = split.l2_tokens * l2_ns_per_kv_token_;
  if (shape.prefill_requests > 0) {
    at(StepTerm::kPrefillAttention) = std::max(shape.prefill_kv_tokens * dram_ns_per_kv_token_,
                                               shape.prefill_pairs * attn_ns_per_pair_);
  }
  at(StepTerm::kOverhead) = overhead_fixed_ns_ + shape.requests * per_request_ns_;
  return terms;
}

}  // namespace feather::calib
