// host_info.h: what machine and which build produced a measurement (provenance for records).
//
// Every benchmark, calibration table and run summary carries a HostInfo, so a number can always
// be traced to the CPU, caches, memory, OS, compiler, build type and git revision behind it.
// ReadHostInfo() reads /proc, /sys and uname() once (a few file reads, well under a millisecond);
// call it at the edges (when writing a record), not in a hot loop. PeakRssBytes() and
// CurrentRssBytes() are one syscall / one small file read each.
//
// Unknown values are reported as empty strings, "unknown" or 0, never as an error: a container
// without /sys still gets a record.
#pragma once

#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace feather {

struct CacheSizes {
  size_t l1d_bytes = 0;  // level-1 data cache of one core; 0 when unknown
  size_t l2_bytes = 0;   // level-2 cache (unified or data); 0 when unknown
  size_t l3_bytes = 0;   // level-3 (last-level) cache; 0 when unknown
};

struct HostInfo {
  std::string hostname;
  std::string cpu_model;  // /proc/cpuinfo "model name" (or the ARM equivalent)
  // What the model name can hide: a VM's "AMD EPYC" has been Zen 3, 4 and 5 on this project's
  // machines. CpuSignatureOf(/proc/cpuinfo); empty when it has neither form.
  std::string cpu_signature;
  unsigned logical_cpus = 0;  // online logical CPUs of the machine
  unsigned usable_cpus = 0;   // CPUs this process may run on (affinity mask; cgroup cpusets)
  CacheSizes caches;          // of cpu0, from /sys/devices/system/cpu/cpu0/cache
  size_t memory_bytes = 0;    // physical memory
  std::string os;             // /etc/os-release PRETTY_NAME, else uname sysname
  std::string kernel;         // uname sysname + release
  std::string arch;           // uname machine
  std::string compiler;       // compiler id and version of this build
  std::string build_type;     // CMAKE_BUILD_TYPE of this build
  std::string git_rev;        // short git revision at configure time, "unknown" outside git
  std::string feather_version;
  bool sanitized = false;              // built with ASan/UBSan (FEATHER_SANITIZE)
  bool cuda_compiler_present = false;  // /usr/local/cuda/bin/nvcc exists or CUDA found at build
  // The CPU kernels this build runs on this machine: the attention tile step ("avx512bf16",
  // "avx512", "avx2" or "scalar"; hw/attention_internal.h) and the GEMM the
  // engine's default backend runs ("eigen/avx512", "eigen/avx2" or "blas"; hw/gemm.h). Forced
  // by FEATHER_ATTENTION_ISA / FEATHER_GEMM_ISA.
  std::string attention_isa;
  std::string gemm_kernel;
  std::string date_utc;  // time of the reading, ISO 8601, e.g. 2024-05-01T12:00:00Z
};

// Reads the machine and build description. Never throws for missing files.
[[nodiscard]] HostInfo ReadHostInfo();

// Every HostInfo field as a flat JSON object; keys are the field names, caches flattened to
// l1d_cache_bytes, l2_cache_bytes, l3_cache_bytes.
[[nodiscard]] nlohmann::json ToJson(const HostInfo& info);

// The CPU's vendor, family and model from the text of /proc/cpuinfo (its first processor):
// "AuthenticAMD family 25 model 17" on x86 (vendor_id, cpu family, model; the stepping left out:
// one design), "ARM implementer 0x41 part 0xd0c" on ARM (CPU implementer, CPU part); empty when
// the text has neither.
[[nodiscard]] std::string CpuSignatureOf(std::string_view cpuinfo);

// Parses a sysfs cache size ("32K", "1024K", "32M", "1G", "512"; surrounding whitespace
// allowed) into bytes. Returns 0 for anything else (empty, bad suffix, overflow).
[[nodiscard]] size_t ParseCacheSizeBytes(std::string_view text);

// Reads the cache sizes from a sysfs cache folder (index*/level, type, size), e.g.
// /sys/devices/system/cpu/cpu0/cache. A missing folder or file leaves that size 0.
[[nodiscard]] CacheSizes ReadCacheSizes(const std::filesystem::path& cache_dir);

// Peak resident set size of this process so far (getrusage ru_maxrss), in bytes.
[[nodiscard]] size_t PeakRssBytes();

// Current resident set size of this process (/proc/self/statm), in bytes; 0 when unknown.
[[nodiscard]] size_t CurrentRssBytes();

}  // namespace feather
