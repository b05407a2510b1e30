// cpu_calibration.cc: the calibration grid, probes, base profile and CPU measurement (see
// cpu_calibration.h).
#include "calib/cpu_calibration.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "calib/harness.h"
#include "hw/attention_internal.h"
#include "hw/cpu_engine.h"

namespace feather::calib {
namespace {

std::string Label(const char* kind, const hw::SyntheticBatchSpec& s, bool cascade) {
  std::ostringstream out;
  out << kind << " B=" << s.decode_requests << " G=" << s.groups << " P=" << s.shared_prefix_tokens
      << " S=" << s.suffix_tokens << " prefill=" << s.prefill_requests << "x"
      << s.prefill_chunk_tokens << "@" << s.prefill_context_tokens
      << (s.shuffle ? " shuffled" : "") << (cascade ? "" : " no-cascade");
  return out.str();
}

hw::SyntheticBatchSpec Decode(uint32_t requests, uint32_t groups, uint32_t prefix,
                              uint32_t suffix, bool shuffle, uint64_t seed) {
  hw::SyntheticBatchSpec spec;
  spec.decode_requests = requests;
  spec.groups = groups;
  spec.shared_prefix_tokens = groups > 0 ? prefix : 0;
  spec.suffix_tokens = suffix;
  spec.suffix_jitter_tokens = suffix / 4;
  spec.shuffle = shuffle;
  spec.seed = seed;
  return spec;
}

// The calibration grid. Quick mode keeps every kind of step but fewer sizes. The order
// interleaves kinds so that the held-out rows (every 5th) cover all of them.
}  // namespace

std::vector<GridPoint> CalibrationGrid(bool quick) {
  std::vector<GridPoint> points;
  uint64_t seed = 1;
  auto add = [&](const char* kind, hw::SyntheticBatchSpec spec, bool cascade) {
    spec.seed = seed++;
    points.push_back({spec, cascade, Label(kind, spec, cascade)});
  };
  const std::vector<uint32_t> batch = quick ? std::vector<uint32_t>{1, 4, 16, 64, 128}
                                            : std::vector<uint32_t>{1, 2, 4, 8, 16, 32, 64, 96, 128};
  const std::vector<uint32_t> private_context =
      quick ? std::vector<uint32_t>{128, 1024} : std::vector<uint32_t>{64, 256, 1024, 2048};
  const std::vector<uint32_t> groups =
      quick ? std::vector<uint32_t>{1, 5, 20} : std::vector<uint32_t>{1, 2, 5, 10, 20};
  const std::vector<uint32_t> prefixes =
      quick ? std::vector<uint32_t>{1024} : std::vector<uint32_t>{256, 1024};
  const std::vector<uint32_t> suffixes =
      quick ? std::vector<uint32_t>{32} : std::vector<uint32_t>{32, 256};
  for (const uint32_t b : batch) {
    for (const uint32_t context : private_context) {
      add("decode", Decode(b, 0, 0, context, false, 0), true);
    }
    for (const uint32_t g : groups) {
      if (g > b) continue;
      for (const uint32_t prefix : prefixes) {
        for (const uint32_t suffix : suffixes) {
          add("decode", Decode(b, g, prefix, suffix, g > 1, 0), true);
          if (g == 1 && b >= 8) add("decode", Decode(b, g, prefix, suffix, false, 0), false);
        }
      }
    }
  }
  const std::vector<uint32_t> chunks =
      quick ? std::vector<uint32_t>{16, 256, 1024} : std::vector<uint32_t>{16, 64, 256, 512, 1024, 2048};
  const std::vector<uint32_t> contexts =
      quick ? std::vector<uint32_t>{0, 1024} : std::vector<uint32_t>{0, 512, 2048};
  const std::vector<uint32_t> prefill_requests =
      quick ? std::vector<uint32_t>{1, 2} : std::vector<uint32_t>{1, 2, 4};
  for (const uint32_t r : prefill_requests) {
    for (const uint32_t chunk : chunks) {
      if (chunk * r > 4096) continue;
      for (const uint32_t context : contexts) {
        hw::SyntheticBatchSpec spec;
        spec.prefill_requests = r;
        spec.prefill_chunk_tokens = chunk;
        spec.prefill_context_tokens = context;
        add("prefill", spec, true);
      }
    }
  }
  const std::vector<uint32_t> mixed_batch =
      quick ? std::vector<uint32_t>{32} : std::vector<uint32_t>{8, 32, 96};
  for (const uint32_t b : mixed_batch) {
    for (const uint32_t chunk : {32u, 512u}) {
      hw::SyntheticBatchSpec spec = Decode(b, 5, 1024, 32, true, 0);
      spec.prefill_requests = 1;
      spec.prefill_chunk_tokens = chunk;
      spec.prefill_context_tokens = 1024;
      spec.prefill_shares_prefix = true;
      add("mixed", spec, true);
    }
  }
  // Interleave kinds: a fixed stride permutation (coprime with the size) spreads neighbours.
  std::vector<GridPoint> mixed;
  mixed.reserve(points.size());
  const size_t n = points.size();
  size_t stride = 7;
  while (std::gcd(stride, n) != 1) ++stride;
  for (size_t i = 0; i < n; ++i) mixed.push_back(std::move(points[(i * stride) % n]));
  return mixed;
}

size_t DramProbeBytes(size_t llc_bytes) {
  return std::max(hw::BandwidthOptions{}.array_bytes, 8 * llc_bytes);
}

namespace {

hw::BandwidthOptions DramProbeOptions(int threads, size_t llc_bytes) {
  hw::BandwidthOptions dram;
  dram.array_bytes = DramProbeBytes(llc_bytes);
  dram.num_threads = threads;
  return dram;
}

// The weight probe: the DRAM probe's threads, one array of the weights' size read as
// kWeightProbeStreams streams a thread, enough repetitions that the best one reads the array
// warm, as steady decoding does.
hw::BandwidthOptions WeightProbeOptions(const hw::BandwidthOptions& dram, size_t weight_bytes) {
  hw::BandwidthOptions weights = dram;
  weights.array_bytes = weight_bytes;
  weights.repetitions = std::max(weights.repetitions, 8);
  weights.streams_per_thread = kWeightProbeStreams;
  return weights;
}

}  // namespace

Probes RunProbes(int threads, hw::GemmBackend backend, size_t llc_bytes, size_t weight_bytes) {
  Probes probes;
  const hw::BandwidthOptions dram = DramProbeOptions(threads, llc_bytes);
  probes.dram = hw::MeasureReadBandwidth(dram);
  hw::BandwidthOptions llc = dram;
  llc.array_bytes = std::max<size_t>(llc_bytes / 4, size_t{1} << 20);
  llc.repetitions = std::max(llc.repetitions, 20);
  probes.llc = hw::MeasureReadBandwidth(llc);
  if (weight_bytes > 0) {
    probes.weights = hw::MeasureReadBandwidth(WeightProbeOptions(dram, weight_bytes));
  }
  probes.gemm_peak = hw::MeasurePeakGemmFlops(backend, threads, hw::PeakGemmOptions{});
  return probes;
}

void ProbeBandwidthBetweenPasses(Probes& probes, int threads, size_t llc_bytes) {
  const hw::BandwidthOptions dram = DramProbeOptions(threads, llc_bytes);
  const hw::BandwidthResult again = hw::MeasureReadBandwidth(dram);
  probes.dram_between_passes.push_back(again.bytes_per_s);
  if (again.bytes_per_s > probes.dram.bytes_per_s) probes.dram = again;
  if (probes.weights.array_bytes == 0) return;
  const hw::BandwidthResult weights =
      hw::MeasureReadBandwidth(WeightProbeOptions(dram, probes.weights.array_bytes));
  probes.weights_between_passes.push_back(weights.bytes_per_s);
  if (weights.bytes_per_s > probes.weights.bytes_per_s) probes.weights = weights;
}

DeviceProfile CpuBaseProfile(const Probes& probes, const HostInfo& host, int threads,
                             bool packed_weights) {
  DeviceProfile profile;
  profile.name = "cpu";
  profile.device = host.cpu_model + " (" + std::to_string(threads) + " threads)";
  profile.notes =
      "Calibrated by `feather calibrate --target cpu` on this machine: peaks from probes, the "
      "other parameters fitted to steps of the real CPU engine (hw/cpu_engine.h). memory_bytes "
      "is the RAM budget the CPU engine may use for weights and KV, not the machine's RAM.";
  auto set = [&profile](std::string_view name, double value, ParameterSource source,
                        std::string note) {
    const auto parameters = ProfileParameters();
    for (size_t i = 0; i < parameters.size(); ++i) {
      if (parameters[i].name != name) continue;
      profile.*(parameters[i].field) = value;
      profile.origins[i] = {source, std::move(note)};
      return;
    }
    throw std::logic_error("unknown profile parameter " + std::string(name));
  };
  const double budget = std::min(4.0 * (1ull << 30), static_cast<double>(host.memory_bytes) / 4);
  set("memory_bytes", budget, ParameterSource::kAssumed,
      "RAM budget for the CPU engine's weights and KV: min(4 GiB, a quarter of RAM)");
  set("activation_reserve_bytes", 256.0 * (1 << 20), ParameterSource::kAssumed,
      "activations and scratch of the CPU engine at the largest step; a typical figure");
  std::string rereads;
  if (!probes.dram_between_passes.empty()) {
    const auto [low, high] =
        std::minmax_element(probes.dram_between_passes.begin(), probes.dram_between_passes.end());
    char range[160];
    std::snprintf(range, sizeof range,
                  "; the fastest of the probe before the grid and after each of its %zu timed "
                  "passes (those read %.1f-%.1f GB/s)",
                  probes.dram_between_passes.size(), *low / 1e9, *high / 1e9);
    rereads = range;
  }
  set("dram_bw_bytes_per_s", probes.dram.bytes_per_s, ParameterSource::kMeasured,
      "read bandwidth of " + std::to_string(probes.dram.array_bytes >> 20) + " MiB with " +
          std::to_string(probes.dram.num_threads) + " threads, best of " +
          std::to_string(probes.dram.repetitions) + " (hw/probes.h MeasureReadBandwidth)" +
          rereads);
  if (probes.weights.bytes_per_s > 0) {
    std::string note = "read bandwidth of one array of the model's step weights (" +
                       std::to_string(probes.weights.array_bytes >> 20) + " MiB) with " +
                       std::to_string(probes.weights.num_threads) + " threads of " +
                       std::to_string(probes.weights.streams_per_thread) + " streams, best of " +
                       std::to_string(probes.weights.repetitions) +
                       " (calib/cpu_calibration.h RunProbes): the linear layers' working set";
    if (!probes.weights_between_passes.empty()) {
      const auto [low, high] = std::minmax_element(probes.weights_between_passes.begin(),
                                                   probes.weights_between_passes.end());
      char range[160];
      std::snprintf(range, sizeof range,
                    "; the fastest of the probe before the grid and after each of its %zu timed "
                    "passes (those read %.1f-%.1f GB/s)",
                    probes.weights_between_passes.size(), *low / 1e9, *high / 1e9);
      note += range;
    }
    set("weight_stream_bw_bytes_per_s", probes.weights.bytes_per_s, ParameterSource::kMeasured,
        std::move(note));
  } else {
    set("weight_stream_bw_bytes_per_s", 0, ParameterSource::kAssumed,
        "0: no weight probe taken; the weights stream at dram_bw_bytes_per_s");
  }
  set("dense_flops_per_s", probes.gemm_peak.flops_per_s, ParameterSource::kMeasured,
      "peak fp32 GEMM FLOP/s, " + std::string(hw::GemmBackendName(probes.gemm_peak.backend)) +
          (probes.gemm_peak.packed ? " packed" : "") + " " + std::to_string(probes.gemm_peak.m) +
          "^3, " + std::to_string(probes.gemm_peak.num_threads) + " threads (hw/probes.h)");
  set("sm_count", threads, ParameterSource::kMeasured,
      "threads of the CPU engine: the parallel units of vLLM's cascade rule");
  set("gemm_bw_efficiency", 0.8, ParameterSource::kAssumed, "starting value");
  set("gemm_flops_efficiency", 0.7, ParameterSource::kAssumed, "starting value");
  if (packed_weights) {
    set("gemm_batched_fixed_ns", 0, ParameterSource::kSpec,
        "0: the engine's linear layers run on weights packed at load (hw/gemm.h GemmPackedB), "
        "with no per-call repacking; held in the fit");
  } else {
    set("gemm_batched_fixed_ns", 0, ParameterSource::kAssumed, "starting value");
  }
  set("gemm_roofline_exponent", 0, ParameterSource::kAssumed, "starting value: the hard max");
  const uint32_t skinny = packed_weights ? 0 : hw::GemmSkinnyRows(probes.gemm_peak.backend);
  set("gemm_skinny_max_tokens", skinny, ParameterSource::kSpec,
      packed_weights ? "the engine ran every linear layer on packed weights (hw/gemm.h "
                       "GemmPackedB): one roofline for every step, no skinny range"
      : skinny == 0  ? "this build ran no skinny GEMM kernel (hw/gemm.h GemmSkinnyRows: " +
                          hw::GemmKernelName(probes.gemm_peak.backend) + ")"
                    : "the skinny GEMM kernel of this build took products of 2 to " +
                          std::to_string(skinny) + " rows (hw/gemm.h GemmSkinnyRows, " +
                          hw::GemmKernelName(probes.gemm_peak.backend) + ")");
  set("gemm_skinny_fixed_ns", 0, ParameterSource::kAssumed, "starting value");
  set("gemm_skinny_ns_per_token", 0, ParameterSource::kAssumed, "starting value");
  set("decode_cta_fixed_ns", 0, ParameterSource::kAssumed, "starting value");
  set("decode_layer_fixed_ns", 0, ParameterSource::kAssumed, "starting value");
  set("prefill_query_fixed_ns", 0, ParameterSource::kAssumed, "starting value");
  set("attn_bw_efficiency", 0.8, ParameterSource::kAssumed, "starting value");
  set("attn_flops_efficiency", 0.3, ParameterSource::kAssumed, "starting value");
  set("l2_bw_bytes_per_s", probes.llc.bytes_per_s, ParameterSource::kMeasured,
      "read bandwidth of an LLC-resident array (" + std::to_string(probes.llc.array_bytes >> 10) +
          " KiB), the starting value for KV reads served by the LLC");
  set("reuse_hit_max", 0.5, ParameterSource::kAssumed, "starting value");
  set("reuse_window_ctas", 8, ParameterSource::kAssumed, "starting value");
  set("cascade_layer_ns", 10000, ParameterSource::kAssumed, "starting value");
  set("cascade_merge_ns_per_request_layer", 500, ParameterSource::kAssumed, "starting value");
  set("step_fixed_ns", 100000, ParameterSource::kAssumed, "starting value");
  set("layer_fixed_ns", 0, ParameterSource::kAssumed, "starting value");
  set("per_request_ns", 1000, ParameterSource::kAssumed, "starting value");
  return profile;
}

std::string AttentionIsaName() {
  using hw::attention_internal::AttentionIsa;
  const AttentionIsa isa = hw::attention_internal::ActiveAttentionIsa();
  // "avx2+fma" as the profiles written before the AVX-512 step said it.
  return isa == AttentionIsa::kAvx2 ? "avx2+fma" : hw::attention_internal::AttentionIsaName(isa);
}

void SetGridBlockTokens(std::vector<GridPoint>& grid, uint32_t block_tokens) {
  for (GridPoint& point : grid) point.spec.block_tokens = block_tokens;
}

uint64_t LargestStepBlocks(std::span<const GridPoint> grid) {
  uint64_t blocks = 0;
  for (const GridPoint& point : grid) {
    blocks = std::max(blocks, hw::MakeSyntheticBatch(point.spec).pool_blocks);
  }
  return blocks;
}

std::vector<StepMeasurement> MeasureCpuGrid(std::vector<GridPoint>& grid, const ModelConfig& model,
                                            uint64_t pool_blocks, int threads,
                                            hw::GemmBackend backend, int repetitions,
                                            const std::function<void()>& after_step,
                                            const std::function<void(int pass)>& after_pass,
                                            const hw::CpuEngineOptions& engine_options,
                                            bool primed) {
  const uint32_t block_tokens = grid.empty() ? 16 : grid.front().spec.block_tokens;
  for (const GridPoint& point : grid) {
    if (point.spec.block_tokens != block_tokens) {
      throw std::invalid_argument("MeasureCpuGrid: the grid mixes page sizes (" +
                                  std::to_string(block_tokens) + " and " +
                                  std::to_string(point.spec.block_tokens) + " tokens)");
    }
  }
  std::unique_ptr<hw::CpuEngine> engines[2];  // [0] without cascade, [1] with
  std::vector<MeasuredEngine> measured_engines(2);
  for (const bool cascade : {false, true}) {
    const bool needed = std::any_of(grid.begin(), grid.end(),
                                    [&](const GridPoint& p) { return p.cascade == cascade; });
    if (!needed) continue;
    hw::CpuEngineOptions options = engine_options;
    options.num_threads = threads;
    options.cascade_attention = cascade;
    options.gemm_backend = backend;
    engines[cascade] = std::make_unique<hw::CpuEngine>(model, pool_blocks, block_tokens, options);
    measured_engines[cascade] = {engines[cascade].get(), cascade,
                                 static_cast<uint32_t>(engines[cascade]->num_threads())};
  }
  std::vector<hw::SyntheticBatch> batches;
  batches.reserve(grid.size());
  std::vector<HarnessStep> steps;
  for (GridPoint& point : grid) {
    point.spec.pool_blocks = pool_blocks;
    batches.push_back(hw::MakeSyntheticBatch(point.spec));
    steps.push_back({&batches.back().plan, point.cascade ? size_t{1} : size_t{0}});
  }
  HarnessOptions options;
  options.repetitions = repetitions;
  options.after_step = after_step;
  options.after_pass = after_pass;
  options.primed = primed;
  return MeasureSteps(measured_engines, steps, model, options);
}

}  // namespace feather::calib
