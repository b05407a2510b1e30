// perf_counters.h: hardware event counts around a region of code — cycles, instructions,
// last-level-cache loads and load misses — through Linux perf_event_open, plus the task clock
// (a software event that works where the hardware PMU is hidden).
//
// Use a PerfCounterGroup around a kernel: construct (opens the counters, disabled), Start(),
// run, Stop() → PerfCounts. Every counter is optional: one the kernel refuses (no PMU in a VM,
// perf_event_paranoid, a seccomp filter in a container, an event the CPU lacks) is reported
// absent with the reason, never as an error and never as a zero. Counts are user-space only
// (exclude_kernel, exclude_hv), which perf_event_paranoid ≤ 2 allows without privileges.
//
// Threads. Linux counts per thread; a counter opened with inherit = 1 also counts threads the
// counted thread creates *after* it was opened. OpenMP and OpenBLAS keep pools of threads
// created at their first parallel call, so:
//   - PerfScope::kCallingThread counts the calling thread plus threads it creates later. Enough
//     for single-threaded kernels, or when the region itself starts the pool.
//   - PerfScope::kProcess opens counters on every thread of the process that exists at
//     construction (/proc/self/task), each with inherit = 1, and sums them: existing OpenMP and
//     BLAS pools are counted too. A thread created between the listing and the opening by a
//     thread that had no counter yet is missed; construct after the pools exist.
// Groups: the counters of one thread form a perf group when the kernel accepts it (they are
// then scheduled together, so ratios stay meaningful under multiplexing); a counter that cannot
// join is opened on its own. Counts are scaled by time_enabled / time_running when the kernel
// multiplexed them, and `multiplexed` says so.
//
// Costs: construction is one perf_event_open per counter per thread (~10 µs each); Start and
// Stop are one ioctl per file descriptor; Read is one read() per descriptor. Not thread-safe:
// one group belongs to one thread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace feather::hw {

enum class PerfEvent : uint8_t {
  kCycles,         // PERF_COUNT_HW_CPU_CYCLES
  kInstructions,   // PERF_COUNT_HW_INSTRUCTIONS
  kLlcLoads,       // PERF_TYPE_HW_CACHE: LL, read, access
  kLlcLoadMisses,  // PERF_TYPE_HW_CACHE: LL, read, miss (else PERF_COUNT_HW_CACHE_MISSES)
  kTaskClockNs,    // PERF_COUNT_SW_TASK_CLOCK: on-CPU time of the counted threads
};
inline constexpr size_t kPerfEventCount = 5;
[[nodiscard]] std::string_view PerfEventName(PerfEvent event);  // "cycles", "llc_loads", ...

enum class PerfScope : uint8_t { kCallingThread, kProcess };

struct PerfCounts {
  std::optional<uint64_t> cycles;
  std::optional<uint64_t> instructions;
  std::optional<uint64_t> llc_loads;
  std::optional<uint64_t> llc_load_misses;
  std::optional<uint64_t> task_clock_ns;
  bool multiplexed = false;  // some count was scaled up from a partial running time

  [[nodiscard]] std::optional<uint64_t> Get(PerfEvent event) const;
};

class PerfCounterGroup {
 public:
  // Opens the counters (disabled). Never throws for refused events; see Available().
  explicit PerfCounterGroup(PerfScope scope = PerfScope::kCallingThread);
  ~PerfCounterGroup();
  PerfCounterGroup(const PerfCounterGroup&) = delete;
  PerfCounterGroup& operator=(const PerfCounterGroup&) = delete;

  // Resets all counts to zero and enables counting.
  void Start();
  // Disables counting and returns the counts since Start().
  PerfCounts Stop();
  // The counts so far, without stopping.
  [[nodiscard]] PerfCounts Read() const;

  // Whether `event` could be opened (on at least one thread); if not, why ("ENOENT: ..."; empty
  // for an available event).
  [[nodiscard]] bool Available(PerfEvent event) const;
  [[nodiscard]] std::string AbsenceReason(PerfEvent event) const;
  // How an available event was encoded: "hw_cache:ll:read:access", or the fallbacks
  // "hw:cache_references" / "hw:cache_misses" where the CPU has no generic LL cache events
  // (those two count LLC references / misses on Intel, and the CPU's own choice elsewhere).
  [[nodiscard]] std::string_view Encoding(PerfEvent event) const;
  // Threads counters were opened on (1 for kCallingThread).
  [[nodiscard]] size_t ThreadCount() const { return threads_; }

 private:
  struct Counter {
    PerfEvent event;
    int fd;
  };
  void OpenForThread(int tid);

  std::vector<Counter> counters_;                     // every open descriptor, all threads
  std::array<std::string, kPerfEventCount> absence_;  // empty when opened somewhere
  std::array<bool, kPerfEventCount> opened_{};
  std::array<std::string_view, kPerfEventCount> encoding_{};
  size_t threads_ = 0;
};

}  // namespace feather::hw
