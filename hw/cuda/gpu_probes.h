// gpu_probes.h: bandwidth and FLOP probes of the GPU (CUDA builds only), the figures the
// self-check compares with the datasheet (hw/cuda/datasheet.h) and that a CUDA profile records as
// the device's peaks — the GPU counterpart of hw/probes.h.
//
//   copy   cudaMemcpyAsync device to device of `bytes`; bandwidth counts read + write (2·bytes),
//          as STREAM and the datasheets do;
//   read   a grid-stride kernel summing 16-byte loads of `bytes` (one partial per CTA, so nothing
//          is optimised away); counts bytes;
//   gemm   cuBLASLt bf16 n×n×n with fp32 accumulation; counts 2·n³ FLOP.
// Each runs one warm-up and `reps` timed repetitions (CUDA events) and reports the best and the
// median. Decode attention's target (≥ 80 % of copy bandwidth) is measured against `copy` in the
// same run.
#pragma once

#include <cstddef>

namespace feather::hw::cuda {

struct GpuProbeResult {
  double best = 0;  // GB/s (10^9 bytes/s) or TFLOP/s
  double median = 0;
  int reps = 0;
};

[[nodiscard]] GpuProbeResult MeasureCopyBandwidth(size_t bytes, int reps);
[[nodiscard]] GpuProbeResult MeasureReadBandwidth(size_t bytes, int reps);
[[nodiscard]] GpuProbeResult MeasureBf16GemmTflops(int n, int reps);

}  // namespace feather::hw::cuda
