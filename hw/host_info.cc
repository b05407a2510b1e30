#include "hw/host_info.h"

#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <array>
#include <charconv>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <limits>
#include <system_error>

#include "base/cpus.h"
#include "base/input_text.h"
#include "feather_git_rev.h"  // FEATHER_GIT_REV, written at build time (cmake/GitRevision.cmake)
#include "hw/attention_internal.h"
#include "hw/gemm.h"

// Build provenance, passed by hw/CMakeLists.txt; defaults keep the file compilable elsewhere.
#ifndef FEATHER_BUILD_TYPE
#define FEATHER_BUILD_TYPE ""
#endif
#ifndef FEATHER_COMPILER
#define FEATHER_COMPILER ""
#endif
#ifndef FEATHER_SANITIZED
#define FEATHER_SANITIZED 0
#endif
#ifndef FEATHER_CUDA_AT_BUILD
#define FEATHER_CUDA_AT_BUILD 0
#endif
#ifndef FEATHER_VERSION
#define FEATHER_VERSION "unknown"
#endif

namespace feather {
namespace {

constexpr const char* kNvccPath = "/usr/local/cuda/bin/nvcc";
constexpr const char* kCpu0CacheDir = "/sys/devices/system/cpu/cpu0/cache";

std::string_view Trim(std::string_view text) {
  constexpr std::string_view kSpace = " \t\r\n";
  const size_t begin = text.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  const size_t end = text.find_last_not_of(kSpace);
  return text.substr(begin, end - begin + 1);
}

// First line of a small file, trimmed; empty when the file cannot be read.
std::string ReadFirstLine(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return {};
  return std::string(Trim(line));
}

// The value of each "key : value" line of /proc/cpuinfo's text whose key is one of `keys`, the
// first occurrence of each (empty where absent).
template <size_t N>
std::array<std::string, N> CpuinfoValues(std::string_view text,
                                         const std::array<std::string_view, N>& keys) {
  std::array<std::string, N> found;
  for (const std::string_view line : SplitLines(text)) {
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = Trim(line.substr(0, colon));
    for (size_t i = 0; i < N; ++i) {
      if (key == keys[i] && found[i].empty()) found[i] = std::string(Trim(line.substr(colon + 1)));
    }
  }
  return found;
}

std::string CpuModelOf(std::string_view cpuinfo) {
  // x86 names the model "model name"; some ARM kernels use "Processor" or "Hardware".
  constexpr std::array<std::string_view, 4> kKeys = {"model name", "Processor", "cpu model",
                                                     "Hardware"};
  for (const std::string& value : CpuinfoValues(cpuinfo, kKeys)) {
    if (!value.empty()) return value;
  }
  return "unknown";
}

std::string ReadWholeFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string text, line;
  while (std::getline(in, line)) text.append(line).push_back('\n');
  return text;
}

std::string OsPrettyName(const std::string& fallback) {
  std::ifstream in("/etc/os-release");
  std::string line;
  constexpr std::string_view kKey = "PRETTY_NAME=";
  while (std::getline(in, line)) {
    std::string_view view(line);
    if (!view.starts_with(kKey)) continue;
    view = Trim(view.substr(kKey.size()));
    if (view.size() >= 2 && (view.front() == '"' || view.front() == '\'') &&
        view.back() == view.front()) {
      view = view.substr(1, view.size() - 2);
    }
    if (!view.empty()) return std::string(view);
  }
  return fallback;
}

std::string Hostname() {
  std::array<char, 256> buffer{};
  if (gethostname(buffer.data(), buffer.size() - 1) != 0) return "unknown";
  return {buffer.data()};
}

size_t PageSizeBytes() {
  const auto page = sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<size_t>(page) : 4096;
}

std::string NowUtcIso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  if (gmtime_r(&now, &utc) == nullptr) return {};
  std::array<char, 32> buffer{};
  const size_t length = std::strftime(buffer.data(), buffer.size(), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return {buffer.data(), length};
}

}  // namespace

size_t ParseCacheSizeBytes(std::string_view text) {
  text = Trim(text);
  if (text.empty()) return 0;
  uint64_t value = 0;
  const char* const first = text.data();
  const char* const last = text.data() + text.size();
  const auto [end, error] = std::from_chars(first, last, value);
  if (error != std::errc() || end == first) return 0;
  const std::string_view suffix(end, static_cast<size_t>(last - end));
  uint64_t multiplier = 1;
  if (suffix.empty()) {
    multiplier = 1;
  } else if (suffix == "K" || suffix == "k") {
    multiplier = uint64_t{1} << 10;
  } else if (suffix == "M" || suffix == "m") {
    multiplier = uint64_t{1} << 20;
  } else if (suffix == "G" || suffix == "g") {
    multiplier = uint64_t{1} << 30;
  } else {
    return 0;
  }
  if (value > std::numeric_limits<size_t>::max() / multiplier) return 0;
  return static_cast<size_t>(value * multiplier);
}

CacheSizes ReadCacheSizes(const std::filesystem::path& cache_dir) {
  CacheSizes sizes;
  std::error_code error;
  std::filesystem::directory_iterator it(cache_dir, error);
  if (error) return sizes;
  for (const std::filesystem::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("index")) continue;
    const std::string level = ReadFirstLine(entry.path() / "level");
    const std::string type = ReadFirstLine(entry.path() / "type");
    const size_t bytes = ParseCacheSizeBytes(ReadFirstLine(entry.path() / "size"));
    if (bytes == 0) continue;
    if (level == "1" && type == "Data") {
      sizes.l1d_bytes = bytes;
    } else if (level == "2" && type != "Instruction") {
      sizes.l2_bytes = bytes;
    } else if (level == "3" && type != "Instruction") {
      sizes.l3_bytes = bytes;
    }
  }
  return sizes;
}

std::string CpuSignatureOf(std::string_view cpuinfo) {
  constexpr std::array<std::string_view, 5> kKeys = {"vendor_id", "cpu family", "model",
                                                     "CPU implementer", "CPU part"};
  const std::array<std::string, 5> v = CpuinfoValues(cpuinfo, kKeys);
  if (!v[0].empty() && !v[1].empty() && !v[2].empty()) {
    return v[0] + " family " + v[1] + " model " + v[2];
  }
  if (!v[3].empty() && !v[4].empty()) return "ARM implementer " + v[3] + " part " + v[4];
  return {};
}

HostInfo ReadHostInfo() {
  HostInfo info;
  info.hostname = Hostname();
  const std::string cpuinfo = ReadWholeFile("/proc/cpuinfo");
  info.cpu_model = CpuModelOf(cpuinfo);
  info.cpu_signature = CpuSignatureOf(cpuinfo);
  const auto online = sysconf(_SC_NPROCESSORS_ONLN);
  info.logical_cpus = online > 0 ? static_cast<unsigned>(online) : 0;
  info.usable_cpus = UsableCpus();
  info.caches = ReadCacheSizes(kCpu0CacheDir);
  const auto pages = sysconf(_SC_PHYS_PAGES);
  info.memory_bytes = pages > 0 ? static_cast<size_t>(pages) * PageSizeBytes() : 0;

  utsname uts{};
  if (uname(&uts) == 0) {
    info.kernel = std::string(uts.sysname) + " " + uts.release;
    info.arch = uts.machine;
    info.os = OsPrettyName(uts.sysname);
  } else {
    info.kernel = "unknown";
    info.arch = "unknown";
    info.os = OsPrettyName("unknown");
  }

  info.compiler = FEATHER_COMPILER;
  info.build_type = FEATHER_BUILD_TYPE;
  if (info.build_type.empty()) info.build_type = "unknown";
  info.git_rev = FEATHER_GIT_REV;
  info.feather_version = FEATHER_VERSION;
  info.sanitized = FEATHER_SANITIZED != 0;
  info.cuda_compiler_present = FEATHER_CUDA_AT_BUILD != 0 || access(kNvccPath, X_OK) == 0;
  info.attention_isa =
      hw::attention_internal::AttentionIsaName(hw::attention_internal::ActiveAttentionIsa());
  info.gemm_kernel = hw::GemmKernelName(hw::DefaultGemmBackend());
  info.date_utc = NowUtcIso8601();
  return info;
}

nlohmann::json ToJson(const HostInfo& info) {
  return nlohmann::json{
      {"hostname", info.hostname},
      {"cpu_model", info.cpu_model},
      {"cpu_signature", info.cpu_signature},
      {"logical_cpus", info.logical_cpus},
      {"usable_cpus", info.usable_cpus},
      {"l1d_cache_bytes", info.caches.l1d_bytes},
      {"l2_cache_bytes", info.caches.l2_bytes},
      {"l3_cache_bytes", info.caches.l3_bytes},
      {"memory_bytes", info.memory_bytes},
      {"os", info.os},
      {"kernel", info.kernel},
      {"arch", info.arch},
      {"compiler", info.compiler},
      {"build_type", info.build_type},
      {"git_rev", info.git_rev},
      {"feather_version", info.feather_version},
      {"sanitized", info.sanitized},
      {"cuda_compiler_present", info.cuda_compiler_present},
      {"attention_isa", info.attention_isa},
      {"gemm_kernel", info.gemm_kernel},
      {"date_utc", info.date_utc},
  };
}

size_t PeakRssBytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0 || usage.ru_maxrss < 0) return 0;
  return static_cast<size_t>(usage.ru_maxrss) * 1024;  // Linux reports kilobytes
}

size_t CurrentRssBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t total_pages = 0;
  uint64_t resident_pages = 0;
  if (!(in >> total_pages >> resident_pages)) return 0;
  return static_cast<size_t>(resident_pages) * PageSizeBytes();
}

}  // namespace feather
