// device_profile.cc: the parameter table of the cost model (names, ranges, meanings) and the
// names of the fitted step-time terms. The YAML reader and writer are
// sim/io/device_profile_yaml.cc.
#include "sim/engine/device_profile.h"

#include <array>

namespace feather {
namespace {

using P = DeviceProfile;

// Ranges: wide enough for any real device, narrow enough to catch a unit slip (GB/s for B/s).
constexpr std::array<ProfileParameterInfo, kNumProfileParameters> kParameters = {{
    {"memory_bytes", &P::memory_bytes, 0, true, 1e15, true, "device memory capacity (bytes)"},
    {"activation_reserve_bytes", &P::activation_reserve_bytes, 0, false, 1e15, true,
     "memory kept for activations, CUDA graphs and workspaces (bytes)"},
    {"dram_bw_bytes_per_s", &P::dram_bw_bytes_per_s, 1e9, false, 1e15, false,
     "peak DRAM (HBM/GDDR) bandwidth (bytes/s)"},
    {"dense_flops_per_s", &P::dense_flops_per_s, 1e9, false, 1e18, false,
     "peak dense 16-bit tensor FLOP/s"},
    {"sm_count", &P::sm_count, 1, false, 1e5, true, "streaming multiprocessors"},
    {"gemm_bw_efficiency", &P::gemm_bw_efficiency, 0, true, 1, false,
     "achieved fraction of the weight-stream bandwidth (weight_stream_bw_bytes_per_s, or DRAM's "
     "where that is 0) when streaming weights"},
    {"gemm_flops_efficiency", &P::gemm_flops_efficiency, 0, true, 1, false,
     "achieved fraction of peak FLOP/s in compute-bound GEMMs"},
    {"attn_bw_efficiency", &P::attn_bw_efficiency, 0, true, 1, false,
     "achieved fraction of DRAM bandwidth in attention KV traffic"},
    {"attn_flops_efficiency", &P::attn_flops_efficiency, 0, true, 1, false,
     "achieved fraction of peak FLOP/s in compute-bound attention"},
    {"l2_bw_bytes_per_s", &P::l2_bw_bytes_per_s, 1e9, false, 1e16, false,
     "effective bandwidth of KV reads served by L2 (bytes/s)"},
    {"reuse_hit_max", &P::reuse_hit_max, 0, false, 1, false,
     "fraction of in-window repeat KV reads that hit L2"},
    {"reuse_window_ctas", &P::reuse_window_ctas, 1, false, 1e7, true,
     "decode-attention CTAs whose reads meet in L2 (the reuse window)"},
    {"cascade_layer_ns", &P::cascade_layer_ns, 0, false, 1e9, false,
     "extra cost of cascade's prefix pass and merge kernels per layer (ns)"},
    {"cascade_merge_ns_per_request_layer", &P::cascade_merge_ns_per_request_layer, 0, false, 1e9,
     false, "cascade merge cost per request and layer (ns)"},
    {"step_fixed_ns", &P::step_fixed_ns, 0, false, 1e12, false, "fixed cost per step (ns)"},
    {"layer_fixed_ns", &P::layer_fixed_ns, 0, false, 1e9, false,
     "fixed cost per layer and step (ns)"},
    {"per_request_ns", &P::per_request_ns, 0, false, 1e9, false, "cost per request and step (ns)"},
    // Last, so that profiles written before it existed keep their layout; optional (absent = 0).
    {"gemm_batched_fixed_ns", &P::gemm_batched_fixed_ns, 0, false, 1e12, false,
     "fixed cost of a linear-layer pass over 2+ tokens (ns; CPU weight repacking)", true},
    // Optional (absent = 0), after it for the same reason.
    {"gemm_roofline_exponent", &P::gemm_roofline_exponent, 0, false, 64, false,
     "exponent k of the gemm roofline's soft maximum (W^k + C^k)^(1/k); 0 = the hard max", true},
    {"decode_cta_fixed_ns", &P::decode_cta_fixed_ns, 0, false, 1e6, false,
     "decode-attention fixed cost per (sequence, KV head, layer) (ns)", true},
    {"gemm_skinny_max_tokens", &P::gemm_skinny_max_tokens, 0, false, 1e6, true,
     "largest step (tokens) whose linear layers run a skinny kernel without repacking; 0 = none",
     true},
    {"gemm_skinny_fixed_ns", &P::gemm_skinny_fixed_ns, 0, false, 1e12, false,
     "fixed cost of a skinny-kernel linear-layer pass beyond the weight stream (ns)", true},
    {"gemm_skinny_ns_per_token", &P::gemm_skinny_ns_per_token, 0, false, 1e12, false,
     "cost per token of a skinny-kernel linear-layer pass (ns)", true},
    // Optional (absent = 0), after them for the same reason.
    {"weight_stream_bw_bytes_per_s", &P::weight_stream_bw_bytes_per_s, 0, false, 1e15, false,
     "read bandwidth of the model's step weights as a working set (bytes/s); 0 = "
     "dram_bw_bytes_per_s",
     true},
    // Optional (absent = 0), after it for the same reason.
    {"prefill_query_fixed_ns", &P::prefill_query_fixed_ns, 0, false, 1e6, false,
     "prefill-attention fixed cost per (prefill query token, query head, layer) (ns)", true},
    {"decode_layer_fixed_ns", &P::decode_layer_fixed_ns, 0, false, 1e9, false,
     "decode-attention fixed cost per layer of a step with decode requests (ns)", true},
}};

constexpr std::array<std::string_view, 5> kFitTermNames = {
    "gemm", "decode_attention", "cascade_prefix", "prefill_attention", "overhead"};

}  // namespace

std::string_view ParameterSourceName(ParameterSource source) {
  switch (source) {
    case ParameterSource::kSpec:
      return "spec";
    case ParameterSource::kAssumed:
      return "assumed";
    case ParameterSource::kMeasured:
      return "measured";
    case ParameterSource::kPublished:
      return "published";
  }
  return "unknown";
}

std::span<const ProfileParameterInfo> ProfileParameters() { return kParameters; }

std::span<const std::string_view> ProfileFitTermNames() { return kFitTermNames; }

}  // namespace feather
