// foreign_host.cc: does a calibrated profile describe this machine (see foreign_host.h).
#include "hw/foreign_host.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace feather {
namespace {

bool Apart(double a, double b, double tolerance) {
  return a > 0 && b > 0 && std::fabs(a - b) > tolerance * std::max(a, b);
}

// The first word of `text`, up to a space or comma, less any "+suffix"
// ("eigen/avx512+skinny" -> "eigen/avx512", "avx2+fma" -> "avx2").
std::string_view IsaWord(std::string_view text) {
  text = text.substr(0, text.find_first_of(" ,"));
  return text.substr(0, text.find('+'));
}

std::string KernelsText(const KernelIds& k) {
  std::string text;
  if (!k.attention.empty()) text += "attention " + k.attention;
  if (!k.gemm.empty()) text += (text.empty() ? "gemm " : ", gemm ") + k.gemm;
  return text;
}

// Whether two recorded GEMMs differ: "eigen" (no ISA recorded) matches any Eigen build.
bool GemmsDiffer(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  if (a.find('/') == std::string::npos || b.find('/') == std::string::npos) {
    return a.substr(0, a.find('/')) != b.substr(0, b.find('/'));
  }
  return a != b;
}

}  // namespace

KernelIds KernelsOfVariant(std::string_view variant) {
  const std::string_view attention = IsaWord(variant);
  if (attention != "avx512bf16" && attention != "avx512" && attention != "avx2" &&
      attention != "scalar") {
    return {};
  }
  KernelIds ids{std::string(attention), {}};
  const size_t gemm = variant.find("gemm=");
  if (gemm != std::string_view::npos) ids.gemm = std::string(IsaWord(variant.substr(gemm + 5)));
  return ids;
}

KernelIds KernelsOfHost(const HostInfo& host) {
  return {std::string(IsaWord(host.attention_isa)), std::string(IsaWord(host.gemm_kernel))};
}

HostIdentity IdentityOf(const HostInfo& host, double read_bw_bytes_per_s,
                        double gemm_peak_flops_per_s) {
  return {host.cpu_model,     host.usable_cpus,    host.caches.l3_bytes, read_bw_bytes_per_s,
          host.cpu_signature, KernelsOfHost(host), gemm_peak_flops_per_s};
}

HostIdentity IdentityOf(const ProfileMeasuredOn& m, double gemm_peak_flops_per_s) {
  return {m.cpu_model,           m.usable_cpus,   m.l3_cache_bytes,
          m.read_bw_bytes_per_s, m.cpu_signature, KernelsOfVariant(m.kernel_variant),
          gemm_peak_flops_per_s, m.read_bw_low_bytes_per_s};
}

std::string DescribeHost(const HostIdentity& h) {
  std::string text = h.cpu_model.empty() ? std::string("an unnamed CPU") : h.cpu_model;
  if (!h.cpu_signature.empty()) text += " (" + h.cpu_signature + ")";
  if (h.usable_cpus > 0) text += ", " + std::to_string(h.usable_cpus) + " CPUs";
  if (h.l3_cache_bytes > 0) text += ", L3 " + std::to_string(h.l3_cache_bytes >> 20) + " MiB";
  if (const std::string kernels = KernelsText(h.kernels); !kernels.empty()) {
    text += ", kernels " + kernels;
  }
  if (h.read_bw_bytes_per_s > 0) {
    char bw[64];
    if (h.read_bw_low_bytes_per_s > 0 && h.read_bw_low_bytes_per_s < h.read_bw_bytes_per_s) {
      std::snprintf(bw, sizeof bw, "%.1f-%.1f", h.read_bw_low_bytes_per_s * 1e-9,
                    h.read_bw_bytes_per_s * 1e-9);
    } else {
      std::snprintf(bw, sizeof bw, "%.1f", h.read_bw_bytes_per_s * 1e-9);
    }
    text += std::string(", DRAM read ") + bw + " GB/s";
  }
  if (h.gemm_peak_flops_per_s > 0) {
    char flops[32];
    std::snprintf(flops, sizeof flops, "%.0f", h.gemm_peak_flops_per_s * 1e-9);
    text += std::string(", GEMM peak ") + flops + " GFLOP/s";
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
  if (!profile.cpu_signature.empty() && !host.cpu_signature.empty() &&
      profile.cpu_signature != host.cpu_signature) {
    differences.emplace_back("CPU signature");
  }
  const KernelIds& pk = profile.kernels;
  const KernelIds& hk = host.kernels;
  if ((!pk.attention.empty() && !hk.attention.empty() && pk.attention != hk.attention) ||
      GemmsDiffer(pk.gemm, hk.gemm)) {
    differences.emplace_back("kernels");
  }
  if (profile.usable_cpus > 0 && host.usable_cpus > 0 && profile.usable_cpus != host.usable_cpus) {
    differences.emplace_back("CPU count");
  }
  if (Apart(static_cast<double>(profile.l3_cache_bytes), static_cast<double>(host.l3_cache_bytes),
            kL3Tolerance)) {
    differences.emplace_back("L3 size");
  }
  // The profile's range of reads (one figure without read_bw_low_bytes_per_s): inside it is the
  // same host; outside, the nearer end is compared.
  const double low = profile.read_bw_low_bytes_per_s > 0
                         ? std::min(profile.read_bw_low_bytes_per_s, profile.read_bw_bytes_per_s)
                         : profile.read_bw_bytes_per_s;
  const double nearest = std::clamp(host.read_bw_bytes_per_s, low, profile.read_bw_bytes_per_s);
  if (Apart(nearest, host.read_bw_bytes_per_s, kReadBandwidthTolerance)) {
    differences.emplace_back("DRAM read bandwidth (over " +
                             std::to_string(static_cast<int>(kReadBandwidthTolerance * 100 + 0.5)) +
                             " % apart)");
  }
  if (Apart(profile.gemm_peak_flops_per_s, host.gemm_peak_flops_per_s, kGemmPeakTolerance)) {
    differences.emplace_back("GEMM peak (over " +
                             std::to_string(static_cast<int>(kGemmPeakTolerance * 100 + 0.5)) +
                             " % apart)");
  }
  if (differences.empty()) return std::nullopt;
  std::string what;
  for (const std::string& d : differences) what += (what.empty() ? "" : ", ") + d;
  return "measured on " + DescribeHost(profile) + "; this host: " + DescribeHost(host) +
         " (they differ in " + what + ")";
}

uint32_t CalibratedBlockTokens(const ProfileMeasuredOn& measured_on) {
  return measured_on.block_tokens > 0 ? measured_on.block_tokens : 16;
}

std::optional<std::string> BlockTokensDifference(const ProfileMeasuredOn& measured_on,
                                                 uint32_t block_tokens) {
  const uint32_t calibrated = CalibratedBlockTokens(measured_on);
  if (calibrated == block_tokens) return std::nullopt;
  return "calibrated with " + std::to_string(calibrated) + "-token KV pages; this run uses " +
         std::to_string(block_tokens) +
         " (serving.block_tokens), whose kernels read at another "
         "rate (calibrate with these pages: feather calibrate --block-tokens " +
         std::to_string(block_tokens) + ")";
}

}  // namespace feather
