// model_engine.h: the cost model, an Engine that prices a step instead of running it.
//
// ModelEngine turns a BatchPlan into a StepTiming from a ModelConfig (bytes and FLOPs of the
// model) and a DeviceProfile (what the device achieves). Execute is O(requests in the plan), does
// not allocate, and is a pure function of the plan: the same plan gives the same timing (unless
// ModelEngineOptions::step_noise asks for seeded noise, sim/engine/step_noise.h; then the same
// seed and sequence of plans give the same timings).
//
// Notation. n = plan.total_new_tokens(); B = plan.decode_requests; R = plan.num_requests();
// s = tokens that sample = B + number of prefill requests (an upper bound: a prefill chunk that
// does not finish its prompt samples nothing); T, U = decode_kv_tokens, decode_kv_unique_tokens;
// kv = KvBytesPerToken(); a = AttentionFlopsPerPair() = 4·heads·head_dim·layers. Profile fields
// keep their names (sim/engine/device_profile.h). Each term is rounded to whole ns; total = Σ
// terms.
//
// kGemm — roofline of the linear layers, a soft maximum of the weight stream W and the compute C:
//   W = StepWeightBytes / (WeightStreamBw · gemm_bw_efficiency)
//   WeightStreamBw is dram_bw unless the profile measured the weights' own working set
//   (weight_stream_bw_bytes_per_s, sim/engine/device_profile.h: CPUs whose LLC keeps part of
//   the weights from step to step).
//   C = (n · LinearFlopsPerToken + s · LmHeadFlopsPerToken) / (dense_flops · gemm_flops_eff)
//       + [n ≥ 2] · gemm_batched_fixed_ns
//   kGemm = SoftMax(W, C, k) = (W^k + C^k)^(1/k),  k = gemm_roofline_exponent (0: max(W, C))
//   The hard max assumes the weight stream and the math overlap perfectly; near the knee they do
//   not (a GEMM of a few hundred rows streams a weight tile, then computes on it, with too few
//   CTAs to hide one behind the other). Pinned by Vidur's per-operator tables (Llama-2-7B, TP 1,
//   QKV + O + up + down per layer, results/published/vidur and ../shared/published/vidur): on
//   H100 the hard max misses its held-out rows by 11 %, k = 1.22 by 4.8 % (240 tokens: 261 µs
//   measured, W = 141 µs and C = 131 µs apart); on A100 k = 1.69, 3.4 % held out.
//   gemm_batched_fixed_ns is 0 on GPUs. On the CPU it is the weight repacking that Eigen's and
//   OpenBLAS's GEMMs do on every call with 2+ rows (one token goes through GEMV, which streams
//   the weights once): measured on cpu-small, 1 token 8.5 ms, 2 tokens 22 ms, then +0.67 ms a
//   token (results/profiles/cpu-rows.csv). The cpu engine's default since 2026-11-29 packs its
//   weights once (hw/gemm.h PackedB) and repacks nothing: 0 there too, and its rows fit the
//   soft roofline with k ≈ 1.2 (results/validation/issue-21-packed).
//   Flat while the weight stream dominates, then linear in n past the knee
//   n* ≈ StepWeightBytes·dense_flops·gemm_flops_eff / (dram_bw·gemm_bw_eff·2·params).
//   Skinny steps, 2 ≤ n ≤ gemm_skinny_max_tokens (0 on GPUs), replace the roofline:
//     kGemm = W + gemm_skinny_fixed_ns + n · gemm_skinny_ns_per_token
//   A CPU build's skinny kernel (hw/gemm.h) takes these products instead of the repacking
//   library: it walks each weight row once and multiplies it by the n broadcast tokens, so it
//   neither repacks (no gemm_batched_fixed_ns) nor reaches the library's compute rate; the
//   weight stream and the per-token math add up rather than overlap (too little math per byte
//   to hide either). Measured on the Zen 5 VM (tests/hw/gemm_benchmark.cc, BM_GemmStep, one
//   decode step of cpu-small, AVX-512 build): 1 token 3.6 ms (W, Eigen's GEMV), 2 tokens 5.3,
//   4 tokens 6.0-6.7, 8 tokens 7.8-8.9 — a line of ~0.5 ms a token above W + ~0.7 ms, where the
//   repacking product took 10.4-11.7 ms at every n from 2 to 8. n = 1 stays the roofline
//   (GEMV streams W alone), and n above the limit the library's product with its repacking.
//
// Cascade decision — vLLM v1's FlashAttention backend, literally (use_cascade_attention and
// GPUModelRunner's prefix-length clamp):
//   P = min(common_prefix_tokens, min over requests of context_tokens), rounded down to a
//   multiple of block_tokens. No cascade if P < 256 or R < 8. If heads == kv_heads (no GQA) or
//   any request computes more than one token this step, cascade. Otherwise cascade iff
//   ceil(heads·ceil(R/128) / sm_count) · ceil(P/128) <
//   ceil(R·kv_heads·ceil((heads/kv_heads)/128) · ceil(P/128) / sm_count)   (CTA waves).
//   ModelEngineOptions::cascade_attention = false models a vLLM run with it disabled.
//
// kCascadePrefix — one non-causal pass of all n query tokens over the P prefix tokens, then a
// log-sum-exp merge:
//   max( P·kv / (dram_bw · attn_bw_eff),  n·P·a / (dense_flops · attn_flops_eff) )
//   + layers · (cascade_layer_ns + R · cascade_merge_ns_per_request_layer).
//   The prefix is read from DRAM once per step. The pass is priced at full-device rates: vLLM
//   calls it with num_splits = max_num_splits (0 = split the KV as needed to fill the SMs),
//   although its decision heuristic above counts one CTA per (query head, 128-query tile).
//   Break-even against plain decoding. Cascade saves the repeat reads of the prefix (B·P tokens
//   through L2, P·B·kv / l2_bw, or through DRAM when reuse is low) and pays the pass, the fixed
//   cascade_layer_ns and the per-request merge: it wins with long prefixes and many queries, and
//   loses at short prefixes, where the fixed cost dominates. The fixed cost is the
//   implementation's: vLLM's FA3 cascade at prefix 512 and batch 256 takes 0.236 ms a layer
//   against 0.095 ms plain (vllm PR 44397, results/published/cascade-speedups.csv), which pins
//   cascade_layer_ns ≈ 0.21 ms on H100; FlashInfer's own cascade kernel, with far less fixed
//   cost, wins 26× at a 32K prefix (the H100 profile predicts 8.9×: one fixed cost cannot serve
//   both implementations, and feather models vLLM's). TensorRT-LLM's L20 curve (0.52× at prefix
//   128, 8.4× at 1024, 32× at 4096, cascade time flat near 90 µs) shows the same shape on a
//   device no profile describes. On the RTX 6000 Ada the paper's Exp 1 ("nearly 2×" between a
//   homogeneous batch, which vLLM runs with cascade, and one with a single foreign request)
//   drives it to its floor: at 0 the predicted drop is already 2.34 (+17 %) once Exp 6's
//   direction is held, so the rows leave no room for a fixed cascade cost on that device (the
//   joint fit's other parameters considered).
//
// kDecodeAttention and kKvReuse — decode KV reads. Without cascade the reads are (T, U); with
// cascade the prefix moved to kCascadePrefix and the suffix reads are (T − B·P, U − P).
// Of T reads of U distinct tokens (c = T/U readers per token on average), which come from DRAM?
// Flash-decoding runs a window of W = min(B, reuse_window_ctas / kv_heads) requests at a time
// (one CTA per request and KV head); requests in one window stream their KV side by side, so a
// block that several of them read comes from DRAM once and from L2 for the others. Across
// windows L2 has long been overwritten (a window streams far more than L2 holds), so each window
// that holds a reader of a token reads it from DRAM again. With the batch in random order, the
// c readers of a token fall in h = w·(1 − (1 − 1/w)^c) of the w = B/W windows (h = 1 if w ≤ 1),
// and of the c − h repeat reads a fraction reuse_hit_max hits L2:
//   l2_hits     = reuse_hit_max · U · (c − h)
//   dram_tokens = T − l2_hits
//   DRAM time   = (dram_tokens + B) · kv / (dram_bw · attn_bw_eff)   (+B: new KV written)
//   L2 time     = T · kv / l2_bw                                     (every read passes L2)
//   kDecodeAttention = DRAM time + B · kv_heads · layers · decode_cta_fixed_ns
//                      + [B > 0] · layers · decode_layer_fixed_ns
//   kKvReuse         = max(0, L2 time − DRAM time)
// so the two levels overlap: the reads take max(DRAM time, L2 time), a two-level roofline. A
// batch whose repeat reads mostly hit is bound by L2's bandwidth, not by how many distinct
// tokens it has: that is why the paper measures little change from 2 to 20 prefix groups of
// 10K tokens (Exp 3, Takeaway 3) while one request of another prefix among 500 halves decode
// throughput (Exp 1): the homogeneous batch runs vLLM's cascade (the prefix read once, the
// queries batched), the mixed one flash-decoding at L2 speed. l2_bw, reuse_hit_max and the
// window are pinned jointly by the paper's §3 ratios on the RTX 6000 Ada
// (results/published/paper-s3-rtx6000-ada.csv, Exps 1–6 and appendix B.1) and, on H100, by the
// plain side of vLLM's FA3 cascade comparison (prefix 512, batch 256: 0.095 ms a layer, more
// than DRAM alone could deliver; results/published/cascade-speedups.csv).
// The per-CTA fixed cost is pinned by the decode-attention kernel points
// (results/published/h100-decode-attention.csv): FlashAttention-2 paged decode, 64 sequences of
// 8 KV heads, reaches 23 % of H100's bandwidth at 32 tokens and 66 % at 512, and FA3's batch of
// 16 × 32 heads 1.23 TB/s at 128 tokens against 1.85 TB/s at 4,000: time = fixed + bytes / rate.
// Why windows and not "unique KV vs L2 size": the paper (§B.1) finds no throughput drop when
// the whole KV outgrows L2; what matters is the KV that requests running close together in time
// touch. Models without GQA (LongChat-13B: kv_heads = heads = 40) get a 5× narrower window than
// Llama-3-8B (8 KV heads): less locality.
//
// kPrefillAttention — causal attention of each prefill chunk (n_i new tokens after c_i cached
// ones; c_i − P when cascade took the prefix):
//   max( Σ (c_i + 2·n_i)·kv / (dram_bw · attn_bw_eff),   (read context, write and read new KV)
//        Σ n_i·(c_i + (n_i + 1)/2)·a / (dense_flops · attn_flops_eff) )
//   + (n − B) · heads · layers · prefill_query_fixed_ns
//   n − B = Σ n_i is the prefill query tokens (StepShape::prefill_tokens). The last part is each
//   query row's own work outside the pairs (load and scale q, normalize and store the output,
//   the half-empty diagonal tile, the K/V append): a short chunk's cost on the CPU, where a
//   16-token prompt costs eight times what its 136 pairs a head predict (0.22 ms against
//   0.03 ms, results/validation/issue-20-prefill-query); 0 in the GPU profiles.
//
// kOverhead — step_fixed_ns + layers · layer_fixed_ns + R · per_request_ns.
//
// Not modelled: decode-attention FLOPs (≈ heads/kv_heads FLOP per KV byte, far below the
// ridge), elementwise kernels (norms, RoPE, SiLU), GEMM wave quantization (Vidur's rows wobble
// ±5 % around the smooth curve with the token count), the batch's order (the window model
// assumes requests of one prefix are spread at random over the batch; a scheduler that keeps
// them together would see more reuse), and the L2 capacity as such (see above); profile values
// absorb them.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "base/cascade_rule.h"
#include "sim/engine/device_profile.h"
#include "sim/engine/engine.h"
#include "sim/engine/model_config.h"
#include "sim/engine/step_noise.h"

namespace feather {

// vLLM v1 constants of the cascade decision (vllm/v1/attention/backends/flash_attn.py); the
// thresholds live in base/cascade_rule.h.
inline constexpr uint32_t kCascadeTileTokens = 128;  // its q and kv tile sizes

struct ModelEngineOptions {
  bool cascade_attention = true;  // vLLM's --disable-cascade-attn sets this false
  // Step-time noise drawn from the profile's step_noise section (sim/engine/step_noise.h), for
  // validation; off by default, so Execute is a pure function of the plan. When on, the profile
  // must have a step_noise section (the constructor throws std::invalid_argument otherwise).
  bool step_noise = false;
  uint64_t step_noise_seed = 1;
};

// The aggregate quantities of a step that the cost model prices (notation of the file comment),
// after the cascade decision: with cascade, the prefix P has been taken out of the decode and
// prefill sums. ShapeStep computes it from a plan; a real engine records it beside its measured
// times so that calibration (calib/) can fit the profile with StepPricer on the same shapes.
struct StepShape {
  double requests = 0;                 // R
  double decode_requests = 0;          // B
  double prefill_requests = 0;         // requests computing a prompt chunk
  double new_tokens = 0;               // n
  double sampled_tokens = 0;           // s = B + prefill_requests
  double cascade_prefix_tokens = 0;    // P when cascade runs, else 0
  double decode_kv_tokens = 0;         // T − B·P
  double decode_kv_unique_tokens = 0;  // U − P
  double prefill_pairs = 0;            // Σ n_i·(c_i + (n_i + 1)/2) − P·Σ n_i
  double prefill_kv_tokens = 0;        // Σ (c_i + 2·n_i) − P·prefill_requests
  [[nodiscard]] bool cascade() const { return cascade_prefix_tokens > 0; }
  // Σ n_i over the prefill chunks: every decode request computes exactly one new token.
  [[nodiscard]] double prefill_tokens() const {
    return prefill_requests > 0 ? std::max(0.0, new_tokens - decode_requests) : 0.0;
  }
};

// One step a real engine executed: its shape and what each term measured (wall-clock ns). The
// rows calibration fits StepPricer to.
struct MeasuredStep {
  StepShape shape;
  StepTiming measured;
};

// Summarizes a plan and takes vLLM's cascade decision (see the file comment; `sm_count` is the
// profile's, the number of threads for a CPU). O(requests), no allocation.
[[nodiscard]] StepShape ShapeStep(const BatchPlan& plan, const ModelConfig& model,
                                  bool cascade_enabled, uint32_t sm_count);

// Whether the linear layers of a step of `new_tokens` tokens run the profile's skinny kernel
// (2 ≤ n ≤ gemm_skinny_max_tokens), and whether they pay the batched (repacking) fixed cost.
[[nodiscard]] inline bool GemmRunsSkinny(const DeviceProfile& p, double new_tokens) {
  return new_tokens >= 2 && new_tokens <= p.gemm_skinny_max_tokens;
}
[[nodiscard]] inline bool GemmRepacks(const DeviceProfile& p, double new_tokens) {
  return new_tokens >= 2 && !GemmRunsSkinny(p, new_tokens);
}

// Prices shapes with a profile: the formulas of the file comment. Construction folds the profile
// and the model into per-unit costs; Terms is a few multiply-adds and a pow.
//
// Terms is the one place the formulas live: the simulator's Price rounds each term to whole ns,
// the calibration fit (calib/fit.h) differentiates Terms numerically, where rounding would make
// small parameter steps invisible.
class StepPricer {
 public:
  StepPricer(const DeviceProfile& profile, const ModelConfig& model);
  // Each term in ns, unrounded, indexed by StepTerm (all 0 for an empty shape).
  [[nodiscard]] std::array<double, kNumStepTerms> Terms(const StepShape& shape) const;
  // Terms rounded to whole ns; total_ns is the sum of the rounded terms.
  [[nodiscard]] StepTiming Price(const StepShape& shape) const;

 private:
  double weight_stream_ns_ = 0;        // StepWeightBytes through DRAM
  double linear_ns_per_token_ = 0;     // compute-bound linear layers, per token
  double gemm_batched_fixed_ns_ = 0;   // compute side, steps of 2+ tokens
  double lm_head_ns_per_token_ = 0;    // compute-bound LM head, per sampled token
  double skinny_max_tokens_ = 0;       // gemm_skinny_max_tokens
  double skinny_fixed_ns_ = 0;         // W + this + n · skinny_ns_per_token_ for skinny steps
  double skinny_ns_per_token_ = 0;
  double dram_ns_per_kv_token_ = 0;    // one token's KV (all layers) from DRAM
  double l2_ns_per_kv_token_ = 0;      // one token's KV (all layers) from L2
  double attn_ns_per_pair_ = 0;        // one (query, key) pair across all layers, at full rate
  double prefill_ns_per_token_ = 0;    // prefill_query_fixed_ns · heads · layers
  double reuse_window_requests_ = 1;   // reuse_window_ctas / kv_heads, at least 1
  double reuse_hit_max_ = 0;
  double gemm_exponent_ = 0;           // gemm_roofline_exponent (0: the hard max)
  double decode_ns_per_request_ = 0;   // decode_cta_fixed_ns · kv_heads · layers
  double decode_fixed_ns_ = 0;         // decode_layer_fixed_ns · layers, steps with decode
  double cascade_fixed_ns_ = 0;        // layers · cascade_layer_ns
  double cascade_ns_per_request_ = 0;  // layers · cascade_merge_ns_per_request_layer
  double overhead_fixed_ns_ = 0;       // step_fixed_ns + layers · layer_fixed_ns
  double per_request_ns_ = 0;
};

class ModelEngine final : public Engine {
 public:
  ModelEngine(const DeviceProfile& profile, const ModelConfig& model,
              ModelEngineOptions options = {});

  [[nodiscard]] std::string_view Name() const override { return "model"; }
  [[nodiscard]] StepTiming Execute(const BatchPlan& plan) override;
  // The noiseless price: a scheduler's estimate, not an execution (draws no noise).
  [[nodiscard]] std::optional<int64_t> PriceDecodeOnly(const BatchPlan& decode_plan) override {
    return Price(decode_plan).total_ns;
  }
  // The noiseless price of `plan` (what Execute returns without step noise).
  [[nodiscard]] StepTiming Price(const BatchPlan& plan) const;

  [[nodiscard]] const DeviceProfile& profile() const { return profile_; }
  [[nodiscard]] const ModelConfig& model() const { return model_; }

 private:
  DeviceProfile profile_;
  ModelConfig model_;
  ModelEngineOptions options_;
  StepPricer pricer_;
  std::optional<StepNoise> noise_;  // set when options_.step_noise
};

// vLLM's use_cascade_attention for an already clamped common prefix (see the file comment).
// `all_single_token` is true when every request of the step computes exactly one token.
[[nodiscard]] bool VllmUsesCascade(uint32_t common_prefix_tokens, uint32_t num_requests,
                                   bool all_single_token, uint32_t heads, uint32_t kv_heads,
                                   uint32_t sm_count);

// The DRAM / L2 split of `total_tokens` decode KV reads of `unique_tokens` distinct tokens by
// `requests` requests in windows of `window_requests` (see the file comment). O(1).
struct KvReadSplit {
  double dram_tokens = 0;
  double l2_tokens = 0;
};
[[nodiscard]] KvReadSplit SplitKvReads(double total_tokens, double unique_tokens, double requests,
                                       double window_requests, double hit_max);

// The gemm roofline's soft maximum of `a` and `b` >= 0: (a^k + b^k)^(1/k), computed as
// hi·(1 + (lo/hi)^k)^(1/k); k <= 0 gives max(a, b), 0 < k < 1 is read as 1 (the sum). O(1).
[[nodiscard]] double SoftMax(double a, double b, double exponent);

// KV-cache pool size in blocks, as vLLM sizes it:
//   floor((memory_bytes · memory_utilization − WeightBytes − activation_reserve_bytes)
//         / (block_tokens · KvBytesPerToken)).
// Throws std::invalid_argument when that is not positive (the model does not fit) or when
// block_tokens is 0 or memory_utilization is outside (0, 1].
[[nodiscard]] uint64_t KvCacheBlocks(const DeviceProfile& profile, const ModelConfig& model,
                                     uint32_t block_tokens, double memory_utilization);

}  // namespace feather
