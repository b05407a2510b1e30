// model_engine.cc: the step-time cost model (formulas documented in model_engine.h).
#include "sim/engine/model_engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace feather {
namespace {

constexpr double kNsPerS = 1e9;

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

int64_t RoundNs(double ns) { return static_cast<int64_t>(std::llround(ns)); }

}  // namespace

double SoftMax(double a, double b, double exponent) {
  const double hi = std::max(a, b);
  const double lo = std::min(a, b);
  if (exponent <= 0 || hi <= 0) return hi;
  const double k = std::max(exponent, 1.0);
  return hi * std::pow(1 + std::pow(lo / hi, k), 1 / k);
}

namespace {

}  // namespace

bool VllmUsesCascade(uint32_t common_prefix_tokens, uint32_t num_requests, bool all_single_token,
                     uint32_t heads, uint32_t kv_heads, uint32_t sm_count) {
  if (common_prefix_tokens < kCascadeMinPrefixTokens) return false;
  if (num_requests < kCascadeMinRequests) return false;
  const uint64_t queries_per_kv = kv_heads == 0 ? 1 : heads / kv_heads;
  // Flash-decoding is what plain attention would use: GQA and one query token per request.
  const bool flash_decoding = queries_per_kv > 1 && all_single_token;
  if (!flash_decoding) return true;
  const uint64_t sms = std::max<uint32_t>(sm_count, 1);
  const uint64_t prefix_tiles = CeilDiv(common_prefix_tokens, kCascadeTileTokens);
  const uint64_t cascade_ctas = uint64_t{heads} * CeilDiv(num_requests, kCascadeTileTokens);
  const uint64_t cascade_time = CeilDiv(cascade_ctas, sms) * prefix_tiles;
  const uint64_t decoding_ctas = uint64_t{num_requests} * kv_heads *
                                 CeilDiv(queries_per_kv, kCascadeTileTokens) * prefix_tiles;
  const uint64_t decoding_time = CeilDiv(decoding_ctas, sms);
  return cascade_time < decoding_time;
}

KvReadSplit SplitKvReads(double total_tokens, double unique_tokens, double requests,
                         double window_requests, double hit_max) {
  KvReadSplit split;
  if (total_tokens <= 0) return split;
  // U > T or U = 0 cannot come from a consistent plan; read it as "nothing shared".
  if (unique_tokens <= 0 || unique_tokens > total_tokens) unique_tokens = total_tokens;
  split.dram_tokens = total_tokens;
  if (requests <= 1) return split;
  const double readers = total_tokens / unique_tokens;  // c
  const double window = std::clamp(window_requests, 1.0, requests);
  const double windows = requests / window;  // w
  double dram_reads = 1;                     // h: windows holding a reader of a token
  if (windows > 1) dram_reads = windows * (1 - std::pow(1 - 1 / windows, readers));
  dram_reads = std::clamp(dram_reads, 1.0, readers);
  split.l2_tokens = hit_max * unique_tokens * (readers - dram_reads);
  split.dram_tokens = total_tokens - split.l2_tokens;
  return split;
}

StepShape ShapeStep(const BatchPlan& plan, const ModelConfig& model, bool cascade_enabled,
                    uint32_t sm_count) {
  StepShape shape;
  const uint32_t num_requests = plan.num_requests();
  if (num_requests == 0) return shape;

  // One pass: the cascade clamp, flash-decoding eligibility and the prefill sums.
  uint32_t min_context = std::numeric_limits<uint32_t>::max();
  bool all_single_token = true;
  double prefill_pairs = 0;    // Σ n_i·(c_i + (n_i + 1)/2)
  double prefill_context = 0;  // Σ c_i
  double prefill_new = 0;      // Σ n_i
  for (const StepRequest& r : plan.requests) {
    min_context = std::min(min_context, r.context_tokens);
    all_single_token = all_single_token && r.new_tokens == 1;
    if (!r.is_prefill) continue;
    shape.prefill_requests += 1;
    const double n = r.new_tokens;
    const double c = r.context_tokens;
    prefill_pairs += n * (c + (n + 1) / 2);
    prefill_context += c;
    prefill_new += n;
  }

  uint32_t prefix = std::min(plan.common_prefix_tokens, min_context);
  if (plan.block_tokens > 0) prefix -= prefix % plan.block_tokens;
  const bool cascade = cascade_enabled && VllmUsesCascade(prefix, num_requests, all_single_token,
                                                          model.heads, model.kv_heads, sm_count);
  const double p = cascade ? prefix : 0;

  shape.requests = num_requests;
  shape.decode_requests = plan.decode_requests;
  shape.new_tokens = static_cast<double>(plan.total_new_tokens());
  shape.sampled_tokens = shape.decode_requests + shape.prefill_requests;
  shape.cascade_prefix_tokens = p;
  shape.decode_kv_tokens = static_cast<double>(plan.decode_kv_tokens);
  shape.decode_kv_unique_tokens = static_cast<double>(plan.decode_kv_unique_tokens);
  if (cascade && plan.decode_requests > 0) {
    shape.decode_kv_tokens = std::max(0.0, shape.decode_kv_tokens - shape.decode_requests * p);
    shape.decode_kv_unique_tokens = std::max(0.0, shape.decode_kv_unique_tokens - p);
  }
  if (shape.prefill_requests > 0) {
    shape.prefill_pairs = prefill_pairs - prefill_new * p;
    shape.prefill_kv_tokens = prefill_context - shape.prefill_requests * p + 2 * prefill_new;
  }
  return shape;
}

StepPricer::StepPricer(const DeviceProfile& p, const ModelConfig& model) {
  const double gemm_flops = p.dense_flops_per_s * p.gemm_flops_efficiency;
  const double attn_dram_bw = p.dram_bw_bytes_per_s * p.attn_bw_efficiency;
  const auto kv_bytes = static_cast<double>(model.KvBytesPerToken());
  const double layers = model.layers;
  weight_stream_ns_ = static_cast<double>(model.StepWeightBytes()) * kNsPerS /
                      (WeightStreamBw(p) * p.gemm_bw_efficiency);
  linear_ns_per_token_ = model.LinearFlopsPerToken() * kNsPerS / gemm_flops;
  lm_head_ns_per_token_ = model.LmHeadFlopsPerToken() * kNsPerS / gemm_flops;
  gemm_batched_fixed_ns_ = p.gemm_batched_fixed_ns;
  skinny_max_tokens_ = p.gemm_skinny_max_tokens;
  skinny_fixed_ns_ = p.gemm_skinny_fixed_ns;
  skinny_ns_per_token_ = p.gemm_skinny_ns_per_token;
  dram_ns_per_kv_token_ = kv_bytes * kNsPerS / attn_dram_bw;
  l2_ns_per_kv_token_ = kv_bytes * kNsPerS / p.l2_bw_bytes_per_s;
  attn_ns_per_pair_ =
      model.AttentionFlopsPerPair() * kNsPerS / (p.dense_flops_per_s * p.attn_flops_efficiency);
  prefill_ns_per_token_ = p.prefill_query_fixed_ns * model.heads * layers;
  reuse_window_requests_ = std::max(1.0, p.reuse_window_ctas / std::max(1u, model.kv_heads));
  reuse_hit_max_ = p.reuse_hit_max;
  gemm_exponent_ = p.gemm_roofline_exponent;
  decode_ns_per_request_ = p.decode_cta_fixed_ns * std::max(1u, model.kv_heads) * layers;
  decode_fixed_ns_ = p.decode_layer_fixed_ns * layers;
  cascade_fixed_ns_ = layers * p.cascade_layer_ns;
  cascade_ns_per_request_ = layers * p.cascade_merge_ns_per_request_layer;
  overhead_fixed_ns_ = p.step_fixed_ns + layers * p.layer_fixed_ns;
  per_request_ns_ = p.per_request_ns;
}

std::array<double, kNumStepTerms> StepPricer::Terms(const StepShape& shape) const {
  std::array<double, kNumStepTerms> terms{};
  if (shape.requests <= 0) return terms;
  const double p = shape.cascade_prefix_tokens;
  auto at = [&terms](StepTerm term) -> double& { return terms[static_cast<size_t>(term)]; };

  // Linear layers: the skinny kernel's line, or the roofline (with repacking from 2 tokens).
  const double n = shape.new_tokens;
  if (n >= 2 && n <= skinny_max_tokens_) {
    at(StepTerm::kGemm) = weight_stream_ns_ + skinny_fixed_ns_ + n * skinny_ns_per_token_;
  } else {
    at(StepTerm::kGemm) =
        SoftMax(weight_stream_ns_,
                n * linear_ns_per_token_ + shape.sampled_tokens * lm_head_ns_per_token_ +
                    (n >= 2 ? gemm_batched_fixed_ns_ : 0.0),
                gemm_exponent_);
  }

  // Cascade's shared-prefix pass.
  if (shape.cascade()) {
    at(StepTerm::kCascadePrefix) =
        std::max(p * dram_ns_per_kv_token_, shape.new_tokens * p * attn_ns_per_pair_) +
        cascade_fixed_ns_ + shape.requests * cascade_ns_per_request_;
  }

  // Decode reads (the suffix part under cascade).
  const KvReadSplit split =
      SplitKvReads(shape.decode_kv_tokens, shape.decode_kv_unique_tokens, shape.decode_requests,
                   reuse_window_requests_, reuse_hit_max_);
  const double dram_ns = (split.dram_tokens + shape.decode_requests) * dram_ns_per_kv_token_;
  const double l2_ns = shape.decode_kv_tokens * l2_ns_per_kv_token_;
  at(StepTerm::kDecodeAttention) = dram_ns + shape.decode_requests * decode_ns_per_request_ +
                                    (shape.decode_requests > 0 ? decode_fixed_ns_ : 0.0);
  at(StepTerm::kKvReuse) = std::max(0.0, l2_ns - dram_ns);

  // Prefill chunks against their context (minus the prefix cascade already covered).
  if (shape.prefill_requests > 0) {
    at(StepTerm::kPrefillAttention) = std::max(shape.prefill_kv_tokens * dram_ns_per_kv_token_,
                                               shape.prefill_pairs * attn_ns_per_pair_) +
                                      shape.prefill_tokens() * prefill_ns_per_token_;
  }

  at(StepTerm::kOverhead) = overhead_fixed_ns_ + shape.requests * per_request_ns_;
  return terms;
}

StepTiming StepPricer::Price(const StepShape& shape) const {
  StepTiming timing;
  if (shape.requests <= 0) return timing;
  const std::array<double, kNumStepTerms> terms = Terms(shape);
  for (size_t term = 0; term < kNumStepTerms; ++term) {
    const int64_t rounded = RoundNs(terms[term]);
    timing.term_ns[term] = rounded;
    timing.total_ns += rounded;
  }
  timing.cascade_used = shape.cascade();
  return timing;
}

// Const references, as the serving loop's API has them; the copies are made once per run.
ModelEngine::ModelEngine(const DeviceProfile& profile,  // NOLINT(modernize-pass-by-value)
                         const ModelConfig& model,      // NOLINT(modernize-pass-by-value)
                         ModelEngineOptions options)
    : profile_(profile), model_(model), options_(options), pricer_(profile_, model_) {
  if (options_.step_noise) {
    if (!profile_.step_noise) {
      throw std::invalid_argument(
          "step_noise.enabled: profile '" + profile_.name +
          "' has no step_noise section (a calibration writes it: feather calibrate --target cpu)");
    }
    noise_.emplace(StepNoiseCv(*profile_.step_noise), options_.step_noise_seed,
                   StepNoiseDrift(*profile_.step_noise));
  }
}

StepTiming ModelEngine::Price(const BatchPlan& plan) const {
  return pricer_.Price(ShapeStep(plan, model_, options_.cascade_attention,
                                 static_cast<uint32_t>(profile_.sm_count)));
}

StepTiming ModelEngine::Execute(const BatchPlan& plan) {
  const StepTiming timing = Price(plan);
  return noise_ ? noise_->Apply(timing) : timing;
}

uint64_t KvCacheBlocks(const DeviceProfile& profile, const ModelConfig& model,
                       uint32_t block_tokens, double memory_utilization) {
  if (block_tokens == 0) throw std::invalid_argument("KV block size must be at least 1 token");
  if (!(memory_utilization > 0 && memory_utilization <= 1)) {
    throw std::invalid_argument("memory utilization must be in (0, 1], got " +
                                std::to_string(memory_utilization));
  }
  const auto weights = static_cast<double>(model.WeightBytes());
  const double available =
      profile.memory_bytes * memory_utilization - weights - profile.activation_reserve_bytes;
  const double block_bytes =
      static_cast<double>(block_tokens) * static_cast<double>(model.KvBytesPerToken());
  const double blocks = block_bytes > 0 ? std::floor(available / block_bytes) : 0;
  if (!(blocks >= 1)) {
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    throw std::invalid_argument(
        "model '" + model.name + "' does not fit on '" + profile.name +
        "': " + std::to_string(profile.memory_bytes * memory_utilization / kGiB) + " GiB usable (" +
        std::to_string(memory_utilization) + " of memory) minus " + std::to_string(weights / kGiB) +
        " GiB of weights and " + std::to_string(profile.activation_reserve_bytes / kGiB) +
        " GiB of activation reserve leaves no room for one KV block");
  }
  return static_cast<uint64_t>(blocks);
}

}  // namespace feather
