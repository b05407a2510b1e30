// datasheet.h: the published memory bandwidth and dense tensor-core throughput of the GPUs
// feather targets, and the check `feather selfcheck --target cuda` applies to its probes: a
// measured figure must lie within [floor, ceiling] × the datasheet's (a probe far below it means a
// broken probe or a throttled device; above it, a probe that measures the wrong thing).
//
// Figures are NVIDIA's datasheets (dense, no sparsity): bandwidth in GB/s (10^9 bytes/s), bf16
// tensor throughput in TFLOP/s. A device is matched by a substring of its CUDA name; an unknown
// device has no datasheet and its probes are reported, not checked. O(table).
#pragma once

#include <optional>
#include <string>

namespace feather::hw::cuda {

struct Datasheet {
  const char* name_contains;  // matched against cudaDeviceProp::name
  double dram_gb_per_s;
  double bf16_dense_tflops;
};

[[nodiscard]] std::optional<Datasheet> FindDatasheet(const std::string& device_name);

// Fractions of the datasheet a probe must reach and may not exceed.
inline constexpr double kBandwidthFloor = 0.60;  // copy kernels reach 80–93 % of HBM peak
inline constexpr double kFlopsFloor = 0.45;      // cuBLASLt bf16 reaches 60–80 % of dense peak
inline constexpr double kCeiling = 1.05;

// "" when measured / datasheet ∈ [floor, kCeiling], else why not (naming both figures).
[[nodiscard]] std::string CheckAgainstDatasheet(const char* what, double measured, double datasheet,
                                                double floor);

}  // namespace feather::hw::cuda
