// cuda_calibration.h: what `feather calibrate --target cuda` measures (CUDA builds only; run on an
// H100 once, results/cuda-h100/). The same grid of synthetic steps as the CPU
// (calib/cpu_calibration.h, CalibrationGrid: sizes scaled for a 2-core CPU, small for a GPU; with
// Llama-3-8B on an H100 the full grid needs more than 150 s, --quick 20 s) measured on CudaEngines through the engine-agnostic harness (calib/harness.h), and
// a base profile whose peaks are the GPU probes (hw/cuda/gpu_probes.h): DRAM bandwidth from the
// read probe, dense FLOP/s from cuBLASLt bf16, sm_count from the device. CudaBaseProfile is host
// code (tested on the CPU); the probes and the grid need a GPU and exist in CUDA builds only.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "calib/cpu_calibration.h"
#include "hw/cuda/device.h"
#include "hw/cuda/gpu_probes.h"
#include "hw/host_info.h"
#include "sim/engine/device_profile.h"
#include "sim/engine/model_config.h"
#include "sim/engine/model_engine.h"

namespace feather::calib {

struct CudaProbes {
  hw::cuda::GpuProbeResult copy;   // GB/s
  hw::cuda::GpuProbeResult read;   // GB/s
  hw::cuda::GpuProbeResult flops;  // TFLOP/s, bf16
};

// The starting profile of a CUDA fit: memory from the device, peaks from the probes (GB/s and
// TFLOP/s converted to bytes/s and FLOP/s), sm_count from the device; the rest starting values.
[[nodiscard]] DeviceProfile CudaBaseProfile(const CudaProbes& probes,
                                            const hw::cuda::CudaDeviceInfo& device);

#if FEATHER_HAVE_CUDA
[[nodiscard]] CudaProbes RunCudaProbes(bool quick);

[[nodiscard]] std::vector<MeasuredStep> MeasureCudaGrid(
    std::vector<GridPoint>& grid, const ModelConfig& model, uint64_t pool_blocks, int repetitions,
    const std::function<void()>& after_step, const std::function<void(int pass)>& after_pass);

#endif  // FEATHER_HAVE_CUDA

}  // namespace feather::calib
