// cupti_profiler.h: hardware counters around a measured GPU step through CUPTI's Range Profiler
// (cupti_range_profiler.h) and profiler host API (cupti_profiler_host.h), the profiling API of
// CUDA 12.6+ and 13 (the older cuptiProfiler* session API and the Event/Metric APIs are
// deprecated). All CUPTI calls of feather live in cupti_profiler.cc. CUDA builds only.
//
// Measure(name, work) runs `work` inside one user range named `name` and returns the metrics of
// hw/cuda/cupti_metrics.h (DRAM bytes read, L2 hit rate) for it. Collecting them may take several
// passes (user replay): `work` is then run once per pass, so it must be repeatable (a kernel
// launch sequence over the same inputs; it should end with a stream synchronisation). The
// profiler holds the counters of the current context's device; Measure is not reentrant.
//
// Errors (a CUPTI call failing — commonly CUPTI_ERROR_INSUFFICIENT_PRIVILEGES when the driver
// restricts counters to admin users, NVreg_RestrictProfilingToAdminUsers) throw
// std::runtime_error with the call, file, line and CUPTI's message.
//
// Cost: setup (chip name, counter availability, config image) once per profiler, ~100 ms; each
// Measure adds a counter-data image of a few KiB and the replay passes.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "hw/cuda/cupti_metrics.h"

namespace feather::hw::cuda {

class CuptiRangeProfiler {
 public:
  CuptiRangeProfiler();  // on the current device's primary context (initialised if needed)
  ~CuptiRangeProfiler();
  CuptiRangeProfiler(const CuptiRangeProfiler&) = delete;
  CuptiRangeProfiler& operator=(const CuptiRangeProfiler&) = delete;

  [[nodiscard]] CuptiCounters Measure(const std::string& name, const std::function<void()>& work);
  [[nodiscard]] int passes() const;  // replay passes the metrics need

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace feather::hw::cuda
