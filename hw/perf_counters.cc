// perf_counters.cc: PerfCounterGroup over the perf_event_open system call (Linux only; elsewhere
// every counter is absent).
#include "hw/perf_counters.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#if defined(__linux__)
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace feather::hw {
namespace {

constexpr size_t Index(PerfEvent event) { return static_cast<size_t>(event); }

std::string ParanoidLevel() {
  std::ifstream in("/proc/sys/kernel/perf_event_paranoid");
  std::string level;
  in >> level;
  return level.empty() ? "?" : level;
}

// Why perf_event_open failed, in words a reader of a benchmark record can act on.
std::string DescribeError(int error) {
  switch (error) {
    case ENOENT:
      return "ENOENT: the kernel exposes no such event (no hardware PMU, e.g. in a VM)";
    case EOPNOTSUPP:
    case EINVAL:
      return std::string(error == EINVAL ? "EINVAL" : "EOPNOTSUPP") +
             ": the event is not supported by this CPU or kernel";
    case EACCES:
    case EPERM:
      return std::string(error == EACCES ? "EACCES" : "EPERM") +
             ": not permitted (perf_event_paranoid=" + ParanoidLevel() +
             ", or a seccomp filter of the container)";
    case ENOSYS:
      return "ENOSYS: perf_event_open is not available";
    case EMFILE:
    case ENFILE:
      return "EMFILE: out of file descriptors";
    default:
      return std::string("errno ") + std::to_string(error) + ": " + std::strerror(error);
  }
}

#if defined(__linux__)

// One way of asking the kernel for an event.
struct EventEncoding {
  uint32_t type;
  uint64_t config;
  std::string_view name;
};

constexpr uint64_t HwCache(uint64_t cache, uint64_t op, uint64_t result) {
  return cache | (op << 8) | (result << 16);
}

// Encodings to try for `event`, preferred first.
std::vector<EventEncoding> EncodingsOf(PerfEvent event) {
  switch (event) {
    case PerfEvent::kCycles:
      return {{PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, "hw:cpu_cycles"}};
    case PerfEvent::kInstructions:
      return {{PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, "hw:instructions"}};
    case PerfEvent::kLlcLoads:
      return {{PERF_TYPE_HW_CACHE,
               HwCache(PERF_COUNT_HW_CACHE_LL, PERF_COUNT_HW_CACHE_OP_READ,
                       PERF_COUNT_HW_CACHE_RESULT_ACCESS),
               "hw_cache:ll:read:access"},
              {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES, "hw:cache_references"}};
    case PerfEvent::kLlcLoadMisses:
      return {{PERF_TYPE_HW_CACHE,
               HwCache(PERF_COUNT_HW_CACHE_LL, PERF_COUNT_HW_CACHE_OP_READ,
                       PERF_COUNT_HW_CACHE_RESULT_MISS),
               "hw_cache:ll:read:miss"},
              {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, "hw:cache_misses"}};
    case PerfEvent::kTaskClockNs:
      return {{PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, "sw:task_clock"}};
  }
  return {};
}

// perf_event_open for thread `tid` (any CPU); returns the descriptor or -errno.
int OpenEvent(const EventEncoding& encoding, int tid, int group_fd) {
  perf_event_attr attr{};
  attr.size = sizeof(attr);
  attr.type = encoding.type;
  attr.config = encoding.config;
  attr.disabled = 1;  // every descriptor is enabled explicitly by Start()
  attr.inherit = 1;   // threads the counted thread creates later are counted too
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
  const int64_t fd = syscall(SYS_perf_event_open, &attr, tid, -1, group_fd, PERF_FLAG_FD_CLOEXEC);
  return fd >= 0 ? static_cast<int>(fd) : -errno;
}

// Tries the encodings of `event` as a member of `group_fd` (when >= 0), then on its own.
// Returns the descriptor, or -errno of the last refusal; `used` names the encoding that worked.
int OpenWithFallbacks(PerfEvent event, int tid, int group_fd, std::string_view* used) {
  int result = -ENOENT;
  for (const EventEncoding& encoding : EncodingsOf(event)) {
    if (group_fd >= 0) {
      result = OpenEvent(encoding, tid, group_fd);
      if (result >= 0) {
        *used = encoding.name;
        return result;
      }
    }
    result = OpenEvent(encoding, tid, -1);
    if (result >= 0) {
      *used = encoding.name;
      return result;
    }
  }
  return result;
}

std::vector<int> ThreadsOfProcess() {
  std::vector<int> tids;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", error)) {
    const std::string name = entry.path().filename().string();
    if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos) {
      tids.push_back(std::stoi(name));
    }
  }
  if (tids.empty()) tids.push_back(0);  // no /proc: at least this thread
  return tids;
}

#endif  // __linux__

}  // namespace

std::string_view PerfEventName(PerfEvent event) {
  switch (event) {
    case PerfEvent::kCycles:
      return "cycles";
    case PerfEvent::kInstructions:
      return "instructions";
    case PerfEvent::kLlcLoads:
      return "llc_loads";
    case PerfEvent::kLlcLoadMisses:
      return "llc_load_misses";
    case PerfEvent::kTaskClockNs:
      return "task_clock_ns";
  }
  return "unknown";
}

std::optional<uint64_t> PerfCounts::Get(PerfEvent event) const {
  switch (event) {
    case PerfEvent::kCycles:
      return cycles;
    case PerfEvent::kInstructions:
      return instructions;
    case PerfEvent::kLlcLoads:
      return llc_loads;
    case PerfEvent::kLlcLoadMisses:
      return llc_load_misses;
    case PerfEvent::kTaskClockNs:
      return task_clock_ns;
  }
  return std::nullopt;
}

PerfCounterGroup::PerfCounterGroup(PerfScope scope) {
#if defined(__linux__)
  if (scope == PerfScope::kProcess) {
    for (const int tid : ThreadsOfProcess()) OpenForThread(tid);
  } else {
    OpenForThread(0);  // 0: the calling thread
  }
#else
  (void)scope;
  absence_.fill("perf_event_open exists only on Linux");
#endif
}

PerfCounterGroup::~PerfCounterGroup() {
#if defined(__linux__)
  for (const Counter& counter : counters_) close(counter.fd);
#endif
}

void PerfCounterGroup::OpenForThread([[maybe_unused]] int tid) {
#if defined(__linux__)
  ++threads_;
  int leader = -1;
  for (size_t i = 0; i < kPerfEventCount; ++i) {
    const auto event = static_cast<PerfEvent>(i);
    // The first hardware counter leads the group; the software clock stays outside it, so a
    // group the PMU cannot schedule never takes the clock down with it.
    const bool software = event == PerfEvent::kTaskClockNs;
    std::string_view used;
    const int fd = OpenWithFallbacks(event, tid, software ? -1 : leader, &used);
    if (fd < 0) {
      // A thread that exited since the listing (ESRCH) says nothing about the event.
      if (!opened_[i] && fd != -ESRCH) absence_[i] = DescribeError(-fd);
      continue;
    }
    opened_[i] = true;
    absence_[i].clear();
    encoding_[i] = used;
    if (leader < 0 && !software) leader = fd;
    counters_.push_back({event, fd});
  }
#endif
}

void PerfCounterGroup::Start() {
#if defined(__linux__)
  for (const Counter& counter : counters_) ioctl(counter.fd, PERF_EVENT_IOC_RESET, 0);
  for (const Counter& counter : counters_) ioctl(counter.fd, PERF_EVENT_IOC_ENABLE, 0);
#endif
}

PerfCounts PerfCounterGroup::Stop() {
#if defined(__linux__)
  for (const Counter& counter : counters_) ioctl(counter.fd, PERF_EVENT_IOC_DISABLE, 0);
#endif
  return Read();
}

PerfCounts PerfCounterGroup::Read() const {
  PerfCounts counts;
#if defined(__linux__)
  std::array<uint64_t, kPerfEventCount> sums{};
  std::array<bool, kPerfEventCount> known{};
  for (const Counter& counter : counters_) {
    uint64_t values[3] = {0, 0, 0};  // value, time enabled, time running
    if (read(counter.fd, values, sizeof(values)) != static_cast<ssize_t>(sizeof(values))) {
      continue;
    }
    const size_t i = Index(counter.event);
    uint64_t value = values[0];
    if (values[2] < values[1]) {
      // Multiplexed: scale up from the fraction of the time the counter was on the PMU. Never
      // scheduled at all, it knows nothing (left unknown unless another thread's count is).
      if (values[2] == 0) continue;
      value = static_cast<uint64_t>(
          std::llround(static_cast<double>(values[0]) * static_cast<double>(values[1]) /
                       static_cast<double>(values[2])));
      counts.multiplexed = true;
    }
    sums[i] += value;
    known[i] = true;
  }
  std::optional<uint64_t>* fields[kPerfEventCount] = {&counts.cycles, &counts.instructions,
                                                      &counts.llc_loads, &counts.llc_load_misses,
                                                      &counts.task_clock_ns};
  for (size_t i = 0; i < kPerfEventCount; ++i) {
    if (known[i]) *fields[i] = sums[i];
  }
#endif
  return counts;
}

bool PerfCounterGroup::Available(PerfEvent event) const { return opened_[Index(event)]; }

std::string PerfCounterGroup::AbsenceReason(PerfEvent event) const {
  if (opened_[Index(event)]) return "";
  const std::string& reason = absence_[Index(event)];
  return reason.empty() ? "ESRCH: every thread exited before its counter was opened" : reason;
}

std::string_view PerfCounterGroup::Encoding(PerfEvent event) const {
  return encoding_[Index(event)];
}

}  // namespace feather::hw
