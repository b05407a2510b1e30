// Tests for hw/perf_counters.h: the group never throws, reports every counter as either absent
// (with a reason) or present (with an encoding), and present counts are positive after real
// work, for the calling thread and for the whole process (a worker thread started beforehand,
// as an OpenMP or BLAS pool would be). Which counters are present depends on the machine: a VM
// without a PMU has only the task clock, and the thread-scope checks are made on that.
#include "hw/perf_counters.h"

#include <gtest/gtest.h>
#include <time.h>

#include <cstdint>
#include <future>
#include <thread>
#include <vector>

namespace feather::hw {
namespace {

constexpr PerfEvent kAllEvents[] = {PerfEvent::kCycles, PerfEvent::kInstructions,
                                    PerfEvent::kLlcLoads, PerfEvent::kLlcLoadMisses,
                                    PerfEvent::kTaskClockNs};

// Some milliseconds of arithmetic and memory traffic the optimiser cannot drop.
double Work(size_t elements) {
  std::vector<double> data(elements, 1.0);
  volatile double sink = 0;
  for (int pass = 0; pass < 8; ++pass) {
    double sum = 0;
    for (const double x : data) sum += x * 1.0000001;
    sink = sink + sum;
  }
  return sink;
}

void ExpectAbsentOrPositive(const PerfCounterGroup& group, const PerfCounts& counts) {
  for (const PerfEvent event : kAllEvents) {
    const std::optional<uint64_t> value = counts.Get(event);
    if (group.Available(event)) {
      EXPECT_TRUE(group.AbsenceReason(event).empty()) << PerfEventName(event);
      EXPECT_FALSE(group.Encoding(event).empty()) << PerfEventName(event);
      // An available counter may still have been crowded off the PMU for the whole region,
      // but misses aside, work always counts.
      if (value.has_value() && event != PerfEvent::kLlcLoadMisses) {
        EXPECT_GT(*value, 0u) << PerfEventName(event);
      }
    } else {
      EXPECT_FALSE(value.has_value()) << PerfEventName(event);
      EXPECT_FALSE(group.AbsenceReason(event).empty()) << PerfEventName(event);
    }
  }
}

TEST(PerfCounterGroupTest, CallingThreadCountsAreAbsentOrPositive) {
  PerfCounterGroup group(PerfScope::kCallingThread);
  EXPECT_EQ(group.ThreadCount(), 1u);
  group.Start();
  EXPECT_GT(Work(1 << 20), 0.0);
  const PerfCounts counts = group.Stop();
  ExpectAbsentOrPositive(group, counts);
  for (const PerfEvent event : kAllEvents) {
    RecordProperty(std::string(PerfEventName(event)), group.Available(event)
                                                          ? std::string(group.Encoding(event))
                                                          : group.AbsenceReason(event));
  }
}

uint64_t ThreadCpuNs() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(now.tv_nsec);
}

// Task-clock nanoseconds a group of `scope` sees while a thread that already existed when the
// group was opened does some work, and the CPU time that thread itself measured.
struct PoolRun {
  std::optional<uint64_t> task_clock_ns;
  uint64_t worker_cpu_ns = 0;
  size_t threads = 0;
};

PoolRun CountExistingWorker(PerfScope scope) {
  std::promise<void> go;
  std::shared_future<void> started = go.get_future().share();
  uint64_t worker_cpu_ns = 0;
  std::thread worker([&] {
    started.wait();
    const uint64_t begin = ThreadCpuNs();
    EXPECT_GT(Work(1 << 20), 0.0);
    worker_cpu_ns = ThreadCpuNs() - begin;
  });
  PerfCounterGroup group(scope);
  group.Start();
  go.set_value();
  worker.join();
  const PerfCounts counts = group.Stop();
  ExpectAbsentOrPositive(group, counts);
  return {counts.task_clock_ns, worker_cpu_ns, group.ThreadCount()};
}

TEST(PerfCounterGroupTest, ProcessScopeCountsAThreadThatAlreadyExisted) {
  const PoolRun process = CountExistingWorker(PerfScope::kProcess);
  EXPECT_GE(process.threads, 2u);
  if (process.task_clock_ns.has_value()) {
    // The worker's own clock and the perf clock differ only by scheduling granularity.
    EXPECT_GE(*process.task_clock_ns, process.worker_cpu_ns * 8 / 10);
  }
}

TEST(PerfCounterGroupTest, CallingThreadScopeMissesAThreadThatAlreadyExisted) {
  const PoolRun own = CountExistingWorker(PerfScope::kCallingThread);
  EXPECT_EQ(own.threads, 1u);
  if (own.task_clock_ns.has_value()) {
    // The calling thread only waited (join): far less than the worker's time.
    EXPECT_LT(*own.task_clock_ns, own.worker_cpu_ns / 2);
  }
}

TEST(PerfCounterGroupTest, StopFreezesAndStartResets) {
  PerfCounterGroup group;
  group.Start();
  EXPECT_GT(Work(1 << 18), 0.0);
  const PerfCounts first = group.Stop();
  EXPECT_GT(Work(1 << 18), 0.0);  // not counted: the group is stopped
  const PerfCounts frozen = group.Read();
  for (const PerfEvent event : kAllEvents) EXPECT_EQ(first.Get(event), frozen.Get(event));
  group.Start();
  const PerfCounts fresh = group.Stop();
  if (fresh.task_clock_ns.has_value() && first.task_clock_ns.has_value()) {
    EXPECT_LT(*fresh.task_clock_ns, *first.task_clock_ns);  // reset, then almost no work
  }
}

TEST(PerfCounterGroupTest, EventNames) {
  EXPECT_EQ(PerfEventName(PerfEvent::kCycles), "cycles");
  EXPECT_EQ(PerfEventName(PerfEvent::kLlcLoadMisses), "llc_load_misses");
  EXPECT_EQ(PerfEventName(PerfEvent::kTaskClockNs), "task_clock_ns");
}

}  // namespace
}  // namespace feather::hw
