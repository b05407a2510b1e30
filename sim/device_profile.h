// device_profile.h: the hardware numbers the cost model reads, with where each came from.
//
// A DeviceProfile has one field per parameter of the step-time model (sim/model_engine.h) and
// of the KV pool size (KvCacheBlocks), and nothing else, so that a calibration fit (calib/) can
// fill the fields one to one. Each parameter carries its provenance: `spec` (a public datasheet
// figure), `assumed` (a typical value no datasheet gives, to be replaced by calibration) or
// `measured` (written by calibration). Shipped profiles: results/profiles/*.yaml (schema in
// results/profiles/README.md).
//
// ProfileParameters() lists the parameters in a fixed order with their valid ranges; the loader
// and a calibration writer both walk that table. Loading is O(file size).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace feather {

enum class ParameterSource : uint8_t { kSpec, kAssumed, kMeasured };
[[nodiscard]] std::string_view ParameterSourceName(ParameterSource source);  // spec|assumed|...

inline constexpr size_t kNumProfileParameters = 17;

struct DeviceProfile {
  std::string name;    // short name, e.g. "rtx6000-ada"
  std::string device;  // marketing name of the device
  std::string notes;
  std::vector<std::string> provenance;  // the sources of the `spec` figures, one per entry

  // --- Capacity (KvCacheBlocks) ---
  double memory_bytes = 0;              // device memory capacity
  double activation_reserve_bytes = 0;  // activations, CUDA graphs, workspaces: not KV

  // --- Datasheet peaks ---
  double dram_bw_bytes_per_s = 0;  // HBM / GDDR peak bandwidth
  double dense_flops_per_s = 0;    // dense 16-bit tensor-core peak (FP32 accumulate)
  double sm_count = 0;             // streaming multiprocessors (vLLM's cascade heuristic)

  // --- Achieved fractions of the peaks ---
  double gemm_bw_efficiency = 0;     // weight streaming of the linear layers
  double gemm_flops_efficiency = 0;  // compute-bound linear layers
  double attn_bw_efficiency = 0;     // attention KV reads and writes from DRAM
  double attn_flops_efficiency = 0;  // compute-bound attention (prefill, cascade prefix pass)

  // --- Reuse of shared KV blocks through L2 without cascade ---
  double l2_bw_bytes_per_s = 0;  // effective bandwidth of KV reads served by L2
  double reuse_hit_max = 0;      // fraction of in-window repeat reads that hit L2
  double reuse_window_ctas = 0;  // decode-attention CTAs whose reads meet in L2 (a window)

  // --- Cascade attention ---
  double cascade_layer_ns = 0;                    // extra kernels (prefix pass, merge) per layer
  double cascade_merge_ns_per_request_layer = 0;  // merge work per request and layer

  // --- Fixed costs ---
  double step_fixed_ns = 0;   // per step: input preparation, sampling, launch gaps
  double layer_fixed_ns = 0;  // per layer and step: kernels outside CUDA graphs
  double per_request_ns = 0;  // per request and step: bookkeeping, sampling, output

  struct Origin {
    ParameterSource source = ParameterSource::kAssumed;
    std::string note;
  };
  std::array<Origin, kNumProfileParameters> origins{};  // in ProfileParameters() order
};

// One parameter of the profile: its YAML key, its field, and the range the loader enforces.
struct ProfileParameterInfo {
  std::string_view name;
  double DeviceProfile::*field;
  double min;
  bool min_exclusive;  // true: value > min; false: value >= min
  double max;          // inclusive
  bool integer;
  std::string_view meaning;
};
[[nodiscard]] std::span<const ProfileParameterInfo> ProfileParameters();

// Parses a profile (schema: results/profiles/README.md). `display_name` names the source in
// problems. Throws InputError naming file:line:key for every missing, mistyped, out-of-range or
// unknown field and every bad `source`, all at once.
[[nodiscard]] DeviceProfile ParseDeviceProfile(std::string_view yaml_text,
                                               const std::string& display_name);
// Reads and parses the file at `path`; an unreadable file is an InputError too.
[[nodiscard]] DeviceProfile LoadDeviceProfile(const std::string& path);

}  // namespace feather
