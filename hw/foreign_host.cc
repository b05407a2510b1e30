// foreign_host.cc: does a calibrated profile describe this machine (see foreign_host.h).
#include "hw/foreign_host.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace feather {
namespace {

bool Apart(double a, double b, double tolerance) {
  return a > 0 && b > 0 && std::fabs(a - b) > tolerance * std::max(a, b);
}

}  // namespace

HostIdentity IdentityOf(const HostInfo& host, double read_bw_bytes_per_s) {
  return {host.cpu_model, host.usable_cpus, host.caches.l3_bytes, read_bw_bytes_per_s};
}

HostIdentity IdentityOf(const ProfileMeasuredOn& m) {
  return {m.cpu_model, m.usable_cpus, m.l3_cache_bytes, m.read_bw_bytes_per_s};
}

std::string DescribeHost(const HostIdentity& h) {
  std::string text = h.cpu_model.empty() ? std::string("an unnamed CPU") : h.cpu_model;
  if (h.usable_cpus > 0) text += ", " + std::to_string(h.usable_cpus) + " CPUs";
  if (h.l3_cache_bytes > 0) text += ", L3 " + std::to_string(h.l3_cache_bytes >> 20) + " MiB";
  if (h.read_bw_bytes_per_s > 0) {
    char bw[32];
    std::snprintf(bw, sizeof bw, "%.1f", h.read_bw_bytes_per_s * 1e-9);
    text += std::string(", DRAM read ") + bw + " GB/s";
  }
  return text;
}

std::optional<std::string> ForeignHostDifference(const HostIdentity& profile,
                                                 const HostIdentity& host) {
  std::vector<std::string> differences;
  if (!profile.cpu_model.empty() && !host.cpu_model.empty() &&
      profile.cpu_model != host.cpu_model) {
    differences.emplace_back("CPU model");
  }
  if (profile.usable_cpus > 0 && host.usable_cpus > 0 &&
      profile.usable_cpus != host.usable_cpus) {
    differences.emplace_back("CPU count");
  }
  if (Apart(static_cast<double>(profile.l3_cache_bytes), static_cast<double>(host.l3_cache_bytes),
            kL3Tolerance)) {
    differences.emplace_back("L3 size");
  }
  if (Apart(profile.read_bw_bytes_per_s, host.read_bw_bytes_per_s, kReadBandwidthTolerance)) {
    differences.emplace_back("DRAM read bandwidth (over " +
                             std::to_string(static_cast<int>(kReadBandwidthTolerance * 100 + 0.5)) +
                             " % apart)");
  }
  if (differences.empty()) return std::nullopt;
  std::string what;
  for (const std::string& d : differences) what += (what.empty() ? "" : ", ") + d;
  return "measured on " + DescribeHost(profile) + "; this host: " + DescribeHost(host) +
         " (they differ in " + what + ")";
}

}  // namespace feather
