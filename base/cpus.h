// cpus.h: how many CPUs this process may run on, the one copy every layer uses (thread pools,
// sweep jobs, probes, host provenance).
//
// UsableCpus() counts the CPUs of the process's affinity mask (sched_getaffinity: taskset and
// cgroup cpusets narrow it, unlike std::thread::hardware_concurrency), falling back to
// hardware_concurrency and then to 1; it never returns 0. One system call, no allocation.
#pragma once

namespace feather {

[[nodiscard]] unsigned UsableCpus();

}  // namespace feather
