// cupti_metrics.cc: CUPTI metric values to CuptiCounters (see cupti_metrics.h).
#include "hw/cuda/cupti_metrics.h"

#include <cmath>
#include <sstream>

namespace feather::hw::cuda {

std::optional<CuptiCounters> ParseRangeValues(const std::string& range, const double* values,
                                              size_t count, std::string* error) {
  auto fail = [&](const std::string& what) -> std::optional<CuptiCounters> {
    if (error != nullptr) *error = "CUPTI range '" + range + "': " + what;
    return std::nullopt;
  };
  if (count != kCuptiMetricNames.size()) {
    return fail("expected " + std::to_string(kCuptiMetricNames.size()) + " metric values, got " +
                std::to_string(count));
  }
  for (size_t i = 0; i < count; ++i) {
    if (!std::isfinite(values[i])) {
      std::ostringstream what;
      what << kCuptiMetricNames[i] << " = " << values[i] << " is not a finite number";
      return fail(what.str());
    }
  }
  if (values[0] < 0) {
    std::ostringstream what;
    what << kCuptiMetricNames[0] << " = " << values[0] << " bytes is negative";
    return fail(what.str());
  }
  if (values[1] < 0 || values[1] > 100) {
    std::ostringstream what;
    what << kCuptiMetricNames[1] << " = " << values[1] << " is outside [0, 100] percent";
    return fail(what.str());
  }
  CuptiCounters counters;
  counters.range = range;
  counters.dram_bytes_read = values[0];
  counters.l2_hit_rate = values[1] / 100.0;
  return counters;
}

double DramFractionOfPlanned(const CuptiCounters& counters, double planned_bytes) {
  return planned_bytes > 0 ? counters.dram_bytes_read / planned_bytes : 0.0;
}

}  // namespace feather::hw::cuda
