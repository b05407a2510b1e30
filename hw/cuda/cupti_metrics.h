// cupti_metrics.h: which hardware counters feather reads around each measured GPU step, and how
// the values CUPTI returns become a record — the host-side half of the CUPTI range profiler
// (hw/cuda/cupti_profiler.h), testable without a GPU.
//
// Metrics (Perfworks names, as Nsight Compute prints them; present on sm_80, sm_89 and sm_90):
//   dram__bytes_read.sum          bytes read from device memory (HBM / GDDR) in the range
//   lts__t_sector_hit_rate.pct    L2 sector hit rate, percent
// The cost model prices decode attention by the KV bytes it reads; dram__bytes_read against the
// planned KV bytes says how much of the KV came from DRAM, and the L2 hit rate how much cascade's
// shared prefix was served from L2 — the two quantities the paper's Exps 1–6 report per point.
//
// ParseRangeValues turns one range's evaluated values (in kCuptiMetricNames order, as
// cuptiProfilerHostEvaluateToGpuValues fills them) into CuptiCounters, refusing values CUPTI
// would not produce for a valid range (NaN, negative bytes, a rate outside [0, 100]) with a
// message naming the metric and the value. O(metrics).
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>

namespace feather::hw::cuda {

inline constexpr std::array<const char*, 2> kCuptiMetricNames = {"dram__bytes_read.sum",
                                                                 "lts__t_sector_hit_rate.pct"};

struct CuptiCounters {
  std::string range;           // the range's name (the measured step)
  double dram_bytes_read = 0;  // bytes
  double l2_hit_rate = 0;      // fraction in [0, 1]
};

// values: [kCuptiMetricNames.size()] for the range `range`. On a bad value returns nullopt and
// sets *error.
[[nodiscard]] std::optional<CuptiCounters> ParseRangeValues(const std::string& range,
                                                            const double* values, size_t count,
                                                            std::string* error);

// "KV from DRAM": dram_bytes_read / planned KV bytes (0 when nothing was planned).
[[nodiscard]] double DramFractionOfPlanned(const CuptiCounters& counters, double planned_bytes);

}  // namespace feather::hw::cuda
