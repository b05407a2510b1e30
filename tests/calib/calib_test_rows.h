// calib_test_rows.h: synthetic calibration rows for the calib/ tests — shapes of decode batches
// (varied size, context and prefix sharing, with and without cascade), cascade batches, prefill
// chunks and mixed steps, priced by StepPricer with a known profile and perturbed by seeded
// multiplicative noise, the way a real engine's rows would scatter around the model.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "sim/engine/device_profile.h"
#include "sim/engine/engine.h"
#include "sim/engine/model_config.h"
#include "sim/engine/model_engine.h"

namespace feather::calib::testing {

// A model scaled down the way the CPU engine runs one (fp32, GQA 8:2).
inline ModelConfig TinyModel() {
  ModelConfig m;
  m.name = "tiny";
  m.source = "test";
  m.layers = 4;
  m.hidden = 256;
  m.heads = 8;
  m.kv_heads = 2;
  m.head_dim = 32;
  m.intermediate = 768;
  m.vocab = 2000;
  m.dtype_bytes = 4;
  return m;
}

// A CPU-like truth: 20 GB/s DRAM, 200 GFLOP/s, 8 threads.
inline DeviceProfile TruthProfile() {
  DeviceProfile p;
  p.name = "truth";
  p.device = "test CPU";
  p.provenance = {"synthetic"};
  p.memory_bytes = 64.0 * (1u << 30);
  p.activation_reserve_bytes = 0;
  p.dram_bw_bytes_per_s = 20e9;
  p.dense_flops_per_s = 200e9;
  p.sm_count = 8;
  p.gemm_bw_efficiency = 0.7;
  p.gemm_flops_efficiency = 0.6;
  p.attn_bw_efficiency = 0.5;
  p.attn_flops_efficiency = 0.3;
  p.l2_bw_bytes_per_s = 100e9;
  p.reuse_hit_max = 0.6;
  p.reuse_window_ctas = 16;  // 8 requests of 2 KV heads
  p.cascade_layer_ns = 50'000;
  p.cascade_merge_ns_per_request_layer = 1'000;
  p.step_fixed_ns = 50'000;
  p.layer_fixed_ns = 5'000;  // step_fixed_ns absorbs it: 70'000 is what a fit can see
  p.per_request_ns = 2'000;
  for (size_t i = 0; i < kNumProfileParameters; ++i) {
    p.origins[i] = {i < 5 ? ParameterSource::kMeasured : ParameterSource::kAssumed, "truth"};
  }
  return p;
}

// The truth perturbed: every efficiency, rate and overhead off by a factor, l2 kept (a probe).
inline DeviceProfile PerturbedBase() {
  DeviceProfile p = TruthProfile();
  p.name = "base";
  p.gemm_bw_efficiency = 0.35;
  p.gemm_flops_efficiency = 0.95;
  p.attn_bw_efficiency = 0.9;
  p.attn_flops_efficiency = 0.8;
  p.reuse_hit_max = 0.2;
  p.reuse_window_ctas = 1136;
  p.cascade_layer_ns = 8'000;
  p.cascade_merge_ns_per_request_layer = 30;
  p.step_fixed_ns = 1'000'000;
  p.layer_fixed_ns = 10'000;
  p.per_request_ns = 5'000;
  for (size_t i = 5; i < kNumProfileParameters; ++i) p.origins[i].note = "assumed base";
  return p;
}

struct RowMix {
  int decode = 200;     // plain decode batches (cascade disabled: L2 reuse path)
  int cascade = 80;     // one shared prefix, cascade enabled
  int prefill = 80;     // prefill chunks only
  int mixed = 60;       // decode batch of several groups + one prefill chunk
  int single = 0;       // one decode request (a one-token linear-layer pass: GEMV on a CPU)
  double noise = 0.02;  // measured = priced · (1 + U(−noise, noise)), per term
  uint64_t seed = 7;
};

// One request of a synthetic step.
struct SyntheticRequest {
  uint32_t context = 0;
  uint32_t new_tokens = 1;
  bool prefill = false;
};

// The shape ShapeStep gives a step of `requests` where decode requests in group g share the
// first `prefix` tokens of group g (distinct physical blocks across groups).
inline StepShape ShapeOf(const std::vector<SyntheticRequest>& requests,
                         const std::vector<int>& group, uint32_t prefix, bool cascade,
                         const ModelConfig& model) {
  std::vector<StepRequest> steps;
  BatchPlan plan;
  uint64_t unique = 0;
  std::vector<int> groups_seen;
  bool shared_by_all = true;
  for (size_t i = 0; i < requests.size(); ++i) {
    const SyntheticRequest& r = requests[i];
    StepRequest s;
    s.id = static_cast<RequestId>(i);
    s.context_tokens = r.context;
    s.new_tokens = r.new_tokens;
    s.is_prefill = r.prefill;
    steps.push_back(s);
    if (r.prefill) {
      plan.prefill_tokens += r.new_tokens;
      shared_by_all = false;
      continue;
    }
    plan.decode_requests += 1;
    plan.decode_kv_tokens += uint64_t{r.context} + 1;
    const bool seen =
        std::find(groups_seen.begin(), groups_seen.end(), group[i]) != groups_seen.end();
    if (!seen) {
      groups_seen.push_back(group[i]);
      unique += prefix;
    }
    unique += r.context - prefix + 1;
  }
  if (groups_seen.size() != 1) shared_by_all = false;
  plan.requests = steps;
  plan.block_tokens = 16;
  plan.decode_kv_unique_tokens = unique;
  plan.common_prefix_tokens = shared_by_all ? prefix : 0;
  return ShapeStep(plan, model, cascade, 8);
}

// Rows priced by `truth`, noisy, in a fixed shuffled order (so every kind lands in the holdout).
inline std::vector<MeasuredStep> MakeRows(const DeviceProfile& truth, const ModelConfig& model,
                                          const RowMix& mix) {
  std::mt19937_64 rng(mix.seed);
  auto uniform_int = [&rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  std::vector<StepShape> shapes;
  auto decode_batch = [&](int batch, int groups, uint32_t prefix, bool cascade,
                          int prefill_chunks) {
    std::vector<SyntheticRequest> requests;
    std::vector<int> group;
    for (int i = 0; i < batch; ++i) {
      const auto suffix = static_cast<uint32_t>(uniform_int(16, 256));
      requests.push_back({prefix + suffix, 1, false});
      group.push_back(i % groups);
    }
    for (int c = 0; c < prefill_chunks; ++c) {
      requests.push_back({static_cast<uint32_t>(uniform_int(0, 1024)),
                          static_cast<uint32_t>(uniform_int(32, 512)), true});
      group.push_back(-1);
    }
    shapes.push_back(ShapeOf(requests, group, prefix, cascade, model));
  };
  const int group_choices[] = {1, 2, 4, 8, 64};
  for (int i = 0; i < mix.decode; ++i) {
    const int batch = uniform_int(1, 64);
    const int groups = std::min(batch, group_choices[uniform_int(0, 4)]);
    decode_batch(batch, groups, static_cast<uint32_t>(uniform_int(8, 96) * 16), false, 0);
  }
  for (int i = 0; i < mix.cascade; ++i) {
    decode_batch(uniform_int(8, 64), 1, static_cast<uint32_t>(uniform_int(16, 64) * 16), true, 0);
  }
  for (int i = 0; i < mix.prefill; ++i) decode_batch(0, 1, 0, true, uniform_int(1, 4));
  for (int i = 0; i < mix.mixed; ++i) {
    const int batch = uniform_int(2, 32);
    decode_batch(batch, std::min(batch, 2 + uniform_int(0, 6)),
                 static_cast<uint32_t>(uniform_int(8, 64) * 16), true, 1);
  }
  for (int i = 0; i < mix.single; ++i) {
    decode_batch(1, 1, static_cast<uint32_t>(uniform_int(8, 96) * 16), false, 0);
  }
  std::shuffle(shapes.begin(), shapes.end(), rng);

  const StepPricer pricer(truth, model);
  std::uniform_real_distribution<double> noise(-mix.noise, mix.noise);
  std::vector<MeasuredStep> rows;
  for (const StepShape& shape : shapes) {
    MeasuredStep row;
    row.shape = shape;
    StepTiming priced = pricer.Price(shape);
    // A CPU engine times L2 reuse inside decode attention.
    priced.term_ns[static_cast<size_t>(StepTerm::kDecodeAttention)] +=
        priced.term(StepTerm::kKvReuse);
    priced.term_ns[static_cast<size_t>(StepTerm::kKvReuse)] = 0;
    for (size_t t = 0; t < kNumStepTerms; ++t) {
      const double ns = static_cast<double>(priced.term_ns[t]) * (1 + noise(rng));
      row.measured.term_ns[t] = std::llround(ns);
      row.measured.total_ns += row.measured.term_ns[t];
    }
    row.measured.cascade_used = priced.cascade_used;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace feather::calib::testing
