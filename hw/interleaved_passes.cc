// interleaved_passes.cc: see interleaved_passes.h.
#include "hw/interleaved_passes.h"

#include <algorithm>
#include <cassert>

namespace feather::hw {

std::vector<std::vector<StepTiming>> RunInterleavedPasses(
    size_t steps, int repetitions, const std::function<StepTiming(size_t step, int pass)>& execute,
    const std::function<void(int pass)>& after_pass) {
  assert(repetitions >= 1);
  std::vector<std::vector<StepTiming>> timings(steps);
  for (std::vector<StepTiming>& t : timings) t.reserve(static_cast<size_t>(repetitions));
  for (int pass = 0; pass <= repetitions; ++pass) {
    for (size_t k = 0; k < steps; ++k) {
      const size_t i = pass % 2 == 0 ? k : steps - 1 - k;
      const StepTiming timing = execute(i, pass);
      if (pass > 0) timings[i].push_back(timing);
    }
    if (after_pass) after_pass(pass);
  }
  return timings;
}

StepTiming MedianByTotal(std::vector<StepTiming> timings) {
  assert(!timings.empty());
  const auto middle = timings.begin() + static_cast<std::ptrdiff_t>(timings.size() / 2);
  std::nth_element(timings.begin(), middle, timings.end(),
                   [](const StepTiming& a, const StepTiming& b) { return a.total_ns < b.total_ns; });
  return *middle;
}

double RelativeSpread(const std::vector<StepTiming>& timings) {
  if (timings.size() < 2) return 0.0;
  const auto [low, high] = std::minmax_element(
      timings.begin(), timings.end(),
      [](const StepTiming& a, const StepTiming& b) { return a.total_ns < b.total_ns; });
  const double median = static_cast<double>(MedianByTotal(timings).total_ns);
  return median > 0 ? static_cast<double>(high->total_ns - low->total_ns) / median : 0.0;
}

}  // namespace feather::hw
