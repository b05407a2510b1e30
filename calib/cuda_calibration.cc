// cuda_calibration.cc: the CUDA target's probes, base profile and grid (see cuda_calibration.h).
#include "calib/cuda_calibration.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "calib/harness.h"
#if FEATHER_HAVE_CUDA
#include "hw/cuda/cuda_engine.h"
#endif

namespace feather::calib {

#if FEATHER_HAVE_CUDA
CudaProbes RunCudaProbes(bool quick) {
  const size_t bytes = quick ? size_t{256} << 20 : size_t{1} << 30;
  const int reps = quick ? 5 : 20;
  return CudaProbes{hw::cuda::MeasureCopyBandwidth(bytes, reps),
                    hw::cuda::MeasureReadBandwidth(bytes, reps),
                    hw::cuda::MeasureBf16GemmTflops(quick ? 4096 : 8192, quick ? 3 : 10)};
}
#endif

DeviceProfile CudaBaseProfile(const CudaProbes& probes, const hw::cuda::CudaDeviceInfo& device) {
  DeviceProfile profile;
  profile.name = "cuda";
  profile.device = device.name;
  profile.notes =
      "Calibrated by `feather calibrate --target cuda` on this GPU: peaks from probes, the other "
      "parameters fitted to steps of the real CUDA engine (hw/cuda/cuda_engine.h).";
  profile.provenance.push_back("GPU probes of " + device.name +
                               " (hw/cuda/gpu_probes.h: read kernel, cuBLASLt bf16 GEMM)");
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
  set("memory_bytes", static_cast<double>(device.memory_bytes), ParameterSource::kMeasured,
      "cudaDeviceProp::totalGlobalMem");
  set("activation_reserve_bytes", std::floor(0.1 * static_cast<double>(device.memory_bytes)),
      ParameterSource::kAssumed, "a tenth of device memory for activations and workspaces");
  set("dram_bw_bytes_per_s", probes.read.best * 1e9, ParameterSource::kMeasured,
      "read kernel over device memory, best of " + std::to_string(probes.read.reps) +
          " (hw/cuda/gpu_probes.h)");
  set("dense_flops_per_s", probes.flops.best * 1e12, ParameterSource::kMeasured,
      "cuBLASLt bf16 GEMM, best of " + std::to_string(probes.flops.reps) +
          " (hw/cuda/gpu_probes.h)");
  set("sm_count", device.sm_count, ParameterSource::kMeasured,
      "cudaDeviceProp::multiProcessorCount");
  set("gemm_bw_efficiency", 0.8, ParameterSource::kAssumed, "starting value");
  set("gemm_flops_efficiency", 0.7, ParameterSource::kAssumed, "starting value");
  set("gemm_batched_fixed_ns", 0, ParameterSource::kAssumed, "starting value");
  set("gemm_roofline_exponent", 0, ParameterSource::kAssumed, "starting value: the hard max");
  set("gemm_skinny_max_tokens", 0, ParameterSource::kSpec,
      "no skinny kernel: cuBLAS takes every product");
  set("gemm_skinny_fixed_ns", 0, ParameterSource::kAssumed, "unused: no skinny kernel");
  set("gemm_skinny_ns_per_token", 0, ParameterSource::kAssumed, "unused: no skinny kernel");
  set("weight_stream_bw_bytes_per_s", 0, ParameterSource::kSpec,
      "0: the weights stream at dram_bw_bytes_per_s (gigabytes of weights against tens of MB of "
      "L2)");
  set("decode_cta_fixed_ns", 0, ParameterSource::kAssumed, "starting value");
  set("decode_layer_fixed_ns", 0, ParameterSource::kAssumed, "starting value");
  set("prefill_query_fixed_ns", 0, ParameterSource::kAssumed, "starting value");
  set("attn_bw_efficiency", 0.8, ParameterSource::kAssumed, "starting value");
  set("attn_flops_efficiency", 0.3, ParameterSource::kAssumed, "starting value");
  set("l2_bw_bytes_per_s", 2.5 * probes.read.best * 1e9, ParameterSource::kAssumed,
      "starting value: 2.5 × the DRAM read probe (fitted)");
  set("reuse_hit_max", 0.5, ParameterSource::kAssumed, "starting value");
  set("reuse_window_ctas", 8, ParameterSource::kAssumed, "starting value");
  set("cascade_layer_ns", 5000, ParameterSource::kAssumed, "starting value");
  set("cascade_merge_ns_per_request_layer", 50, ParameterSource::kAssumed, "starting value");
  set("step_fixed_ns", 50000, ParameterSource::kAssumed, "starting value");
  set("layer_fixed_ns", 0, ParameterSource::kAssumed, "starting value");
  set("per_request_ns", 500, ParameterSource::kAssumed, "starting value");
  return profile;
}

#if FEATHER_HAVE_CUDA
std::vector<MeasuredStep> MeasureCudaGrid(std::vector<GridPoint>& grid, const ModelConfig& model,
                                          uint64_t pool_blocks, int repetitions,
                                          const std::function<void()>& after_step,
                                          const std::function<void(int pass)>& after_pass) {
  // One engine, seen with cascade off and on: two would hold the weights and the pool twice.
  hw::cuda::CudaEngine engine(model, pool_blocks, 16);
  hw::cuda::CudaEngineCascadeView views[2] = {{engine, false}, {engine, true}};
  const auto sm_count = static_cast<uint32_t>(engine.sm_count());
  std::vector<MeasuredEngine> measured_engines = {{&views[0], false, sm_count},
                                                  {&views[1], true, sm_count}};
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
  return RowsOf(MeasureSteps(measured_engines, steps, model, options));
}

#endif  // FEATHER_HAVE_CUDA

}  // namespace feather::calib
